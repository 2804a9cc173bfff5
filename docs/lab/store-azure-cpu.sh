#!/usr/bin/env bash
# Client CPU of `ferry cp -r URL DIR/` for 1,000 objects of 16 KiB, per provider, side by
# side: Azure (Azurite), S3 (ferry serve, as fast as it goes and paced to a 60 ms first
# byte, about Azurite's pace here), GCS (fake-gcs-server), each downloaded into a tmpfs
# directory and into a directory on the disk that held the previous copy (removed just
# before, as scripts/bench-providers.py does). Repeats interleaved; medians.
# What it showed: docs/lab/store-azure-azurite.md, "Client CPU of small downloads".
#
#   bash docs/lab/store-azure-cpu.sh [REPEATS]      # after cargo build --release -p ferry-cli
#
# Needs scripts/setup.sh (Azurite, fake-gcs-server) and GNU time. Prints one line per run
# and a table of medians: CPU (user + system) per 1,000 objects, wall time, voluntary
# context switches.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
FERRY=${FERRY:-$ROOT/target/release/ferry}
N=${1:-5}
AZ=${FERRY_AZURITE:-$(cat "$ROOT/.ferry-run/azurite-bin" 2>/dev/null || ls "$HOME"/.cache/ferry/azurite-*/node_modules/.bin/azurite-blob | tail -1)}
GCS=${FERRY_FAKE_GCS:-$(cat "$ROOT/.ferry-run/fake-gcs-bin" 2>/dev/null || ls "$HOME"/.cache/ferry/bin/fake-gcs-server-* | tail -1)}
W=$(mktemp -d "${TMPDIR:-/tmp}/ferry-azure-cpu.XXXXXX")
SHM=$(mktemp -d /dev/shm/ferry-azure-cpu.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$W" "$SHM"' EXIT

"$AZ" --blobHost 127.0.0.1 --blobPort 0 --inMemoryPersistence --skipApiVersionCheck --disableTelemetry --loose >"$W/az.log" 2>&1 &
pids+=($!)
"$FERRY" serve --addr 127.0.0.1:0 --memory >"$W/s3.log" 2>&1 &
pids+=($!)
"$FERRY" serve --addr 127.0.0.1:0 --memory --ttfb-p50 60ms >"$W/s3p.log" 2>&1 &
pids+=($!)
GCSPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$GCS" -scheme http -host 127.0.0.1 -port "$GCSPORT" -backend memory >"$W/gcs.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    grep -q "successfully listens" "$W/az.log" && grep -q listening "$W/s3.log" && grep -q listening "$W/s3p.log" && break
    sleep 0.2
done
port() { grep -o "http://127.0.0.1:[0-9]*" "$1" | head -1; }
KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
export AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=$KEY;BlobEndpoint=$(port "$W/az.log")/devstoreaccount1;"
export STORAGE_EMULATOR_HOST=http://127.0.0.1:$GCSPORT
export AWS_ACCESS_KEY_ID=ferry AWS_SECRET_ACCESS_KEY=ferry-secret AWS_REGION=us-east-1
S3=$(port "$W/s3.log") S3P=$(port "$W/s3p.log")

mkdir -p "$W/src"
for i in $(seq 1000); do head -c 16384 /dev/urandom >"$W/src/f$i"; done
for t in "az://bench $S3" "s3://bench $S3" "s3://bench $S3P" "gs://bench $S3"; do
    set -- $t
    AWS_ENDPOINT_URL=$2 "$FERRY" -q mb "$1"
    AWS_ENDPOINT_URL=$2 "$FERRY" -q cp -r "$W/src/" "$1/small/"
done

targets=("az $S3 az://bench/small/" "s3 $S3 s3://bench/small/" "s3-paced $S3P s3://bench/small/" "gcs $S3 gs://bench/small/")
: >"$W/runs"
for r in $(seq "$N"); do
    for dest in tmpfs disk; do
        base=$SHM; [[ $dest == disk ]] && base=$W
        for t in "${targets[@]}"; do
            set -- $t
            rm -rf "$base/out"
            AWS_ENDPOINT_URL=$2 /usr/bin/time -o "$W/t" -f "%e %U %S %w" "$FERRY" -q cp -r "$3" "$base/out/"
            [[ $(ls "$base/out" | wc -l) == 1000 ]] || { echo "$1: not 1000 files" >&2; exit 1; }
            read -r wall user sys waits <"$W/t"
            echo "$1 $dest $wall $user $sys $waits" | tee -a "$W/runs" |
                awk '{printf "%-9s %-6s wall %6.2f s  cpu %4.0f ms (user %4.0f, sys %4.0f)  waits %6d\n",$1,$2,$3,($4+$5)*1000,$4*1000,$5*1000,$6}'
        done
    done
done
echo
echo "| target | into | CPU per 1,000 objects (median ms) | runs (ms) | wall (median s) | voluntary context switches |"
echo "|---|---|---:|---|---:|---:|"
python3 - "$W/runs" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    t, d, wall, user, sys_, waits = line.split()
    rows.setdefault((t, d), []).append((float(wall), (float(user) + float(sys_)) * 1000, int(waits)))
for (t, d), runs in rows.items():
    cpu = [c for _, c, _ in runs]
    print(f"| {t} | {d} | {statistics.median(cpu):.0f} | {', '.join(f'{c:.0f}' for c in cpu)} | "
          f"{statistics.median(w for w, _, _ in runs):.2f} | {statistics.median(x for _, _, x in runs):.0f} |")
EOF
