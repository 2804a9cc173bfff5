#!/usr/bin/env bash
# Benchmark `ferry serve` (lan profile, anonymous) against the ceilings of this machine:
#
#   rate   16 KiB GETs: h2load (h2c prior knowledge) and wrk (HTTP/1.1) against ferry,
#          beside nghttpd serving the same 16 KiB as a static file with the same h2load
#          command. wrk cannot be pointed at nghttpd (nghttpd speaks h2 only).
#   bytes  one 1 GiB GET from the synthetic bucket (curl, h1 and h2 prior knowledge)
#          beside iperf3 on loopback, interleaved in one run (A B C A B C ...).
#   rss    ferry's RSS while serving 100 concurrent GETs of one object from disk
#          (--data): before, peak and after, and the aggregate throughput.
#
# Nothing is asserted: the script measures and reports. Output: a Markdown table on
# stdout, progress on stderr, and one JSON line per figure appended to --out
# (default bench-serve.jsonl; every line carries the run id, git sha, date, nproc and
# the exact command). Installs its Debian tools itself (nghttp2-client, nghttp2-server,
# wrk, iperf3, curl, jq). Only loopback addresses; every server and tool run is bounded
# by `timeout` and killed at exit.
#
# Usage: scripts/bench-serve.sh [--quick] [--out FILE] [--only rate|bytes|rss[,..]]
#                               [--rss-size SIZE] [--repeats N] [--bin PATH] [--bin-b PATH] [--build]
#   --quick        shorter runs (h2load -n 50000, wrk -d 3s, iperf3 -t 2, rss 256M)
#   --rss-size     object size for the rss section, e.g. 256M, 1G (default 1G; quick 256M)
#   --repeats N    interleaved repeats for rate and bytes (default 3)
#   --bin PATH     ferry binary (default target/release/ferry; built if missing)
#   --bin-b PATH   a second ferry binary (e.g. a build of main) for the rate section:
#                  served beside the first and measured in the same interleaved rounds
#                  (A B C D E: ferry, nghttpd, wrk ferry, ferry-b, wrk ferry-b)
#   --build        run `cargo build --release` first
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/target/release/ferry"
OUT="bench-serve.jsonl"
QUICK=0
ONLY="rate,bytes,rss"
RSS_SIZE=""
REPEATS=3
BUILD=0
BIN_B=""

log() { printf '[bench-serve %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-0}"; }

while (($#)); do
    case "$1" in
        --quick) QUICK=1 ;;
        --out) OUT="${2:?--out needs a file}"; shift ;;
        --only) ONLY="${2:?--only needs rate|bytes|rss}"; shift ;;
        --rss-size) RSS_SIZE="${2:?--rss-size needs a size}"; shift ;;
        --repeats) REPEATS="${2:?--repeats needs a number}"; shift ;;
        --bin) BIN="${2:?--bin needs a path}"; shift ;;
        --bin-b) BIN_B="${2:?--bin-b needs a path}"; shift ;;
        --build) BUILD=1 ;;
        -h|--help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 ;;
    esac
    shift
done
for s in ${ONLY//,/ }; do
    case "$s" in rate|bytes|rss) ;; *) die "--only: unknown section '$s' (rate, bytes, rss)" ;; esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer"

# size "1G", "256M", "1GiB", "16K", "12345" -> bytes (binary units)
to_bytes() {
    local s="${1^^}" n u
    s="${s%IB}"; s="${s%B}"
    [[ "$s" =~ ^([0-9]+)([KMGT]?)$ ]] || return 1
    n="${BASH_REMATCH[1]}"; u="${BASH_REMATCH[2]}"
    case "$u" in K) n=$((n << 10)) ;; M) n=$((n << 20)) ;; G) n=$((n << 30)) ;; T) n=$((n << 40)) ;; esac
    echo "$n"
}
[[ -n "$RSS_SIZE" ]] || { ((QUICK)) && RSS_SIZE=256M || RSS_SIZE=1G; }
RSS_BYTES="$(to_bytes "$RSS_SIZE")" || die "--rss-size: cannot read '$RSS_SIZE' (e.g. 256M, 1G)"

if ((QUICK)); then
    H2_N=50000; WRK_D=3s; IPERF_T=2
else
    H2_N=200000; WRK_D=10s; IPERF_T=5
fi
H2_C=16; H2_M=32; WRK_C=64
BIG_KEY="1GiB"; BIG_BYTES=$((1 << 30))
RSS_CLIENTS=100

# ---------------------------------------------------------------------------------
# Tools: install what is missing (Debian), retrying while another apt holds the lock.
apt_retry() { # apt-get args...: retry up to ~5 minutes when the dpkg/apt lock is held
    local log i
    log="$(mktemp)"
    for i in $(seq 60); do
        if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=60 "$@" >"$log" 2>&1; then
            rm -f "$log"; return 0
        fi
        if grep -qiE 'lock|Resource temporarily unavailable' "$log"; then
            log "apt-get $1: lock held by another process, retrying ($i)"
            sleep 5; continue
        fi
        tail -n 20 "$log" >&2; rm -f "$log"; return 1
    done
    tail -n 20 "$log" >&2; rm -f "$log"; return 1
}
ensure_pkgs() { # pkg:cmd ...
    local missing=() pc p c cand need_update=0
    for pc in "$@"; do
        p="${pc%%:*}"; c="${pc#*:}"
        command -v "$c" >/dev/null 2>&1 || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    local SUDO=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
        SUDO=(sudo -n)
    fi
    for p in "${missing[@]}"; do
        cand="$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')"
        [[ -n "$cand" && "$cand" != "(none)" ]] || need_update=1
    done
    if ((need_update)); then
        log "apt-get update (a package has no install candidate)"
        "${SUDO[@]}" bash -c "$(declare -f apt_retry log); apt_retry update" || die "apt-get update failed"
    fi
    log "apt-get install ${missing[*]}"
    "${SUDO[@]}" bash -c "$(declare -f apt_retry log); apt_retry install -y --no-install-recommends ${missing[*]}" \
        || die "apt-get install ${missing[*]} failed"
    for pc in "$@"; do
        c="${pc#*:}"
        command -v "$c" >/dev/null 2>&1 || die "'$c' still missing after installing ${pc%%:*}"
    done
}
pkgs=(curl:curl jq:jq)
want rate && pkgs+=(nghttp2-client:h2load nghttp2-server:nghttpd wrk:wrk)
want bytes && pkgs+=(iperf3:iperf3)
ensure_pkgs "${pkgs[@]}"

