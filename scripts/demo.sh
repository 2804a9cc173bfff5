#!/usr/bin/env bash
# The README's first command: set up, start `ferry serve` in the background, push a few
# objects through it with a real S3 client (boto3) and print what happened.
# The server is always stopped on exit. (Later this becomes the benchmark suite.)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh

RUN="$ROOT/.ferry-run"
mkdir -p "$RUN"
OUT="$RUN/demo-server.out"
ERR="$RUN/demo-server.err"
: >"$OUT"

target/release/ferry serve --addr 127.0.0.1:0 --memory >"$OUT" 2>"$ERR" &
SERVER_PID=$!
stop_server() {
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
    fi
    wait "$SERVER_PID" 2>/dev/null || true
}
trap stop_server EXIT INT TERM

# Wait for "listening on http://HOST:PORT" (30 s at most).
ENDPOINT=""
for _ in $(seq 300); do
    ENDPOINT="$(sed -n 's/.*listening on \(https\{0,1\}:\/\/[^ ]*\).*/\1/p' "$OUT" | head -n1)"
    [[ -n "$ENDPOINT" ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [[ -z "$ENDPOINT" ]]; then
    echo "demo: ferry serve did not start; its output:" >&2
    cat "$OUT" "$ERR" >&2
    exit 1
fi
sleep 0.2  # the credential lines follow the listening line
ACCESS_KEY="$(sed -n 's/.*access key: *//p' "$OUT" | head -n1)"
# The server prints its secret only when it is the built-in one.
SECRET_KEY="$(sed -n '/not printed/!s/.*secret key: *\([^ ]*\).*/\1/p' "$OUT" | head -n1)"

echo "ferry serve is listening on $ENDPOINT (pid $SERVER_PID)"
FERRY_ENDPOINT="$ENDPOINT" FERRY_ACCESS_KEY="${ACCESS_KEY:-${AWS_ACCESS_KEY_ID:-ferry}}" \
FERRY_SECRET_KEY="${SECRET_KEY:-${AWS_SECRET_ACCESS_KEY:-ferry-secret}}" \
    "$ROOT/.venv/bin/python" "$ROOT/scripts/demo.py"
