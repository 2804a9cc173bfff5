#!/usr/bin/env bash
# Fuzz the parsers that face the network: every cargo-fuzz target in fuzz/ for SECONDS
# each (default 180), one after the other, from its checked-in seeds (fuzz/corpus/TARGET,
# captured from real clients' traffic; docs/lab/fuzzing.md). Exits non-zero if any target
# finds a crash; the input that crashed is kept in fuzz/artifacts/TARGET/ and its
# reproduction command printed.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 server_h1 wire_h1
#
# Needs the nightly toolchain and cargo-fuzz (scripts/setup.sh installs both; this script
# installs cargo-fuzz itself when it is missing). The targets are built once, without a
# sanitizer (the code under test is safe Rust, where ASan adds little that a panic does
# not catch, and it slows every input) and with debug assertions, so an overflow is a
# crash. New inputs that grow coverage go to .ferry-run/fuzz/TARGET (kept between runs),
# never into the checked-in seeds.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECS="${1:-180}"
shift || true
CARGO_FUZZ_VERSION="0.13.1"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: FAILED: the nightly toolchain is missing (scripts/setup.sh installs it)" >&2
    exit 1
fi
if [[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    echo "fuzz: cargo install cargo-fuzz --version $CARGO_FUZZ_VERSION --locked"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked >/dev/null 2>&1 \
        || { echo "fuzz: FAILED: cargo-fuzz could not be installed" >&2; exit 1; }
fi

if (($#)); then targets=("$@"); else mapfile -t targets < <(cd fuzz && cargo fuzz list); fi
SECONDS=0
echo "fuzz: cargo +nightly fuzz build --sanitizer none --debug-assertions (${#targets[@]} targets)"
(cd fuzz && cargo +nightly fuzz build --sanitizer none --debug-assertions) || { echo "fuzz: FAILED: build" >&2; exit 1; }
echo "fuzz: built in ${SECONDS}s"
BIN="fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

status=0
printf '%-12s %8s %12s %10s  %s\n' target seconds execs execs/s result
for t in "${targets[@]}"; do
    work=".ferry-run/fuzz/$t"
    mkdir -p "$work" "fuzz/artifacts/$t"
    log=".ferry-run/fuzz/$t.log"
    started=$SECONDS
    # -timeout: one input taking 10 s is a hang (the targets' own time-outs are shorter).
    "$BIN/$t" "$work" "fuzz/corpus/$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    took=$((SECONDS - started))
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if ((rc == 0)); then
        result=ok
    else
        status=1
        crash=$(grep -o "fuzz/artifacts/$t/[a-z]*-[0-9a-f]*" "$log" | tail -1)
        result="CRASH (exit $rc): $crash; reproduce: $BIN/$t $crash; log: $log"
        grep -m1 -B2 -A12 "panicked at\|ERROR: libFuzzer" "$log" | sed 's/^/    /'
    fi
    printf '%-12s %8s %12s %10s  %s\n' "$t" "$took" "${execs:-?}" "${rate:-?}" "$result"
done
echo "fuzz: $([[ $status -eq 0 ]] && echo ok || echo FAILED) (${SECONDS}s in all)"
exit $status
