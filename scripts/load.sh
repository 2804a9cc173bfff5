#!/usr/bin/env bash
# `ferry serve` and the `ferry` command line under load (docs/lab/load.md has the
# figures and what they mean):
#
#   idle     10,000 idle connections held at once; server RSS with them; latency of
#            GETs on new connections before and while they are held.
#   loris    500 trickled request heads and 500 trickled bodies (one byte each every
#            0.2 s) against --header-timeout/--body-timeout 5s: when each is cut off, and
#            GET latency meanwhile.
#   bigbody  a PUT declaring 5 GiB to a bucket that does not exist (with and without
#            Expect: 100-continue): the answer, and how much of the body the server read.
#   keys     1,000,000 keys put up once by `ferry cp`, then listed by ferry, s5cmd and
#            rclone: each tool's peak RSS and wall time (the listing half of `files`).
#   files    `cp` of many 100-byte local files (made in /dev/shm when it has room) up to
#            ferry serve, then a recursive listing of the keys, by ferry, s5cmd and
#            rclone, at two counts: each tool's peak RSS (wait4 ru_maxrss) and wall time.
#
# Nothing is asserted; it measures and prints (scripts/load.py does the work, stdlib
# Python only). s5cmd and rclone come from scripts/bench-setup.sh.
#
# Usage: scripts/load.sh [--build] [load.py options: --only idle,loris,bigbody,keys,files
#                         --idle N --loris N --keys N --files N1,N2 --tools ferry,s5cmd,rclone
#                         --verbs cp,ls --src DIR --trace S --row-limit S]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
if [[ "${1:-}" == "--build" ]]; then
    shift
    cargo build --release -p ferry-cli
fi
[[ -x target/release/ferry ]] || cargo build --release -p ferry-cli
# The client side holds as many sockets as the server: take the hard limit here too.
ulimit -n "$(ulimit -Hn)"
exec python3 scripts/load.py --ferry "$ROOT/target/release/ferry" "$@"
