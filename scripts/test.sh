#!/usr/bin/env bash
# Set up (scripts/setup.sh), then run every check and test: the pytest suite in tests/
# that drives the real `ferry serve` with real clients (boto3, AWS CLI, s5cmd, rclone,
# curl, h2load, raw sockets, the Python package), beside it the Rust checks (cargo fmt,
# clippy with warnings as errors) and the test build, then the Rust workspace tests
# (among them every fuzz target's checked-in seeds, crates/cli/tests/fuzz_seeds.rs).
# Exits non-zero if anything fails. Each phase prints its time; docs/lab/ci.md says where
# the time goes and how to measure it again. Coverage-guided fuzzing is a run of its own,
# by hand: scripts/fuzz.sh (docs/lab/fuzzing.md).
#
# Extra arguments go to pytest, e.g. `scripts/test.sh -k boto3 -x`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
run_started=$(date +%s)

bash scripts/setup.sh || exit 1
bash scripts/bench-setup.sh || exit 1  # the bench's peers (boto3, awscrt, obstore, s5cmd, s3fs) and .ferry-run/peers.json
echo "== setup: ok ($(($(date +%s) - run_started))s)"

status=0
# What the test runs print also goes to a log, so that the end of this script can say
# again, in a few lines, which tests failed and what each said: a failure's message is
# otherwise thousands of lines above the end of a run, where a reader of its tail (or a
# CI log cut to its head and tail) never sees it.
mkdir -p .ferry-run
test_log=.ferry-run/test-output.log
: >"$test_log"
cargo_test() {
    cargo test "$@" 2>&1 | tee -a "$test_log"
    return "${PIPESTATUS[0]}"
}
# The client's conformance suite also runs against MinIO when setup.sh could build it.
if [[ -s .ferry-run/minio-bin ]]; then
    export FERRY_MINIO="$(cat .ferry-run/minio-bin)"
else
    echo "== SKIPPED: MinIO is not available, so the conformance tests against a third-party S3 server will not run"
fi
# The Google Cloud Storage client's tests run against fake-gcs-server when setup.sh could build it.
if [[ -s .ferry-run/fake-gcs-bin ]]; then
    export FERRY_FAKE_GCS="$(cat .ferry-run/fake-gcs-bin)"
else
    echo "== SKIPPED: fake-gcs-server is not available, so the Google Cloud Storage tests against an emulator will not run"
fi
# ... and against Azurite (Azure Blob Storage) when setup.sh could install it.
if [[ -s .ferry-run/azurite-bin ]]; then
    export FERRY_AZURITE="$(cat .ferry-run/azurite-bin)"
else
    echo "== SKIPPED: Azurite is not available, so the Azure tests will not run"
fi
# ... and the instance metadata credentials test against ec2-metadata-mock.
if [[ -s .ferry-run/ec2-metadata-mock-bin ]]; then
    export FERRY_EC2_METADATA_MOCK="$(cat .ferry-run/ec2-metadata-mock-bin)"
else
    echo "== SKIPPED: ec2-metadata-mock is not available, so the instance metadata credentials test will not run"
fi
# From here two things run at once, each at its own priority, because each mostly
# leaves the machine to the other (docs/lab/ci.md has the figures):
#   - pytest (tests/), at normal priority, from now until it ends: it needs only what
#     setup built (target/release/ferry and the Python package), and its tests mostly
#     wait, on the servers and emulators they start, on clients' start-up, on sockets
#     and time-outs;
#   - the Rust build (fmt, clippy, the test build), at nice 10: compute that fills the
#     cores pytest leaves idle, and yields them when a test needs them, so a test's
#     time-out is not eaten by a compiler. The Rust test runs wait for pytest to end, so
#     no test of one suite ever runs beside a test of the other.
# pytest's output goes to a log of its own, printed whole when it ends; its exit status
# counts.
SECONDS=0
pytest_log=.ferry-run/pytest.log
echo "== pytest tests, in the background (log: $pytest_log)"
# Per-test timeout: a hung server or client fails its own test, not the whole run. The 20
# slowest tests are listed at the end, so each run's log says where pytest's time went.
(
    started=$SECONDS
    .venv/bin/pytest tests -q --timeout="${FERRY_TEST_TIMEOUT:-180}" --durations=20 "$@" >"$pytest_log" 2>&1
    rc=$?
    echo "== pytest: $([[ $rc -eq 0 ]] && echo ok || echo "FAILED (exit $rc)") ($((SECONDS - started))s)" >>"$pytest_log"
    exit $rc
) &
pytest_pid=$!

