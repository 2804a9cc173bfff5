#!/usr/bin/env bash
# `ferry cp` beside rclone (gcs, azureblob) and azcopy on fake-gcs-server (http, and https
# with h2) and Azurite: up and down, small and large files, interleaved and repeated; a
# Markdown table of medians on stdout, one JSON object per run in .ferry-run/bench-providers.jsonl.
# What is measured and how: scripts/bench-providers.py's opening note; a run and what it
# showed: docs/lab/providers-speed.md.
#
#   scripts/bench-providers.sh                 # 2,000 x 16 KiB and 2 x 256 MiB, 3 repeats
#   scripts/bench-providers.sh --quick         # 200 x 16 KiB and 2 x 32 MiB, 1 repeat
#   scripts/bench-providers.sh --targets azurite --sets small --repeats 5
#
# Needs: scripts/setup.sh (fake-gcs-server, Azurite, rclone) and scripts/bench-setup.sh
# (azcopy); ferry is built here in release mode. Any argument is passed on to the runner
# (--help lists them). A lab run, not part of scripts/test.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.ferry-run"
cd "$ROOT"

read_bin() { [[ -s "$RUN/$1" ]] && cat "$RUN/$1" || true; }
FAKE_GCS="${FERRY_FAKE_GCS:-$(read_bin fake-gcs-bin)}"
AZURITE="${FERRY_AZURITE:-$(read_bin azurite-bin)}"
AZCOPY="${FERRY_AZCOPY:-$(read_bin azcopy-bin)}"

args=(--ferry "$ROOT/target/release/ferry" --json "$RUN/bench-providers.jsonl")
[[ -n "$FAKE_GCS" ]] && args+=(--fake-gcs "$FAKE_GCS")
[[ -n "$AZURITE" ]] && args+=(--azurite "$AZURITE")
[[ -n "$AZCOPY" ]] && args+=(--azcopy "$AZCOPY")

# --help and bad arguments need no build.
for a in "$@"; do [[ "$a" == -h || "$a" == --help ]] && exec python3 "$ROOT/scripts/bench-providers.py" "${args[@]}" --help; done
python3 "$ROOT/scripts/bench-providers.py" "${args[@]}" "$@" --check-args

mkdir -p "$RUN"
cargo build --release -q -p ferry-cli --bin ferry
exec python3 "$ROOT/scripts/bench-providers.py" "${args[@]}" "$@"
