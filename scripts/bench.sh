#!/usr/bin/env bash
# The README's first command: set up a fresh machine, then run the lab's quick suite
# (`ferry bench all --quick`): every workload of docs/lab/README.md section 4 against `ferry serve`
# subprocesses with their emulation profiles, ferry's transports beside the peers (boto3,
# awscrt, obstore, s5cmd, rclone) and the ceilings (iperf3), then the claims table
# (published headline | measured | reproduced?) and PNG plots.
#
#   scripts/bench.sh                     the quick suite: `ferry bench all --quick` took
#                                        315 s on 2 cores with nothing else running (a clean
#                                        clone), every row, peers included, in 3 repeats; each
#                                        workload 26-52 s (mixed-hol 52 s, bulk-wan 47 s
#                                        across the 110 ms link).
#                                        parquet-scan joined the suite later (30 s alone,
#                                        quick; its rows need the Python peers).
#                                        The table after the claims gives each workload's time.
#   scripts/bench.sh --repeats 1         extra flags go to `ferry bench all`
#   FERRY_BENCH_FULL=1 scripts/bench.sh  the published sizes (hours)
#
# Then, where setup built MinIO (.ferry-run/minio-bin), the same workloads against MinIO
# (`ferry bench --endpoint-url`), so the suite is not only a home game: small-objects, a
# large GET (bulk-get, 256 MiB), vectored, listing and cli-transfer (its small files),
# their JSON lines in bench-results-minio.jsonl (the plots stay ferry serve's). bulk-get
# and cli-transfer are not in `ferry bench all`, so they run against ferry serve here
# too. It ends with the claims table of both servers side by side (`ferry bench claims
# --with`; docs/lab/minio-vs-serve.md). FERRY_BENCH_NO_MINIO=1 leaves it out;
# FERRY_BENCH_ONLY_MINIO=1 runs only this part (after setup), reading ferry serve's side
# of the three suite workloads from the latest runs already in the JSON lines.
#
# Output: the Markdown tables on stdout, JSON lines appended to bench-results.jsonl, plots
# in bench-results-plots/. As root, bulk-wan runs across the emulated transatlantic link
# (network namespaces, torn down at the end); without root it says so and uses loopback.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
bash scripts/bench-setup.sh

OUT="${FERRY_BENCH_OUT:-bench-results.jsonl}"
MINIO_OUT="${OUT%.jsonl}-minio.jsonl"
size=(--quick)
[[ -n "${FERRY_BENCH_FULL:-}" ]] && size=()
if [[ -z "${FERRY_BENCH_ONLY_MINIO:-}" ]]; then
    target/release/ferry bench all "${size[@]}" --out "$OUT" "$@"
fi

if [[ -s .ferry-run/minio-bin && -z "${FERRY_BENCH_NO_MINIO:-}" ]]; then
    # MinIO on a free port, its data in a temporary directory; both gone at exit.
    minio_dir="$(mktemp -d -t ferry-bench-minio.XXXXXX)"
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    MINIO_ROOT_USER=ferrybench MINIO_ROOT_PASSWORD=ferry-bench-secret MINIO_BROWSER=off \
        "$(cat .ferry-run/minio-bin)" server "$minio_dir/data" --address "127.0.0.1:$port" --quiet \
        >"$minio_dir/minio.log" 2>&1 </dev/null &
    minio_pid=$!
    trap 'kill "$minio_pid" 2>/dev/null; wait "$minio_pid" 2>/dev/null; rm -rf "$minio_dir"' EXIT
    # Ready once an anonymous ListBuckets is refused (403) rather than unanswered or 503.
    for _ in $(seq 200); do
        [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/" || true)" == 403 ]] && break
        sleep 0.3
    done
    # Each workload with its arguments: the large GET is 256 MiB (MinIO stores it on its
    # disk first, untimed), cli-transfer its small files (the large set writes 1 GiB per
    # tool per repeat to MinIO's disk).
    workloads=("small-objects" "bulk-get --size 256MiB" "vectored" "listing" "cli-transfer --set small")
    # Not in `ferry bench all`: ferry serve's side of these runs here.
    for w in "bulk-get --size 256MiB" "cli-transfer --set small"; do
        read -ra args <<<"$w"
        target/release/ferry bench "${args[@]}" "${size[@]}" --out "$OUT"
    done
    for w in "${workloads[@]}"; do
        read -ra args <<<"$w"
        AWS_ACCESS_KEY_ID=ferrybench AWS_SECRET_ACCESS_KEY=ferry-bench-secret \
            target/release/ferry bench "${args[@]}" "${size[@]}" --endpoint-url "http://127.0.0.1:$port" \
            --out "$MINIO_OUT"
    done
    target/release/ferry bench claims "$OUT" --with "$MINIO_OUT" --with-name MinIO
fi

if [[ -x .ferry-run/bench-venv/bin/python ]]; then
    .ferry-run/bench-venv/bin/python bench/plot.py "$OUT" --out "${OUT%.jsonl}-plots"
else
    echo "bench: no plots: the bench virtualenv (.ferry-run/bench-venv, matplotlib) is missing; see .ferry-run/bench-setup-*.log"
fi