if ((BUILD)) || [[ ! -x "$BIN" ]]; then
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release >&2) || die "cargo build --release failed"
fi
[[ -x "$BIN" ]] || die "no ferry binary at $BIN"
[[ -z "$BIN_B" || -x "$BIN_B" ]] || die "no ferry binary at $BIN_B (--bin-b)"

# ---------------------------------------------------------------------------------
# Run state, cleanup.
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bench-serve.XXXXXX")"
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

GIT_SHA="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
GIT_DIRTY=false
[[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]] && GIT_DIRTY=true
DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)-$$"
NPROC="$(nproc)"
KERNEL="$(uname -r)"
BIN_MTIME="$(date -u -r "$BIN" +%Y-%m-%dT%H:%M:%SZ)"
CLK_TCK="$(getconf CLK_TCK)"
T_START=$SECONDS
: >>"$OUT" || die "cannot write $OUT"

ROWS=()      # Markdown table rows
CMDS=()      # exact commands, printed under the table
NOTES=()     # anything odd

emit() { # section figure value unit cmd extra_json
    local extra="${6:-}"
    [[ -n "$extra" ]] || extra='{}'
    jq -cn --arg run "$RUN_ID" --arg sha "$GIT_SHA" --argjson dirty "$GIT_DIRTY" \
        --arg date "$DATE" --argjson nproc "$NPROC" --arg kernel "$KERNEL" \
        --arg bin "$BIN" --arg bin_mtime "$BIN_MTIME" --argjson quick "$QUICK" \
        --arg section "$1" --arg figure "$2" --arg value "$3" --arg unit "$4" --arg cmd "$5" \
        --argjson extra "$extra" \
        '{bench:"serve", run:$run, git_sha:$sha, git_dirty:$dirty, date:$date, nproc:$nproc,
          kernel:$kernel, ferry_bin:$bin, ferry_bin_mtime:$bin_mtime, quick:($quick==1),
          profile:"lan", section:$section, figure:$figure,
          value:($value|tonumber? // null), unit:$unit, cmd:$cmd} + $extra' >>"$OUT"
}
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 |"); }   # figure, median, unit, runs, notes
note() { NOTES+=("$*"); log "NOTE: $*"; }

median() { # numbers... -> median
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR==0) {print "nan"; exit}
        if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}
spread() { # decimals numbers... -> "lo-hi"
    local d="$1"; shift
    printf '%s\n' "$@" | sort -g | awk -v d="$d" 'NR==1{lo=$1} {hi=$1} END {printf "%.*f-%.*f", d, lo, d, hi}'
}
fmt() { awk -v x="$1" -v d="${2:-1}" 'BEGIN { if (x=="" || x=="nan") print "n/a"; else printf "%.*f\n", d, x }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0==0) print "nan"; else printf "%.4f\n", a/b }'; }
json_nums() { printf '%s\n' "$@" | jq -cs 'map(tonumber? // null)'; }
cpu_s() { # pid -> user+system CPU seconds so far
    awk -v t="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.2f\n", ($12+$13)/t }' "/proc/$1/stat" 2>/dev/null || echo 0
}
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a-b }'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a+b }'; }

