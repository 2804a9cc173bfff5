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

if [[ -x .ferry-run/bench-venv/bin/python ]]; then
    .ferry-run/bench-venv/bin/python bench/plot.py "$OUT" --out "${OUT%.jsonl}-plots"
else
    echo "bench: no plots: the bench virtualenv (.ferry-run/bench-venv, matplotlib) is missing; see .ferry-run/bench-setup-*.log"
fi
