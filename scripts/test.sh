#!/usr/bin/env bash
# Set up (scripts/setup.sh), then check formatting (cargo fmt) and lints (clippy, warnings
# are errors), then run every test: the Rust workspace tests and the pytest
# suite in tests/ that drives the real `ferry serve` with real clients (boto3, AWS CLI,
# s5cmd, rclone, curl, h2load, raw sockets). Exits non-zero if anything fails.
#
# Extra arguments go to pytest, e.g. `scripts/test.sh -k boto3 -x`.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh || exit 1
bash scripts/bench-setup.sh || exit 1  # the bench's peers (boto3, awscrt, obstore, s5cmd, s3fs) and .ferry-run/peers.json

status=0
# The client's conformance suite also runs against MinIO when setup.sh could build it.
if [[ -s .ferry-run/minio-bin ]]; then
    export FERRY_MINIO="$(cat .ferry-run/minio-bin)"
else
    echo "== SKIPPED: MinIO is not available, so the conformance tests against a third-party S3 server will not run"
fi
SECONDS=0
echo "== cargo fmt --check (width and rules in rustfmt.toml)"
cargo fmt --all -- --check || status=1
echo "== cargo clippy --workspace --all-targets -- -D warnings"
# --release: clippy's check of the dependencies is then shared with nothing else, but its
# profile matches the test build's, so its warnings are the tested code's.
cargo clippy --workspace --all-targets --release -- -D warnings || status=1
echo "== cargo test --workspace --release"
# --release shares the build with target/release/ferry that setup.sh just made.
cargo test --workspace --release --no-fail-fast || status=1
if [[ -n "${FERRY_MINIO:-}" ]]; then
    echo "== conformance suite against MinIO (cargo test --workspace --test conformance -- --ignored)"
    # --workspace keeps the feature set of the run above, so nothing is rebuilt.
    cargo test --release --workspace --test conformance -- --ignored || status=1
fi
echo "== cargo test: $([[ $status -eq 0 ]] && echo ok || echo FAILED) (${SECONDS}s)"

SECONDS=0
echo "== pytest tests"
# Per-test timeout: a hung server or client fails its own test, not the whole run.
.venv/bin/pytest tests -q --timeout="${FERRY_TEST_TIMEOUT:-180}" "$@"
rc=$?
echo "== pytest: $([[ $rc -eq 0 ]] && echo ok || echo "FAILED (exit $rc)") (${SECONDS}s)"
# Exit 5 means no test ran: that is a failure too.
[[ $rc -eq 0 ]] || status=1

exit $status