# timed NAME CMD...: run CMD (bounded by timeout), stdout/stderr to $WORK/NAME.{out,err};
# sets T_WALL T_USER T_SYS (client process tree) and RC.
timed() {
    local name="$1"; shift
    local TIMEFORMAT='%R %U %S' t
    { time "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; } 2>"$WORK/$name.time"
    RC=$?
    read -r T_WALL T_USER T_SYS <"$WORK/$name.time"
}

free_port() { # a loopback TCP port nobody listens on right now
    local p i
    for i in $(seq 200); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
    done
    return 1
}
wait_port() { # port seconds pid
    local i
    for i in $(seq $(($2 * 10))); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# start_ferry NAME LIMIT_SECONDS ARGS...: sets FERRY_URL, FERRY_PID (the ferry process)
# and FERRY_TPID (its timeout wrapper).
start_ferry() {
    local name="$1" limit="$2" line="" i; shift 2
    timeout -k 5 "$limit" "${START_BIN:-$BIN}" serve --addr 127.0.0.1:0 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    FERRY_TPID=$!
    PIDS+=("$FERRY_TPID")
    for i in $(seq 100); do
        line="$(head -n1 "$WORK/$name.out" 2>/dev/null)"
        [[ "$line" == "listening on http://"* ]] && break
        kill -0 "$FERRY_TPID" 2>/dev/null || { cat "$WORK/$name.err" >&2; die "ferry serve exited at start"; }
        sleep 0.1
    done
    [[ "$line" == "listening on http://"* ]] || die "ferry serve printed no 'listening on' line in 10 s"
    FERRY_URL="${line#listening on }"
    FERRY_PID="$(pgrep -P "$FERRY_TPID" | head -n1)"
    [[ -n "$FERRY_PID" ]] || die "cannot find the ferry process under timeout pid $FERRY_TPID"
    log "ferry serve $* -> $FERRY_URL (pid $FERRY_PID)"
}
stop_pid() { # timeout-wrapper pid
    kill -TERM "$1" 2>/dev/null
    local i
    for i in $(seq 30); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
curl_ok() { # expected-code cmd...: run curl, check the status code
    local want="$1" code; shift
    code="$("$@" -s -o /dev/null -w '%{http_code}' --max-time 120)"
    [[ "$code" == "$want" ]] || { log "'$*' -> HTTP $code (expected $want)"; return 1; }
}

log "run $RUN_ID: sections '$ONLY', quick=$QUICK, repeats=$REPEATS, nproc=$NPROC, out=$OUT"
log "ferry binary $BIN (built $BIN_MTIME), git $GIT_SHA dirty=$GIT_DIRTY"

# ---------------------------------------------------------------------------------
# 1. Request rate, 16 KiB GETs.
section_rate() {
    log "== rate: 16 KiB GETs, h2load (h2c) and wrk (h1) vs nghttpd =="
    local obj="$WORK/obj16k" ndir="$WORK/nghttpd"
    mkdir -p "$ndir"
    head -c 16384 /dev/urandom >"$obj"
    cp "$obj" "$ndir/obj16k"
    start_ferry ferry-rate 900 --memory --anonymous
    local furl="$FERRY_URL" fpid="$FERRY_PID" ftpid="$FERRY_TPID"
    curl_ok 200 curl -X PUT "$furl/bench" || die "create bucket failed"
    curl_ok 200 curl -T "$obj" "$furl/bench/obj16k" || die "PUT obj16k failed"
    curl -s --max-time 10 "$furl/bench/obj16k" | cmp -s - "$obj" || die "GET obj16k does not return the bytes PUT"
    local burl="" bpid="" btpid=""
    if [[ -n "$BIN_B" ]]; then
        START_BIN="$BIN_B" start_ferry ferry-rate-b 900 --memory --anonymous
        burl="$FERRY_URL" bpid="$FERRY_PID" btpid="$FERRY_TPID"
        curl_ok 200 curl -X PUT "$burl/bench" || die "create bucket failed (--bin-b)"
        curl_ok 200 curl -T "$obj" "$burl/bench/obj16k" || die "PUT obj16k failed (--bin-b)"
        curl -s --max-time 10 "$burl/bench/obj16k" | cmp -s - "$obj" || die "GET obj16k (--bin-b) does not return the bytes PUT"
    fi

    local nport; nport="$(free_port)" || die "no free port for nghttpd"
    timeout -k 5 900 nghttpd --no-tls -d "$ndir" "$nport" >"$WORK/nghttpd.out" 2>"$WORK/nghttpd.err" &
    local ntpid=$!
    PIDS+=("$ntpid")
    wait_port "$nport" 10 "$ntpid" || { cat "$WORK/nghttpd.err" >&2; die "nghttpd did not start on port $nport"; }
    local npid; npid="$(pgrep -P "$ntpid" | head -n1)"
    local nurl="http://127.0.0.1:$nport"
    curl -s --max-time 10 --http2-prior-knowledge "$nurl/obj16k" | cmp -s - "$obj" || die "nghttpd does not serve obj16k"
    log "nghttpd --no-tls -d $ndir $nport (pid $npid)"

    local h2f=(h2load -n "$H2_N" -c "$H2_C" -m "$H2_M" -t 1 "$furl/bench/obj16k")
    local h2n=(h2load -n "$H2_N" -c "$H2_C" -m "$H2_M" -t 1 "$nurl/obj16k")
    local wrkf=(wrk -t 1 -c "$WRK_C" -d "$WRK_D" --latency "$furl/bench/obj16k")
    CMDS+=("rate, ferry: \`$BIN serve --addr 127.0.0.1:0 --memory --anonymous\`; \`curl -X PUT $furl/bench\`; \`curl -T obj16k $furl/bench/obj16k\`"
           "rate, nghttpd: \`nghttpd --no-tls -d DIR $nport\` (DIR/obj16k, 16384 random bytes)"
           "rate, h2load ferry: \`${h2f[*]}\`"
           "rate, h2load nghttpd: \`${h2n[*]}\`"
           "rate, wrk ferry: \`${wrkf[*]}\`")

    local -a hf=() hn=() wf=() hf_cpu=() hn_cpu=() wf_cpu=() hf_cl=() hn_cl=() wf_cl=()
    local -a hf_fail=() hn_fail=() wf_err=() hb=() hb_cpu=() wb=() wb_cpu=()
    local h2b=(h2load -n "$H2_N" -c "$H2_C" -m "$H2_M" -t 1 "$burl/bench/obj16k")
    local wrkb=(wrk -t 1 -c "$WRK_C" -d "$WRK_D" --latency "$burl/bench/obj16k")
    [[ -n "$BIN_B" ]] && CMDS+=("rate, ferry-b: \`$BIN_B serve --addr 127.0.0.1:0 --memory --anonymous\`, same h2load and wrk commands against $burl")
    local i c0 v st fails
    for i in $(seq "$REPEATS"); do
        # A: h2load -> ferry
        c0="$(cpu_s "$fpid")"
        timed "h2f-$i" timeout -k 5 300 "${h2f[@]}"
        v="$(awk '/^finished in/ {gsub(",",""); print $4}' "$WORK/h2f-$i.out")"
        st="$(grep -m1 '^requests:' "$WORK/h2f-$i.out")"
        fails="$(awk '/^requests:/ {gsub(",",""); print $3-$9}' "$WORK/h2f-$i.out")"
        hf+=("${v:-nan}"); hf_cpu+=("$(sub "$(cpu_s "$fpid")" "$c0")"); hf_cl+=("$(add "$T_USER" "$T_SYS")")
        hf_fail+=("${fails:-nan}")
        log "h2load ferry   #$i: ${v:-?} req/s  ($st) rc=$RC"
        [[ "$RC" == 0 && "${fails:-x}" == 0 ]] || note "h2load -> ferry run $i: rc=$RC, $st; $(grep -m1 '^status codes:' "$WORK/h2f-$i.out"); stderr: $(head -c 300 "$WORK/h2f-$i.err" | tr '\n' ' '); reproduce: ${h2f[*]}"
        # B: h2load -> nghttpd
        c0="$(cpu_s "$npid")"
        timed "h2n-$i" timeout -k 5 300 "${h2n[@]}"
        v="$(awk '/^finished in/ {gsub(",",""); print $4}' "$WORK/h2n-$i.out")"
        st="$(grep -m1 '^requests:' "$WORK/h2n-$i.out")"
        fails="$(awk '/^requests:/ {gsub(",",""); print $3-$9}' "$WORK/h2n-$i.out")"
        hn+=("${v:-nan}"); hn_cpu+=("$(sub "$(cpu_s "$npid")" "$c0")"); hn_cl+=("$(add "$T_USER" "$T_SYS")")
        hn_fail+=("${fails:-nan}")
        log "h2load nghttpd #$i: ${v:-?} req/s  ($st) rc=$RC"
        [[ "$RC" == 0 && "${fails:-x}" == 0 ]] || note "h2load -> nghttpd run $i: rc=$RC, $st"
        # C: wrk -> ferry (h1)
        c0="$(cpu_s "$fpid")"
        timed "wrkf-$i" timeout -k 5 120 "${wrkf[@]}"
        v="$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrkf-$i.out")"
        local non2xx serr
        non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$WORK/wrkf-$i.out")"
        serr="$(grep -m1 'Socket errors:' "$WORK/wrkf-$i.out" | sed 's/^ *//')"
        wf+=("${v:-nan}"); wf_cpu+=("$(sub "$(cpu_s "$fpid")" "$c0")"); wf_cl+=("$(add "$T_USER" "$T_SYS")")
        wf_err+=("$((${non2xx:-0}))")
        log "wrk ferry      #$i: ${v:-?} req/s  non-2xx=${non2xx:-0} ${serr:-no socket errors} rc=$RC"
        [[ "$RC" == 0 && -z "$non2xx" && -z "$serr" ]] || note "wrk -> ferry run $i: rc=$RC non-2xx=${non2xx:-0} ${serr}; stderr: $(head -c 300 "$WORK/wrkf-$i.err" | tr '\n' ' '); reproduce: ${wrkf[*]}"
        [[ -n "$BIN_B" ]] || continue
        # D: h2load -> ferry-b
        c0="$(cpu_s "$bpid")"
        timed "h2b-$i" timeout -k 5 300 "${h2b[@]}"
        v="$(awk '/^finished in/ {gsub(",",""); print $4}' "$WORK/h2b-$i.out")"
        st="$(grep -m1 '^requests:' "$WORK/h2b-$i.out")"
        fails="$(awk '/^requests:/ {gsub(",",""); print $3-$9}' "$WORK/h2b-$i.out")"
        hb+=("${v:-nan}"); hb_cpu+=("$(sub "$(cpu_s "$bpid")" "$c0")")
        log "h2load ferry-b #$i: ${v:-?} req/s  ($st) rc=$RC"
        [[ "$RC" == 0 && "${fails:-x}" == 0 ]] || note "h2load -> ferry-b run $i: rc=$RC, $st; reproduce: ${h2b[*]}"
        # E: wrk -> ferry-b
        c0="$(cpu_s "$bpid")"
        timed "wrkb-$i" timeout -k 5 120 "${wrkb[@]}"
        v="$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrkb-$i.out")"
        wb+=("${v:-nan}"); wb_cpu+=("$(sub "$(cpu_s "$bpid")" "$c0")")
        log "wrk ferry-b    #$i: ${v:-?} req/s rc=$RC"
        [[ "$RC" == 0 ]] || note "wrk -> ferry-b run $i: rc=$RC; reproduce: ${wrkb[*]}"
    done
    kill -0 "$fpid" 2>/dev/null || note "ferry (rate) died during the run; stderr tail: $(tail -n 5 "$WORK/ferry-rate.err" | tr '\n' ' ')"
    stop_pid "$ntpid"; stop_pid "$ftpid"
    [[ -n "$btpid" ]] && stop_pid "$btpid"

    local mhf mhn mwf r
    mhf="$(median "${hf[@]}")"; mhn="$(median "${hn[@]}")"; mwf="$(median "${wf[@]}")"
    r="$(ratio "$mhf" "$mhn")"
    local common="16 KiB GET, lan, anonymous, ${NPROC} cores shared by tool and server, tool -t 1"
    emit rate "h2load_ferry_req_s" "$mhf" "req/s" "${h2f[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${hf[@]}")" --argjson scpu "$(json_nums "${hf_cpu[@]}")" --argjson ccpu "$(json_nums "${hf_cl[@]}")" --argjson f "$(json_nums "${hf_fail[@]}")" \
            '{samples:$s, server_cpu_s:$scpu, client_cpu_s:$ccpu, failed_requests:$f, protocol:"h2c"}')"
    emit rate "h2load_nghttpd_req_s" "$mhn" "req/s" "${h2n[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${hn[@]}")" --argjson scpu "$(json_nums "${hn_cpu[@]}")" --argjson ccpu "$(json_nums "${hn_cl[@]}")" --argjson f "$(json_nums "${hn_fail[@]}")" \
            '{samples:$s, server_cpu_s:$scpu, client_cpu_s:$ccpu, failed_requests:$f, protocol:"h2c", server:"nghttpd (1 worker thread, default)"}')"
    emit rate "wrk_ferry_req_s" "$mwf" "req/s" "${wrkf[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${wf[@]}")" --argjson scpu "$(json_nums "${wf_cpu[@]}")" --argjson ccpu "$(json_nums "${wf_cl[@]}")" --argjson e "$(json_nums "${wf_err[@]}")" \
            '{samples:$s, server_cpu_s:$scpu, client_cpu_s:$ccpu, non_2xx:$e, protocol:"http/1.1"}')"
    emit rate "h2load_ratio_ferry_over_nghttpd" "$r" "ratio" "median(h2load ferry) / median(h2load nghttpd)" '{"goal":0.6}'
    row "h2load (h2c) -> ferry, 16 KiB GET" "$(fmt "$mhf" 0)" "req/s" "$(spread 0 "${hf[@]}"); server CPU s $(printf '%s ' "${hf_cpu[@]}")" "-n $H2_N -c $H2_C -m $H2_M -t 1"
    row "h2load (h2c) -> nghttpd, static 16 KiB" "$(fmt "$mhn" 0)" "req/s" "$(spread 0 "${hn[@]}"); server CPU s $(printf '%s ' "${hn_cpu[@]}")" "same command; nghttpd default 1 worker"
    row "**ratio ferry / nghttpd (h2load)**" "$(fmt "$(awk -v r="$r" 'BEGIN{print r*100}')" 1)" "%" "" "goal >= 60%"
    row "wrk (h1) -> ferry, 16 KiB GET" "$(fmt "$mwf" 0)" "req/s" "$(spread 0 "${wf[@]}"); server CPU s $(printf '%s ' "${wf_cpu[@]}")" "-t 1 -c $WRK_C -d $WRK_D"
    row "wrk (h1) -> nghttpd" "n/a" "" "" "not possible: nghttpd speaks h2 only"
    [[ -n "$BIN_B" ]] || return 0
    local mhb mwb rb
    mhb="$(median "${hb[@]}")"; mwb="$(median "${wb[@]}")"; rb="$(ratio "$mhb" "$mhn")"
    emit rate "h2load_ferry_b_req_s" "$mhb" "req/s" "${h2b[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${hb[@]}")" --argjson scpu "$(json_nums "${hb_cpu[@]}")" --arg b "$BIN_B" '{samples:$s, server_cpu_s:$scpu, protocol:"h2c", ferry_b_bin:$b}')"
    emit rate "wrk_ferry_b_req_s" "$mwb" "req/s" "${wrkb[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${wb[@]}")" --argjson scpu "$(json_nums "${wb_cpu[@]}")" --arg b "$BIN_B" '{samples:$s, server_cpu_s:$scpu, protocol:"http/1.1", ferry_b_bin:$b}')"
    emit rate "h2load_ratio_ferry_b_over_nghttpd" "$rb" "ratio" "median(h2load ferry-b) / median(h2load nghttpd)" '{}'
    row "h2load (h2c) -> ferry-b ($BIN_B)" "$(fmt "$mhb" 0)" "req/s" "$(spread 0 "${hb[@]}"); server CPU s $(printf '%s ' "${hb_cpu[@]}")" "same command, same rounds"
    row "ratio ferry-b / nghttpd (h2load)" "$(fmt "$(awk -v r="$rb" 'BEGIN{print r*100}')" 1)" "%" "" ""
    row "wrk (h1) -> ferry-b" "$(fmt "$mwb" 0)" "req/s" "$(spread 0 "${wb[@]}"); server CPU s $(printf '%s ' "${wb_cpu[@]}")" "same command, same rounds"
}

