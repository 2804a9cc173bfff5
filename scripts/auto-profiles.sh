#!/usr/bin/env bash
# auto against the best forced transport, per workload row and per emulation profile:
# small-objects, mixed-hol, listing, vectored, open-ahead and commit at the quick size on
# each profile asked for (`ferry bench WORKLOAD --quick --peers none --profile P`), and
# ttfb-throughput once
# (it runs the s3, gcs and azure profiles itself). Each workload interleaves auto with
# the forced modes in every repeat; the claims table's "auto / best forced mode" (claims.rs,
# `auto_vs_best_forced`: per repeat, auto's figure over the best forced row's, the median)
# is printed per workload and profile as one Markdown table on stdout.
#
# What it shows (docs/lab/wire-auto-paced.md, "The profile sweep", and
# docs/lab/wire-auto-every-row.md): where auto falls
# under 0.95 of the better of its transports. Nothing is asserted. JSON lines go to a
# scratch directory (kept with --keep DIR, else removed at exit).
#
# Usage: scripts/auto-profiles.sh [--bin PATH] [--repeats N] [--profiles lan,s3,gcs,azure]
#                                 [--workloads small-objects,mixed-hol,listing,...] [--no-ttfb]
#                                 [--keep DIR]
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/release/ferry"
REPEATS=3
PROFILES="lan,s3,gcs,azure"
WORKLOADS="small-objects,mixed-hol,listing,vectored,open-ahead,commit"
TTFB=1
KEEP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --profiles) PROFILES="$2"; shift 2 ;;
    --workloads) WORKLOADS="$2"; shift 2 ;;
    --no-ttfb) TTFB=0; shift ;;
    --keep) KEEP="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "no ferry binary at $BIN (cargo build --release -p ferry-cli)" >&2; exit 1; }

if [ -n "$KEEP" ]; then
  WORK="$KEEP"; mkdir -p "$WORK"
else
  WORK="$(mktemp -d /tmp/auto-profiles.XXXXXX)"
  trap 'rm -rf "$WORK"' EXIT
fi

# One workload on one profile: its JSON lines in their own file, then its claims row's
# "auto / best forced mode" part.
row() {
  local name="$1" profile="$2" out="$WORK/$1-$2.jsonl"; shift 2
  echo "auto-profiles: $name on $profile (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  if ! "$BIN" bench "$name" --quick --peers none --repeats "$REPEATS" --no-progress --out "$out" "$@" \
      >"$WORK/$name-$profile.md" 2>"$WORK/$name-$profile.err"; then
    echo "| $name | $profile | failed: $(tail -1 "$WORK/$name-$profile.err") |"
    return
  fi
  local auto
  auto="$("$BIN" bench claims "$out" 2>/dev/null | grep -o 'auto / best forced mode: [^|]*' | sed 's/auto \/ best forced mode: //')"
  echo "| $name | $profile | ${auto:-no auto row with a forced counterpart} |"
}

echo "| workload | profile | auto / best forced mode, per row (median over $REPEATS repeats) |"
echo "|---|---|---|"
IFS=, read -ra ps <<<"$PROFILES"
IFS=, read -ra ws <<<"$WORKLOADS"
for w in "${ws[@]}"; do
  for p in "${ps[@]}"; do
    row "$w" "$p" --profile "$p"
  done
done
if [ "$TTFB" = 1 ]; then
  row ttfb-throughput own  # its own s3, gcs and azure servers
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
