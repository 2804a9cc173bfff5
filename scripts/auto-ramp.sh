#!/usr/bin/env bash
# auto against the forced transports on a batch of small downloads that a listing drives:
# `ferry cp -r` down of OBJECTS x 16 KiB from `ferry serve --memory --ttfb-p50 TTFB`
# (lognormal first byte, p99 5x), each transport in turn per repeat (auto, h1-pool,
# h1-pipeline, then again), and the wall time of each copy. With --bin-b a second
# binary (a build before a change) runs in the same rounds, right after the first.
#
# What it shows (docs/lab/wire-auto-paced.md): whether auto's controller grows to the
# batch's concurrency as fast as the forced transports' do. Nothing is asserted: the
# script measures and reports a Markdown table on stdout. Only loopback; the server is
# killed at exit and the scratch directory removed.
#
# Usage: scripts/auto-ramp.sh [--bin PATH] [--bin-b PATH] [--repeats N] [--objects N]
#                             [--ttfb 60ms] [--profile lan|s3|gcs|azure]
#   --profile   serve with an emulation profile instead of --ttfb-p50 (its own first byte)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/release/ferry"
BIN_B=""
REPEATS=3
OBJECTS=1000
TTFB="60ms"
PROFILE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --bin-b) BIN_B="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --objects) OBJECTS="$2"; shift 2 ;;
    --ttfb) TTFB="$2"; shift 2 ;;
    --profile) PROFILE="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "no ferry binary at $BIN (cargo build --release -p ferry-cli)" >&2; exit 1; }

WORK="$(mktemp -d /tmp/auto-ramp.XXXXXX)"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
if [ -n "$PROFILE" ]; then SERVE_FLAGS=(--profile "$PROFILE"); else SERVE_FLAGS=(--ttfb-p50 "$TTFB"); fi
"$BIN" serve --memory --anonymous --addr "127.0.0.1:$PORT" "${SERVE_FLAGS[@]}" >"$WORK/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=ferry AWS_SECRET_ACCESS_KEY=ferry AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"

python3 - "$WORK/src" "$OBJECTS" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = f"{root}/p{i % 16}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/o{i:05}", "wb") as f:
        f.write(os.urandom(16384))
PY
"$BIN" mb s3://ramp >/dev/null
"$BIN" --transport h1-pool cp -r "$WORK/src/" s3://ramp/d/ >/dev/null

bins=("$BIN"); [ -n "$BIN_B" ] && bins+=("$BIN_B")
echo "| repeat | binary | auto s | h1-pool s | h1-pipeline s | auto / best forced |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$REPEATS"); do
  for b in "${bins[@]}"; do
    declare -A took=()
    for t in auto h1-pool h1-pipeline; do
      rm -rf "$WORK/dst"; mkdir "$WORK/dst"
      s=$(date +%s.%N)
      timeout 120 "$b" --transport "$t" cp -r s3://ramp/d/ "$WORK/dst/" >/dev/null || echo "cp $t failed" >&2
      e=$(date +%s.%N)
      n=$(find "$WORK/dst" -type f | wc -l)
      [ "$n" -eq "$OBJECTS" ] || echo "$t: $n of $OBJECTS files" >&2
      took[$t]=$(python3 -c "print(f'{$e - $s:.2f}')")
    done
    ratio=$(python3 -c "a,p,q=${took[auto]},${took[h1-pool]},${took[h1-pipeline]}; print(f'{min(p,q)/a:.2f}')")
    echo "| $r | $(basename "$b") | ${took[auto]} | ${took[h1-pool]} | ${took[h1-pipeline]} | $ratio |"
  done
done
echo
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