# ---------------------------------------------------------------------------------
# 2. Bytes: 1 GiB GET vs iperf3.
section_bytes() {
    log "== bytes: one 1 GiB GET (h1, h2) vs iperf3, interleaved =="
    start_ferry ferry-bytes 600 --memory --anonymous
    local furl="$FERRY_URL" fpid="$FERRY_PID" ftpid="$FERRY_TPID"
    local url="$furl/synthetic/$BIG_KEY/x"
    local wfmt='%{http_code} %{http_version} %{size_download} %{speed_download}'
    local c1=(curl -s -o /dev/null --max-time 120 -w "$wfmt" "$url")
    local c2=(curl --http2-prior-knowledge -s -o /dev/null --max-time 120 -w "$wfmt" "$url")
    local ip; ip="$(free_port)" || die "no free port for iperf3"
    local ic=(iperf3 -c 127.0.0.1 -p "$ip" -t "$IPERF_T" -J)
    CMDS+=("bytes, ferry: \`$BIN serve --addr 127.0.0.1:0 --memory --anonymous\`"
           "bytes, h1: \`${c1[*]:0:7} '$wfmt' $url\`"
           "bytes, h2: \`${c2[*]:0:8} '$wfmt' $url\`"
           "bytes, iperf3: \`iperf3 -s -1 --forceflush -p $ip\` then \`${ic[*]}\` (received bits/s)")
    local -a a=() b=() c=() a_cpu=() c_cpu=() a_cl=() c_cl=()
    local i c0 code ver size speed
    for i in $(seq "$REPEATS"); do
        # A: curl h1
        c0="$(cpu_s "$fpid")"
        timed "get1-$i" timeout -k 5 150 "${c1[@]}"
        read -r code ver size speed <"$WORK/get1-$i.out"
        a+=("$(awk -v s="${speed:-0}" 'BEGIN{printf "%.3f\n", s*8/1e9}')"); a_cpu+=("$(sub "$(cpu_s "$fpid")" "$c0")"); a_cl+=("$(add "$T_USER" "$T_SYS")")
        log "curl h1 1 GiB   #$i: ${a[-1]} Gbit/s (HTTP $code, v$ver, $size bytes, rc=$RC)"
        [[ "$RC" == 0 && "$code" == 200 && "$size" == "$BIG_BYTES" ]] || note "curl h1 1 GiB run $i: rc=$RC HTTP ${code:-?} size ${size:-?} (want $BIG_BYTES); reproduce: ${c1[*]}"
        # B: iperf3
        # -1 serves one connection only: do not probe the port (the probe would be that
        # connection); wait for its "Server listening" line instead.
        timeout -k 5 $((IPERF_T + 30)) iperf3 -s -1 --forceflush -p "$ip" >"$WORK/iperf-s-$i.out" 2>&1 &
        local itpid=$! k
        PIDS+=("$itpid")
        for k in $(seq 100); do
            grep -q 'Server listening' "$WORK/iperf-s-$i.out" 2>/dev/null && break
            kill -0 "$itpid" 2>/dev/null || break
            sleep 0.1
        done
        grep -q 'Server listening' "$WORK/iperf-s-$i.out" || { cat "$WORK/iperf-s-$i.out" >&2; die "iperf3 -s did not start on port $ip"; }
        timed "iperf-$i" timeout -k 5 $((IPERF_T + 20)) "${ic[@]}"
        b+=("$(jq -r '(.end.sum_received.bits_per_second // 0) / 1e9 | . * 1000 | round / 1000' "$WORK/iperf-$i.out" 2>/dev/null || echo nan)")
        log "iperf3 -t $IPERF_T       #$i: ${b[-1]} Gbit/s (rc=$RC)"
        [[ "$RC" == 0 ]] || note "iperf3 run $i: rc=$RC $(jq -r '.error // empty' "$WORK/iperf-$i.out" 2>/dev/null)"
        wait "$itpid" 2>/dev/null
        # C: curl h2
        c0="$(cpu_s "$fpid")"
        timed "get2-$i" timeout -k 5 150 "${c2[@]}"
        read -r code ver size speed <"$WORK/get2-$i.out"
        c+=("$(awk -v s="${speed:-0}" 'BEGIN{printf "%.3f\n", s*8/1e9}')"); c_cpu+=("$(sub "$(cpu_s "$fpid")" "$c0")"); c_cl+=("$(add "$T_USER" "$T_SYS")")
        log "curl h2 1 GiB   #$i: ${c[-1]} Gbit/s (HTTP $code, v$ver, $size bytes, rc=$RC)"
        [[ "$RC" == 0 && "$code" == 200 && "$size" == "$BIG_BYTES" && "$ver" == 2 ]] || note "curl h2 1 GiB run $i: rc=$RC HTTP ${code:-?} version ${ver:-?} size ${size:-?} (want $BIG_BYTES); reproduce: ${c2[*]}"
    done
    kill -0 "$fpid" 2>/dev/null || note "ferry (bytes) died during the run; stderr tail: $(tail -n 5 "$WORK/ferry-bytes.err" | tr '\n' ' ')"
    stop_pid "$ftpid"

    local ma mb mc r1 r2
    ma="$(median "${a[@]}")"; mb="$(median "${b[@]}")"; mc="$(median "${c[@]}")"
    r1="$(ratio "$ma" "$mb")"; r2="$(ratio "$mc" "$mb")"
    emit bytes "get_1gib_h1_gbit_s" "$ma" "Gbit/s" "${c1[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${a[@]}")" --argjson scpu "$(json_nums "${a_cpu[@]}")" --argjson ccpu "$(json_nums "${a_cl[@]}")" '{samples:$s, server_cpu_s:$scpu, client_cpu_s:$ccpu, bytes:1073741824, protocol:"http/1.1"}')"
    emit bytes "iperf3_loopback_gbit_s" "$mb" "Gbit/s" "${ic[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${b[@]}")" '{samples:$s, server:"iperf3 -s -1"}')"
    emit bytes "get_1gib_h2_gbit_s" "$mc" "Gbit/s" "${c2[*]}" \
        "$(jq -cn --argjson s "$(json_nums "${c[@]}")" --argjson scpu "$(json_nums "${c_cpu[@]}")" --argjson ccpu "$(json_nums "${c_cl[@]}")" '{samples:$s, server_cpu_s:$scpu, client_cpu_s:$ccpu, bytes:1073741824, protocol:"h2c"}')"
    emit bytes "get_1gib_h1_ratio_over_iperf3" "$r1" "ratio" "median(curl h1) / median(iperf3)" '{"goal":0.9}'
    emit bytes "get_1gib_h2_ratio_over_iperf3" "$r2" "ratio" "median(curl h2) / median(iperf3)" '{}'
    row "curl GET 1 GiB synthetic, h1" "$(fmt "$ma" 2)" "Gbit/s" "$(spread 2 "${a[@]}"); server CPU s $(printf '%s ' "${a_cpu[@]}")" "one connection"
    row "iperf3 loopback, 1 stream, -t $IPERF_T" "$(fmt "$mb" 2)" "Gbit/s" "$(spread 2 "${b[@]}")" "interleaved with the GETs"
    row "**ratio GET h1 / iperf3**" "$(fmt "$(awk -v r="$r1" 'BEGIN{print r*100}')" 1)" "%" "" "goal >= 90%"
    row "curl GET 1 GiB synthetic, h2 prior knowledge" "$(fmt "$mc" 2)" "Gbit/s" "$(spread 2 "${c[@]}"); server CPU s $(printf '%s ' "${c_cpu[@]}")" "one stream"
    row "ratio GET h2 / iperf3" "$(fmt "$(awk -v r="$r2" 'BEGIN{print r*100}')" 1)" "%" "" ""
}

