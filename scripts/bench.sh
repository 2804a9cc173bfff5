#!/usr/bin/env bash
# The README's first command: set up a fresh machine, then run the lab's quick suite
# (`ferry bench all --quick`): every workload of docs/lab/README.md section 4 against `ferry serve`
# subprocesses with their emulation profiles, ferry's transports beside the peers (boto3,
# awscrt, obstore, s5cmd, rclone) and the ceilings (iperf3), then the claims table
# (published headline | measured | reproduced?) and PNG plots.
#
#   scripts/bench.sh                     the quick suite: 315 s of `ferry bench all --quick`
#                                        on 2 cores, nothing else running (c8e5901, clean clone),
#                                        every row, peers included, in 3 repeats; each
#                                        workload 26-52 s (mixed-hol 52 s, bulk-wan 47 s
#                                        across the 110 ms link).
#                                        The table after the claims gives each workload's time.
#   scripts/bench.sh --repeats 1         extra flags go to `ferry bench all`
#   FERRY_BENCH_FULL=1 scripts/bench.sh  the published sizes (hours)
#
# Then, where setup built MinIO (.ferry-run/minio-bin), small-objects, vectored and listing
# again against MinIO (`ferry bench --endpoint-url`), so the suite is not only a home game:
# ~2.5 minutes more on 2 busy cores (docs/lab/minio-vs-serve.md), their JSON lines in
# bench-results-minio.jsonl (the plots stay ferry serve's). FERRY_BENCH_NO_MINIO=1 leaves
# them out.
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
size=(--quick)
[[ -n "${FERRY_BENCH_FULL:-}" ]] && size=()
target/release/ferry bench all "${size[@]}" --out "$OUT" "$@"

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
    for workload in small-objects vectored listing; do
        AWS_ACCESS_KEY_ID=ferrybench AWS_SECRET_ACCESS_KEY=ferry-bench-secret \
            target/release/ferry bench "$workload" "${size[@]}" --endpoint-url "http://127.0.0.1:$port" \
            --out "${OUT%.jsonl}-minio.jsonl"
    done
fi

if [[ -x .ferry-run/bench-venv/bin/python ]]; then
    .ferry-run/bench-venv/bin/python bench/plot.py "$OUT" --out "${OUT%.jsonl}-plots"
else
    echo "bench: no plots: the bench virtualenv (.ferry-run/bench-venv, matplotlib) is missing; see .ferry-run/bench-setup-*.log"
fi
