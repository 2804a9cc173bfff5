#!/usr/bin/env bash
# Fuzz the parsers that face the network: every cargo-fuzz target in fuzz/ for SECONDS
# each (default 180), from its checked-in seeds (fuzz/corpus/TARGET, captured from real
# clients' traffic; docs/lab/fuzzing.md). Exits non-zero if any target finds a crash or
# does not finish; the input that crashed is kept in fuzz/artifacts/TARGET/ and its
# reproduction command printed.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 600 server_h1 wire_h1
#
# Each libFuzzer process is single-threaded, so FERRY_FUZZ_JOBS targets (default: one per
# CPU, `nproc`) run at once, each for its full SECONDS: two cores fuzz two targets in the
# time of one, and no target gets less time than asked. The table is printed in target
# order once all have finished.
#
# Needs the nightly toolchain and cargo-fuzz at a pinned version; this script installs
# each the first time (cargo-fuzz compiles for a few minutes). scripts/test.sh does not
# run it: the workspace's tests run every checked-in seed through the targets' checks
# (fuzz/src/lib.rs says how), and the search for new inputs is this run, by hand.
#
# The targets are built once, without a sanitizer (the code under test is safe Rust,
# where ASan adds little that a panic does not catch, and it slows every input) and with
# debug assertions, so an overflow is a crash. The build goes to target/fuzz
# (FERRY_FUZZ_TARGET_DIR), beside the stable build: whatever keeps target/ between runs
# (a CI cache, a developer's checkout) keeps the instrumented dependency tree too, and
# only the workspace crates are rebuilt. New inputs that grow coverage go to
# .ferry-run/fuzz/TARGET (kept between runs), never into the checked-in seeds.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SECS="${1:-180}"
shift || true
CARGO_FUZZ_VERSION="0.13.1"
JOBS="${FERRY_FUZZ_JOBS:-$(nproc)}"
TARGET_DIR="${FERRY_FUZZ_TARGET_DIR:-$ROOT/target/fuzz}"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FAILED: FERRY_FUZZ_JOBS must be a positive integer, not '$JOBS'" >&2; exit 1; }

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: rustup toolchain install nightly --profile minimal"
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 \
        || { echo "fuzz: FAILED: the nightly toolchain could not be installed" >&2; exit 1; }
fi
if [[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    echo "fuzz: cargo install cargo-fuzz --version $CARGO_FUZZ_VERSION --locked"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked >/dev/null 2>&1 \
        || { echo "fuzz: FAILED: cargo-fuzz could not be installed" >&2; exit 1; }
fi

if (($#)); then targets=("$@"); else mapfile -t targets < <(cd fuzz && cargo fuzz list); fi
((${#targets[@]})) || { echo "fuzz: FAILED: no targets (cargo fuzz list printed none)" >&2; exit 1; }
SECONDS=0
echo "fuzz: cargo +nightly fuzz build --sanitizer none --debug-assertions --target-dir $TARGET_DIR (${#targets[@]} targets)"
(cd fuzz && cargo +nightly fuzz build --sanitizer none --debug-assertions --target-dir "$TARGET_DIR") \
    || { echo "fuzz: FAILED: build" >&2; exit 1; }
echo "fuzz: built in ${SECONDS}s; running ${#targets[@]} targets, $JOBS at a time, ${SECS}s each"
BIN="$TARGET_DIR/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

# run_target T: one libFuzzer run; its exit code goes to .ferry-run/fuzz/T.rc (written
# last, so a run that died before it is seen as one that did not finish) and its wall
# time to T.took.
run_target() {
    local t="$1" work=".ferry-run/fuzz/$1" log=".ferry-run/fuzz/$1.log" started=$SECONDS rc
    # -timeout: one input taking 10 s is a hang (the targets' own time-outs are shorter).
    "$BIN/$t" "$work" "fuzz/corpus/$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1
    rc=$?
    echo $((SECONDS - started)) >".ferry-run/fuzz/$t.took"
    echo "$rc" >".ferry-run/fuzz/$t.rc"
}

for t in "${targets[@]}"; do
    [[ -x "$BIN/$t" ]] || { echo "fuzz: FAILED: no such target: $t (cargo fuzz list)" >&2; exit 1; }
    mkdir -p ".ferry-run/fuzz/$t" "fuzz/artifacts/$t"
    rm -f ".ferry-run/fuzz/$t.rc" ".ferry-run/fuzz/$t.took"
done
pids=()
# Stopped (Ctrl-C, or test.sh ending early), it stops the fuzzers it started.
stop_all() {
    local p
    for p in "${pids[@]}"; do pkill -TERM -P "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
    exit 130
}
trap stop_all INT TERM
# At most JOBS at once: `wait -n` returns as soon as any one of them has ended (also one
# that ended before it was called), and that frees a slot.
running=0
for t in "${targets[@]}"; do
    if ((running >= JOBS)); then
        wait -n
        running=$((running - 1))
    fi
    run_target "$t" &
    pids+=($!)
    running=$((running + 1))
done
wait "${pids[@]}"

status=0
printf '%-12s %8s %12s %10s  %s\n' target seconds execs execs/s result
for t in "${targets[@]}"; do
    log=".ferry-run/fuzz/$t.log"
    rc=$(cat ".ferry-run/fuzz/$t.rc" 2>/dev/null || echo "none")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [[ $rc == 0 ]]; then
        result=ok
    else
        status=1
        crash=$(grep -o "fuzz/artifacts/$t/[a-z]*-[0-9a-f]*" "$log" | tail -1)
        result="CRASH (exit $rc): ${crash:-no input kept}; reproduce: $BIN/$t $crash; log: $log"
        grep -m1 -B2 -A12 "panicked at\|ERROR: libFuzzer" "$log" | sed 's/^/    /'
    fi
    printf '%-12s %8s %12s %10s  %s\n' "$t" "$(cat ".ferry-run/fuzz/$t.took" 2>/dev/null || echo '?')" \
        "${execs:-?}" "${rate:-?}" "$result"
done
echo "fuzz: $([[ $status -eq 0 ]] && echo ok || echo FAILED) (${SECONDS}s in all)"
exit $status