# ---------------------------------------------------------------------------------
# 3. RSS while serving 100 concurrent GETs of one object from disk.
rss_kib() { # pid field -> KiB
    awk -v f="$2:" '$1==f {print $2; found=1} END {if (!found) print 0}' "/proc/$1/status" 2>/dev/null || echo 0
}
mib() { awk -v k="$1" 'BEGIN{printf "%.1f\n", k/1024}'; }
section_rss() {
    local size="$RSS_BYTES" hsize="$RSS_SIZE"
    log "== rss: $RSS_CLIENTS concurrent GETs of one $hsize object from disk =="
    local need=$((2 * size + (1 << 30))) avail
    avail="$(df --output=avail -B1 "$WORK" | tail -n1 | tr -d ' ')"
    if ((avail < need)); then
        note "rss: skipped, $WORK has $((avail >> 20)) MiB free, needs $((need >> 20)) MiB (object + upload file + 1 GiB)"
        row "rss section" "skipped" "" "" "not enough disk"
        return 0
    fi
    local data="$WORK/data" file="$WORK/big"
    mkdir -p "$data"
    # Per-GET limit: at least 300 s, or the whole transfer at 50 MB/s each.
    local glimit=$((size * RSS_CLIENTS / 50000000 + 300))
    start_ferry ferry-rss $((glimit + 600)) --data "$data" --anonymous
    local furl="$FERRY_URL" fpid="$FERRY_PID" ftpid="$FERRY_TPID"
    local url="$furl/rss/big"
    local hwm0; hwm0="$(rss_kib "$fpid" VmHWM)"
    curl_ok 200 curl -X PUT "$furl/rss" || die "create bucket rss failed"
    log "writing $hsize of random bytes to $file"
    head -c "$size" /dev/urandom >"$file" || die "cannot write $file"
    log "uploading it: curl -T $file $url"
    local t0 t1 code
    t0="$(date +%s.%N)"
    code="$(timeout -k 5 600 curl -s -o /dev/null -w '%{http_code}' -T "$file" "$url")"
    t1="$(date +%s.%N)"
    [[ "$code" == 200 ]] || die "upload of $hsize failed: HTTP $code (reproduce: curl -T FILE $url)"
    local up_gbit; up_gbit="$(awk -v s="$size" -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f\n", s*8/(b-a)/1e9}')"
    log "upload: $up_gbit Gbit/s; server VmHWM during upload $(mib "$(rss_kib "$fpid" VmHWM)") MiB"
    local hwm_up; hwm_up="$(rss_kib "$fpid" VmHWM)"
    rm -f "$file"
    sleep 1
    local before anon_b filek_b
    before="$(rss_kib "$fpid" VmRSS)"; anon_b="$(rss_kib "$fpid" RssAnon)"; filek_b="$(rss_kib "$fpid" RssFile)"
    log "RSS before: $(mib "$before") MiB (anon $(mib "$anon_b"), file $(mib "$filek_b"))"

    local cg=(curl -s -o /dev/null --max-time "$glimit" -w '%{http_code} %{size_download} %{speed_download}' "$url")
    CMDS+=("rss, ferry: \`$BIN serve --addr 127.0.0.1:0 --data DIR --anonymous\`; \`curl -X PUT $furl/rss\`; \`curl -T FILE $url\` (FILE: $hsize of /dev/urandom)"
           "rss, $RSS_CLIENTS at once: \`${cg[*]:0:7} '%{http_code} %{size_download} %{speed_download}' $url\`; VmRSS/RssAnon/RssFile from /proc/PID/status every 0.5 s")
    local -a gp=()
    local i c0
    c0="$(cpu_s "$fpid")"
    t0="$(date +%s.%N)"
    for i in $(seq "$RSS_CLIENTS"); do
        timeout -k 5 $((glimit + 10)) "${cg[@]}" >"$WORK/rss-get-$i.out" 2>"$WORK/rss-get-$i.err" &
        gp+=($!)
        PIDS+=($!)
    done
    local peak="$before" peak_anon="$anon_b" peak_file="$filek_b" r an fi alive last_log=0 samples="$WORK/rss-samples"
    : >"$samples"
    while :; do
        alive=0
        for i in "${gp[@]}"; do kill -0 "$i" 2>/dev/null && { alive=1; break; }; done
        r="$(rss_kib "$fpid" VmRSS)"; an="$(rss_kib "$fpid" RssAnon)"; fi="$(rss_kib "$fpid" RssFile)"
        printf '%s %s %s %s\n' "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')" "$r" "$an" "$fi" >>"$samples"
        ((r > peak)) && peak=$r
        ((an > peak_anon)) && peak_anon=$an
        ((fi > peak_file)) && peak_file=$fi
        if ((SECONDS - last_log >= 5)); then
            log "  RSS $(mib "$r") MiB (anon $(mib "$an"), file $(mib "$fi")), GETs running: $(for i in "${gp[@]}"; do kill -0 "$i" 2>/dev/null && echo; done | wc -l)"
            last_log=$SECONDS
        fi
        ((alive)) || break
        sleep 0.5
    done
    t1="$(date +%s.%N)"
    local ok=0 bad=0 total=0 rc sz sp
    for i in $(seq "$RSS_CLIENTS"); do
        wait "${gp[$((i - 1))]}"; rc=$?
        read -r code sz sp <"$WORK/rss-get-$i.out"
        total=$((total + ${sz:-0}))
        if [[ "$rc" == 0 && "$code" == 200 && "$sz" == "$size" ]]; then ok=$((ok + 1)); else
            bad=$((bad + 1))
            ((bad <= 5)) && note "rss GET $i: rc=$rc HTTP ${code:-?} size ${sz:-?} (want $size); stderr: $(head -c 200 "$WORK/rss-get-$i.err")"
        fi
    done
    ((bad)) && note "rss: $bad of $RSS_CLIENTS concurrent GETs failed; reproduce: start ferry with --data DIR, upload $hsize, run $RSS_CLIENTS x: ${cg[*]}"
    local srv_cpu; srv_cpu="$(sub "$(cpu_s "$fpid")" "$c0")"
    sleep 1
    local after anon_a file_a hwm
    after="$(rss_kib "$fpid" VmRSS)"; anon_a="$(rss_kib "$fpid" RssAnon)"; file_a="$(rss_kib "$fpid" RssFile)"; hwm="$(rss_kib "$fpid" VmHWM)"
    kill -0 "$fpid" 2>/dev/null || note "ferry (rss) died during the run; stderr tail: $(tail -n 5 "$WORK/ferry-rss.err" | tr '\n' ' ')"
    stop_pid "$ftpid"
    local wall agg
    wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f\n", b-a}')"
    agg="$(awk -v t="$total" -v w="$wall" 'BEGIN{printf "%.3f\n", t*8/w/1e9}')"
    log "RSS peak $(mib "$peak") MiB, after $(mib "$after") MiB; $ok/$RSS_CLIENTS GETs ok, $(awk -v t="$total" 'BEGIN{printf "%.1f", t/2^30}') GiB in $wall s = $agg Gbit/s"

    local ser; ser="$(awk '{printf "%s[%s,%s,%s,%s]", (NR>1?",":""), $1, $2, $3, $4}' "$samples")"
    local ctx; ctx="$(jq -cn --argjson n "$RSS_CLIENTS" --argjson size "$size" '{clients:$n, object_bytes:$size, storage:"disk (--data)"}')"
    emit rss "rss_before_mib" "$(mib "$before")" "MiB" "VmRSS before the GETs" "$(jq -cn --argjson c "$ctx" --argjson a "$anon_b" --argjson f "$filek_b" --argjson h0 "$hwm0" --argjson hu "$hwm_up" '$c + {rss_anon_kib:$a, rss_file_kib:$f, vmhwm_at_start_kib:$h0, vmhwm_after_upload_kib:$hu}')"
    emit rss "rss_peak_mib" "$(mib "$peak")" "MiB" "max VmRSS sampled every 0.5 s during ${RSS_CLIENTS} x ${cg[*]}" "$(jq -cn --argjson c "$ctx" --argjson a "$peak_anon" --argjson f "$peak_file" --argjson s "[$ser]" '$c + {peak_rss_anon_kib:$a, peak_rss_file_kib:$f, samples_t_vmrss_anon_file_kib:$s}')"
    emit rss "rss_after_mib" "$(mib "$after")" "MiB" "VmRSS 1 s after the GETs" "$(jq -cn --argjson c "$ctx" --argjson a "$anon_a" --argjson f "$file_a" --argjson h "$hwm" '$c + {rss_anon_kib:$a, rss_file_kib:$f, vmhwm_kib:$h}')"
    emit rss "rss_aggregate_gbit_s" "$agg" "Gbit/s" "${RSS_CLIENTS} x ${cg[*]}" "$(jq -cn --argjson c "$ctx" --argjson ok "$ok" --argjson bad "$bad" --argjson b "$total" --argjson w "$wall" --argjson cpu "$srv_cpu" --argjson up "$up_gbit" '$c + {ok:$ok, failed:$bad, bytes:$b, wall_s:$w, server_cpu_s:$cpu, upload_gbit_s:$up}')"
    row "ferry RSS before $RSS_CLIENTS GETs ($hsize object, --data)" "$(mib "$before")" "MiB" "anon $(mib "$anon_b"), file $(mib "$filek_b")" "VmHWM after upload $(mib "$hwm_up") MiB"
    row "ferry RSS peak during $RSS_CLIENTS concurrent GETs" "$(mib "$peak")" "MiB" "anon peak $(mib "$peak_anon"), file peak $(mib "$peak_file")" "sampled every 0.5 s, $(wc -l <"$samples") samples"
    row "ferry RSS after" "$(mib "$after")" "MiB" "anon $(mib "$anon_a"), file $(mib "$file_a")" "VmHWM $(mib "$hwm") MiB"
    row "aggregate throughput, $RSS_CLIENTS x GET $hsize" "$agg" "Gbit/s" "$ok ok, $bad failed, $wall s" "server CPU $srv_cpu s; upload $up_gbit Gbit/s"
}

want rate && section_rate
want bytes && section_bytes
want rss && section_rss

RUNTIME=$((SECONDS - T_START))
{
    echo "## ferry serve benchmark ($RUN_ID)"
    echo
    echo "git $GIT_SHA$([[ $GIT_DIRTY == true ]] && echo ' (dirty tree)'), $DATE, nproc $NPROC, kernel $KERNEL, binary built $BIN_MTIME, quick=$QUICK, repeats=$REPEATS, runtime ${RUNTIME} s."
    echo "Profile lan, anonymous, loopback only. $NPROC cores are shared by the load generator and the server: h2load and wrk run with -t 1. Medians of interleaved runs (A B A B ...); runs = min-max."
    echo
    echo "| figure | median | unit | runs | notes |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "Commands (each bounded by \`timeout\`):"
    for c in "${CMDS[@]}"; do echo "- $c"; done
    if ((${#NOTES[@]})); then
        echo
        echo "Odd things seen:"
        for n in "${NOTES[@]}"; do echo "- $n"; done
    fi
    echo
    echo "JSON lines appended to $OUT (run $RUN_ID)."
}
log "done in ${RUNTIME} s"
