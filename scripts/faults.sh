#!/usr/bin/env bash
# The fault matrix (tests/test_faults.py, the test_matrix_* cells) over N seeds, and its
# table: faults x operations x outcome, with the runs per cell.
#
#   scripts/faults.sh                 # one seed (what `pytest tests` runs too)
#   scripts/faults.sh --seeds 10      # ten seeds per cell; table to stdout and
#                                     # .ferry-run/fault-matrix.md
#
# As root it also runs the emulated link's cells (test_matrix_link*: `ferry cp` across
# `ferry bench link-hold` with 1% loss, reordering, a 3 s cut, and a cut for good; the
# cut for good runs here for every operation, FERRY_FAULT_LONG=1, and in `pytest tests`
# for one; FERRY_FAULT_LONG=0 leaves the others out). The cut for good runs `ferry cp`
# with short time-outs (--timeout 3 --connect-timeout 2 --retries 3, ~10-17 s a cell);
# FERRY_FAULT_CUT_DEFAULTS=1 runs it with ferry's defaults instead (minutes a cell).
#
# Each cell injects one fault at a point its seed picks, then checks the promise: the
# operation completed and verified byte for byte, or it failed with one clear error line
# per object and left nothing partial under a final name, and its re-run completed. A
# cell that breaks the promise fails its test; the table counts outcomes of the rest.
# Needs target/release/ferry (scripts/setup.sh builds it) and .venv's pytest.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
seeds=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --seeds) seeds=$2; shift 2 ;;
        *) echo "usage: scripts/faults.sh [--seeds N]" >&2; exit 2 ;;
    esac
done
PYTEST=.venv/bin/pytest
[[ -x $PYTEST ]] || PYTEST=pytest
mkdir -p .ferry-run
xml=.ferry-run/fault-matrix.xml
status=0
FERRY_FAULT_LONG=${FERRY_FAULT_LONG:-1} FERRY_FAULT_SEEDS=$seeds "$PYTEST" tests/test_faults.py -k matrix -q -p no:cacheprovider \
    -o junit_family=xunit1 --junitxml="$xml" || status=$?
python3 - "$xml" "$seeds" > .ferry-run/fault-matrix.md <<'PY'
import collections, re, sys
import xml.etree.ElementTree as ET

xml, seeds = sys.argv[1], sys.argv[2]
cells = collections.OrderedDict()
for tc in ET.parse(xml).iter("testcase"):
    m = re.match(r"test_matrix_(\w+)\[(?:(.*)-)?(\d+)\]$", tc.get("name"))
    if not m:
        continue
    fault, params = m.group(1), m.group(2) or "sync-up"
    props = {p.get("name"): p.get("value") for p in tc.iter("property")}
    if tc.find("failure") is not None or tc.find("error") is not None:
        outcome = "BROKE THE PROMISE (test failed)"
    elif tc.find("skipped") is not None:
        outcome = "skipped: " + (tc.find("skipped").get("message") or "")
    else:
        outcome = props.get("outcome", "?")
    # An outcome may carry its run's detail in brackets ("failed-clean-rerun-ok (gave up
    # 12 s into the cut)"): runs are counted by the outcome, and the details kept beside it.
    base, _, detail = outcome.partition(" (")
    detail = detail[:-1] if detail.endswith(")") else detail
    entry = cells.setdefault((fault, params), {}).setdefault(base, [0, collections.Counter()])
    entry[0] += 1
    if detail:
        entry[1][detail] += 1

def said(base, runs, details):
    if not details:
        return f"{base} x{runs}"
    notes = "; ".join(d if n == 1 else f"{d} x{n}" for d, n in details.most_common())
    return f"{base} x{runs} ({notes})"

print(f"| fault | operation | runs | outcomes (seeds 1..{seeds}) |")
print("|---|---|---|---|")
for (fault, params), outcomes in cells.items():
    ranked = sorted(outcomes.items(), key=lambda kv: -kv[1][0])
    line = ", ".join(said(base, runs, details) for base, (runs, details) in ranked)
    total = sum(runs for runs, _ in outcomes.values())
    print(f"| {fault} | {params} | {total} | {line} |")
PY
cat .ferry-run/fault-matrix.md
exit $status