# A run that stops early leaves neither pytest nor the second lane of Rust test runs
# (below) behind; each stops its servers on TERM.
trap '[[ -n $pytest_pid ]] && pkill -TERM -P "$pytest_pid" 2>/dev/null; [[ -n ${ignored_pid:-} ]] && pkill -TERM -P "$ignored_pid" 2>/dev/null' EXIT

echo "== cargo fmt --check (width and rules in rustfmt.toml)"
nice -n 10 cargo fmt --all -- --check || status=1
echo "== cargo clippy --workspace --all-targets -- -D warnings"
# --release: clippy's check of the dependencies is then shared with nothing else, but its
# profile matches the test build's, so its warnings are the tested code's.
nice -n 10 cargo clippy --workspace --all-targets --release -- -D warnings || status=1
echo "== fmt, clippy: (${SECONDS}s)"
# --release --workspace: the same packages, so the same features, as setup.sh's build
# and maturin's, so the test build compiles only the tests.
echo "== cargo test --workspace --release (build)"
phase=$SECONDS
nice -n 10 cargo test --workspace --release --no-run || status=1
echo "== cargo test: built ($((SECONDS - phase))s)"

phase=$SECONDS
wait "$pytest_pid"
rc=$?
pytest_pid=""
echo "== pytest tests, ended (its whole output; its last line is its time):"
cat "$pytest_log"
cat "$pytest_log" >>"$test_log"
echo "== pytest: the Rust test runs waited $((SECONDS - phase))s for it"
# Exit 5 means no test ran: that is a failure too.
[[ $rc -eq 0 ]] || status=1

# Tests that need a tool or a privilege are #[ignore = "needs ..."]: a plain
# `cargo test` lists them as ignored, and one run without what it needs fails. They
# run here, one cargo invocation per test binary, where what they need is present. A
# tool that scripts/setup.sh or scripts/bench-setup.sh installs and that is missing
# fails the run; root (this script may run through sudo for apt only) is said loudly.
#   "BINARY TEST NEEDS": TEST is a name, * (every ignored test of the binary) or
#   FILE::* (every ignored test of one file of a binary gathered by tests/main.rs);
#   NEEDS is root, peers (.ferry-run/peers.json), minio (FERRY_MINIO),
#   fake-gcs (FERRY_FAKE_GCS, from .ferry-run/fake-gcs-bin), azurite (FERRY_AZURITE),
#   ec2-metadata-mock (FERRY_EC2_METADATA_MOCK), commands
#   on PATH, or manual (too long for this suite: run by hand with --ignored).
IGNORED=(
    "engine copy::six_gib_copies_past_the_copy_object_limit manual"
    "store azure::* azurite,rclone"
    "cli cli_azure::* azurite"
    "link * root,ip"
    "cli bench::small_objects_tiny_ceilings h2load,wrk"
    "cli bench::bulk_get_tiny_has_rows_and_rss_check iperf3"
    "cli bench::bulk_get_whole_object_peer_rows_when_installed iperf3,peers"
    "cli bench_link::bulk_wan_tiny_on_loopback iperf3"
    "cli bench_link::bulk_wan_tiny_one_peer_beside_ferry_on_its_pull iperf3,peers"
    "cli bench_link::bulk_wan_tiny_across_the_region_link root,ip,iperf3"
    "cli bench_link::small_objects_across_the_region_link root,ip"
    "cli bench_workloads::commit_and_listing_peer_rows_when_installed peers"
    "cli bench_workloads::peer_rows_of_the_newer_workloads_when_installed peers"
    "store gcs_rclone::* fake-gcs,rclone"
    "cli gcs::* fake-gcs"
    "cli sync_providers::* fake-gcs,azurite"
    "cli perfdiag::quick_run_against_minio_has_every_section_and_leaves_nothing minio"
    "cli perfdiag::quick_run_against_fake_gcs_over_http_has_every_section_and_leaves_nothing fake-gcs"
    "cli perfdiag::quick_run_against_fake_gcs_over_https_measures_h2_and_the_handshake fake-gcs"
    "cli perfdiag::quick_run_against_azurite_has_every_section_and_leaves_nothing azurite"
    "cli bench_external::small_objects_against_minio minio"
    "cli bench_external::vectored_against_a_minio_the_bench_started_across_the_region_link root,ip,minio"
    "cli credentials::instance_metadata_keys_from_ec2_metadata_mock_sign_requests ec2-metadata-mock"
)
# Every #[ignore]d test under crates/*/tests is in the list above (store's
# conformance::* are the MinIO, fake-gcs-server and Azurite runs'): one added without
# an entry would never run. A crate whose tests/main.rs gathers its test files into one
# binary (its doc says why) names them BINARY FILE::TEST, the binary named as the
# crate's directory (engine, wire, cli, server, store).
mapfile -t ignored_found < <(awk 'FNR == 1 { bin = FILENAME; sub(/.*\//, "", bin); sub(/\.rs$/, "", bin); ign = 0; mod = ""
                         dir = FILENAME; sub(/\/[^\/]*$/, "", dir)
                         if ((getline line < (dir "/main.rs")) > 0) { mod = bin "::"; bin = dir; sub(/\/tests$/, "", bin); sub(/.*\//, "", bin) }
                         close(dir "/main.rs") }
              /^ *#\[ignore/ { ign = 1; next }
              ign && /^ *(async )?fn / { n = $0; sub(/^ *(async )?fn /, "", n); sub(/\(.*/, "", n); print bin, mod n; ign = 0 }' \
              crates/*/tests/*.rs)
for found in "${ignored_found[@]}"; do
    read -r bin name <<<"$found"
    listed=0
    for e in "${IGNORED[@]}"; do
        [[ "$e" == "$bin * "* || "$e" == "$bin $name "* || ($name == *::* && "$e" == "$bin ${name%%::*}::* "*) ]] && listed=1
    done
    if [[ ! ($bin == store && $name == conformance::*) && $listed -eq 0 ]]; then
        echo "== FAILED: $bin::$name is #[ignore]d but scripts/test.sh never runs it (add it to IGNORED)"
        status=1
    fi
done
# With `autotests = false`, a file under such a crate's tests/ that main.rs does not
# name as a `mod`, nor Cargo.toml as a [[test]] of its own, would never be built.
for main in crates/*/tests/main.rs; do
    for f in "${main%/main.rs}"/*.rs; do
        m="$(basename "$f" .rs)"
        if [[ $m != main ]] && ! grep -qx "mod $m;" "$main" &&
            ! grep -qx "path = \"tests/$m.rs\"" "${main%/tests/main.rs}/Cargo.toml"; then
            echo "== FAILED: $f is neither a module of $main nor a [[test]] of its own, so it is never built (add \`mod $m;\`)"
            status=1
        fi
    done
done
declare -A run_names=()
bins=()
for e in "${IGNORED[@]}"; do
    read -r bin name needs <<<"$e"
    missing=()
    for need in ${needs//,/ }; do
        case $need in
            manual) missing+=(manual) ;;
            root) [[ $(id -u) -eq 0 ]] || missing+=(root) ;;
            peers) [[ -s .ferry-run/peers.json || -n "${FERRY_PEERS_JSON:-}" ]] || missing+=("the bench peers") ;;
            fake-gcs) [[ -n "${FERRY_FAKE_GCS:-}" ]] || missing+=(fake-gcs-server) ;;
            azurite) [[ -n "${FERRY_AZURITE:-}" ]] || missing+=(Azurite) ;;
            minio) [[ -n "${FERRY_MINIO:-}" ]] || missing+=(MinIO) ;;
            ec2-metadata-mock) [[ -n "${FERRY_EC2_METADATA_MOCK:-}" ]] || missing+=(ec2-metadata-mock) ;;
            *) command -v "$need" >/dev/null || missing+=("$need") ;;
        esac
    done
    if [[ " ${missing[*]} " == *" manual "* ]]; then
        echo "== NOT RUN (by hand only: cargo test --release --workspace --test $bin -- --ignored --exact $name): $bin $name"
        continue
    elif [[ " ${missing[*]} " == *" root "* ]]; then
        echo "== NOT RUN (needs root): $bin $name"
        continue
    elif [[ " ${missing[*]} " == *" Azurite "* || " ${missing[*]} " == *" fake-gcs-server "* || " ${missing[*]} " == *" MinIO "* ||
        " ${missing[*]} " == *" ec2-metadata-mock "* ]]; then
        # setup.sh warns when it cannot install an emulator or MinIO (no go or npm, no
        # network).
        echo "== NOT RUN (${missing[*]} not available; scripts/setup.sh said why): $bin $name"
        continue
    elif ((${#missing[@]})); then
        echo "== FAILED: $bin $name needs ${missing[*]}, which scripts/setup.sh / scripts/bench-setup.sh install"
        status=1
        continue
    fi
    [[ -v "run_names[$bin]" ]] || bins+=("$bin")
    if [[ $name == "*" ]]; then
        run_names[$bin]=""
    elif [[ $name == *"::*" ]]; then
        for found in "${ignored_found[@]}"; do
            read -r b n <<<"$found"
            [[ $b == "$bin" && $n == "${name%\*}"* ]] && run_names[$bin]+=" $n"
        done
    else
        run_names[$bin]+=" $name"
    fi
done

# The Rust test runs, in two lanes at once: the workspace's tests (`cargo test`) at normal
# priority, and beside them at nice 10 the runs against the emulators and tools (the
# conformance suites against MinIO, fake-gcs-server and Azurite, then the #[ignore]d tests
# whose needs are present). Each lane alone keeps about one of the two cores busy: its
# tests mostly wait on servers, emulators, child processes and sockets. The second lane's
# output goes to a log of its own, printed whole when both have ended.
ignored_log=.ferry-run/test-ignored.log
phase=$SECONDS
(
    renice -n 10 -p "$BASHPID" >/dev/null
    # cargo_test's copy of the output: this whole lane goes to $ignored_log, which joins
    # $test_log at the end.
    test_log=/dev/null
    status=0
    phase=$SECONDS
    if [[ -n "${FERRY_MINIO:-}" ]]; then
        echo "== conformance suite against MinIO (cargo test --workspace --test store -- --ignored conformance::minio::)"
        # --workspace keeps the feature set of the test build, so nothing is rebuilt.
        cargo_test --release --workspace --test store -- --ignored conformance::minio:: || status=1
    fi
    if [[ -n "${FERRY_FAKE_GCS:-}" ]]; then
        echo "== conformance suite against fake-gcs-server (cargo test --workspace --test store -- --ignored conformance::gcs::)"
        cargo_test --release --workspace --test store -- --ignored conformance::gcs:: || status=1
    fi
    if [[ -n "${FERRY_AZURITE:-}" ]]; then
        echo "== conformance suite against Azurite (cargo test --workspace --test store -- --ignored conformance::azurite::)"
        cargo_test --release --workspace --test store -- --ignored conformance::azurite:: || status=1
    fi
    for bin in "${bins[@]}"; do
        names=(${run_names[$bin]})
        echo "== ignored tests of $bin, their needs present (cargo test --workspace --test $bin -- --ignored${names[*]:+ --exact ${names[*]}})"
        cargo_test --release --workspace --test "$bin" -- --ignored ${names[*]:+--exact "${names[@]}"} || status=1
    done
    echo "== cargo test: the ignored tests ran ($((SECONDS - phase))s)"
    exit $status
) >"$ignored_log" 2>&1 &
ignored_pid=$!
echo "== cargo test --workspace --release, and beside it the emulator and tool runs (log: $ignored_log)"
cargo_test --workspace --release --no-fail-fast || status=1
echo "== cargo test: ran ($((SECONDS - phase))s)"
wait "$ignored_pid"
rc=$?
ignored_pid=""
echo "== the emulator and tool runs, ended (their whole output; the last line is their time):"
cat "$ignored_log"
cat "$ignored_log" >>"$test_log"
[[ $rc -eq 0 ]] || status=1
echo "== cargo test: both lanes ended ($((SECONDS - phase))s)"
echo "== fmt, clippy, cargo test: $([[ $status -eq 0 ]] && echo ok || echo FAILED) (${SECONDS}s)"

if ((status != 0)); then
    # Each failed Rust test's panic (from its "---- NAME stdout ----" block up to the
    # backtrace, at most 12 lines of 500 characters), then pytest's one-line summaries.
    echo "== what failed (the whole output: $test_log)"
    awk '/^---- .* stdout ----$/ { on = 1; n = 0 }
         on && (/^stack backtrace:/ || /^note: run with/ || n >= 12) { on = 0 }
         on { print "    " substr($0, 1, 500); n++ }' "$test_log"
    grep -E '^(FAILED|ERROR) ' "$test_log" | cut -c1-500 | sed 's/^/    /'
fi
echo "== test.sh: $([[ $status -eq 0 ]] && echo ok || echo FAILED) ($(($(date +%s) - run_started))s in all)"
exit $status
