#!/usr/bin/env bash
# ferry serve beside MinIO under the same S3 clients, scores side by side.
#
#   scripts/compat.sh                 # the suite and the tools, both servers
#   scripts/compat.sh --suite-only    # versitygw's integration tests only
#   scripts/compat.sh --tools-only    # AWS CLI, boto3, s5cmd, rclone, mc only
#   scripts/compat.sh --filter REGEX  # suite cases whose name matches REGEX
#   scripts/compat.sh --no-setup      # skip scripts/setup.sh (what is built and installed)
#
# Two parts, each run against `ferry serve --memory` and MinIO started here with the
# same credentials, in the same run:
#
# * The suite: versitygw's S3 integration tests (`versitygw test NAME`, a public suite
#   written against AWS S3's behaviour; installed pinned by scripts/setup.sh). Each
#   case runs as its own process, so one that panics costs only itself (its
#   `full-flow` command stops at the first panic). Cases that need what a single-user
#   S3 endpoint cannot have are left out: IAM and multiple users (IAM*, S3IAM*,
#   AccessControl*, PublicBucket*), a gateway started with versioning on
#   (Versioning_*), the website endpoint (WebsiteHosting*), ACL-disabled gateway mode
#   (NoAclMode*).
# * The tools: the calls users make with the AWS CLI (`s3api` and `s3`), boto3, s5cmd,
#   rclone and the MinIO client `mc`, each a named step that passes or fails.
#
# Scores: passed/run for each server, overall and among the operations ferry serve
# claims (CLAIMED below; the server's module docs list them), and the claimed cases
# MinIO passes and ferry does not. Results land in .ferry-run/compat/ (one line per
# case and server in results.tsv, each case's output under logs/).
#
# Lab only: scripts/test.sh does not run this (the suite takes minutes); the Python
# and Rust tests hold what it found.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SUITE=1
TOOLS=1
FILTER=""
SETUP=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --suite-only) TOOLS=0 ;;
        --tools-only) SUITE=0 ;;
        --filter) FILTER="$2"; shift ;;
        --no-setup) SETUP=0 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

# Set up first, as test.sh and bench.sh do, with the lab tools this script needs.
if [[ $SETUP == 1 ]]; then FERRY_COMPAT_TOOLS=1 bash scripts/setup.sh || exit 1; fi

RUN="$ROOT/.ferry-run"
OUT="$RUN/compat"
rm -rf "$OUT"
mkdir -p "$OUT/logs"

need() { [[ -n "$2" && -x "$2" ]] || { echo "compat: $1 not found ($3); run scripts/setup.sh" >&2; exit 1; }; }
FERRY="${FERRY_BIN:-$ROOT/target/release/ferry}"
MINIO="${FERRY_MINIO:-$(cat "$RUN/minio-bin" 2>/dev/null)}"
VERSITYGW="$(cat "$RUN/versitygw-bin" 2>/dev/null)"
MC="$(cat "$RUN/mc-bin" 2>/dev/null)"
need ferry "$FERRY" "target/release/ferry"
need MinIO "$MINIO" ".ferry-run/minio-bin"
[[ $SUITE == 1 ]] && need versitygw "$VERSITYGW" ".ferry-run/versitygw-bin"
need mc "$MC" ".ferry-run/mc-bin"
if [[ $TOOLS == 1 ]]; then
    need aws "$ROOT/.venv/bin/aws" ".venv/bin/aws"
    need s5cmd "$ROOT/.venv/bin/s5cmd" ".venv/bin/s5cmd"
    need rclone "$(command -v rclone)" "apt-get install rclone"
fi

# Same credentials for both servers (MinIO wants a secret of 8 characters or more).
AK="compat-ak"
SK="compat-secret-key-0123"
REGION="us-east-1"
# The host's AWS settings must not leak into the clients (AWS_CA_BUNDLE, for one,
# makes the Go SDK refuse its own HTTP client).
for v in $(env | grep -o '^AWS_[A-Z_]*'); do unset "$v"; done
export HOME="$OUT/home"
mkdir -p "$HOME"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

FPORT="$(free_port)"
MPORT="$(free_port)"
FURL="http://127.0.0.1:$FPORT"
MURL="http://127.0.0.1:$MPORT"

# start_server NAME: (re)starts it on its port, empty, and waits until it answers.
start_server() {
    stop_server "$1"
    if [[ $1 == ferry ]]; then
        # No synthetic bucket: a listing of buckets holds only what the clients made.
        "$FERRY" serve --memory --addr "127.0.0.1:$FPORT" --access-key "$AK" --secret-key "$SK" \
            --region "$REGION" --synthetic-bucket '' >>"$OUT/ferry.log" 2>&1 &
        echo $! >"$OUT/ferry.pid"
    else
        rm -rf "$OUT/minio-data"
        mkdir -p "$OUT/minio-data"
        MINIO_ROOT_USER="$AK" MINIO_ROOT_PASSWORD="$SK" MINIO_BROWSER=off \
            "$MINIO" server "$OUT/minio-data" --address "127.0.0.1:$MPORT" --quiet >>"$OUT/minio.log" 2>&1 &
        echo $! >"$OUT/minio.pid"
    fi
    local url="$FURL"
    [[ $1 == minio ]] && url="$MURL"
    for _ in $(seq 1 150); do
        curl -s -o /dev/null "$url/" && return 0
        sleep 0.2
    done
    echo "compat: $1 did not start (log: $OUT/$1.log)" >&2
    tail -5 "$OUT/$1.log" >&2
    exit 1
}
stop_server() {
    local pid
    pid="$(cat "$OUT/$1.pid" 2>/dev/null)" || return 0
    kill "$pid" 2>/dev/null && while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$OUT/$1.pid"
}
cleanup() {
    stop_server ferry
    stop_server minio
    rm -rf "$OUT/minio-data"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start_server ferry
start_server minio
echo "ferry serve: $FURL   MinIO: $MURL   (logs: $OUT)"

# Operations ferry serve claims, as the suite's case-name prefixes.
CLAIMED='^(Authentication|PresignedAuth|CreateBucket|HeadBucket|ListBuckets|DeleteBucket|GetBucketLocation|PutObject|HeadObject|GetObject|ListObjects|ListObjectsV2|ListObjectVersions|DeleteObject|DeleteObjects|CopyObject|CreateMultipartUpload|UploadPart|UploadPartCopy|ListParts|ListMultipartUploads|AbortMultipartUpload|CompleteMultipartUpload|CompletedMultipartUpload|PutBucketAcl|GetBucketAcl|PutObjectAcl|GetObjectAcl|GetBucketVersioning|PutBucketVersioning|SignedStreamingPayload|SignedStreamingPayloadTrailer|UnsignedStreamingPayloadTrailer|UnsignedStreaminPayloadTrailer|Router[A-Za-z]*)_'
EXCLUDED='^(IAM|S3IAM|AccessControl|PublicBucket|Versioning_|WebsiteHosting|NoAclMode)'

RESULTS="$OUT/results.tsv"
: >"$RESULTS"

# --- the suite ----------------------------------------------------------------------
# Every case process names its buckets test-bucket-1, -2, ... (some with a prefix): one
# that fails without tearing down leaves a bucket the next case cannot create. After a
# failed case the server's test buckets are removed with mc (objects, versions and uploads included;
# legal holds cleared, governance retention bypassed); a bucket that still cannot go
# (compliance-mode retention) means the server is restarted empty.
test_buckets() { # server-name
    MC_CONFIG_DIR="$OUT/mc-suite" "$MC" ls --json "suite-$1" 2>/dev/null \
        | grep -o '"key":"[a-z0-9.-]*test-bucket-[0-9]*/"' | cut -d'"' -f4
}
clean_buckets() { # server-name
    local b log="$OUT/logs/$1.cleanup.log"
    export MC_CONFIG_DIR="$OUT/mc-suite"
    for b in $(test_buckets "$1"); do
        "$MC" legalhold clear --recursive --versions "suite-$1/$b" >>"$log" 2>&1
        "$MC" rm --recursive --versions --force --bypass "suite-$1/$b" >>"$log" 2>&1
        "$MC" rb --force --dangerous "suite-$1/$b" >>"$log" 2>&1
    done
    if [[ -n "$(test_buckets "$1")" ]]; then
        echo "restarting $1: test buckets left behind" >>"$log"
        start_server "$1"
    fi
}

run_case() { # server-name url case
    local log="$OUT/logs/$1.$3.log"
    timeout 120 "$VERSITYGW" test -a "$AK" -s "$SK" -e "$2" "$3" >"$log" 2>&1
    if grep -q "PASS" "$log" && ! grep -q "FAIL" "$log" && ! grep -q "^panic:" "$log"; then
        printf 'suite\t%s\t%s\tpass\n' "$3" "$1"
    else
        printf 'suite\t%s\t%s\tfail\n' "$3" "$1"
        clean_buckets "$1"
    fi
}

if [[ $SUITE == 1 ]]; then
    "$VERSITYGW" test --help 2>/dev/null | awk '/Runs .* integration test/ {print $1}' \
        | grep -Ev "$EXCLUDED" | { if [[ -n "$FILTER" ]]; then grep -E "$FILTER"; else cat; fi; } >"$OUT/cases.txt"
    n=$(wc -l <"$OUT/cases.txt")
    MC_CONFIG_DIR="$OUT/mc-suite" "$MC" alias set suite-ferry "$FURL" "$AK" "$SK" --api S3v4 >/dev/null
    MC_CONFIG_DIR="$OUT/mc-suite" "$MC" alias set suite-minio "$MURL" "$AK" "$SK" --api S3v4 >/dev/null
    echo "suite: versitygw $("$VERSITYGW" --version 2>/dev/null | head -1 | awk '{print $NF}'), $n cases against each server"
    # The two servers in parallel, each case after the other on its server.
    ( while read -r c; do run_case ferry "$FURL" "$c"; done <"$OUT/cases.txt" >"$OUT/suite-ferry.tsv" ) &
    F=$!
    ( while read -r c; do run_case minio "$MURL" "$c"; done <"$OUT/cases.txt" >"$OUT/suite-minio.tsv" ) &
    M=$!
    wait $F $M
    cat "$OUT/suite-ferry.tsv" "$OUT/suite-minio.tsv" >>"$RESULTS"
fi

# --- the tools ----------------------------------------------------------------------
AWS="$ROOT/.venv/bin/aws"
S5CMD="$ROOT/.venv/bin/s5cmd"
PY="$ROOT/.venv/bin/python"
TOOLDIR="$OUT/tooldata"
mkdir -p "$TOOLDIR/tree/sub"
head -c 17000000 /dev/urandom >"$TOOLDIR/big.bin"  # past the AWS CLI multipart threshold (8 MiB)
for i in 1 2 3; do echo "file $i" >"$TOOLDIR/tree/f$i.txt"; echo "sub $i" >"$TOOLDIR/tree/sub/s$i.txt"; done

step() { # server-name tool-step command...
    local name="$1" label="$2"
    shift 2
    local log="$OUT/logs/$name.tool.${label//\//_}.log"
    if "$@" >"$log" 2>&1; then
        printf 'tools\t%s\t%s\tpass\n' "$label" "$name" >>"$RESULTS"
    else
        printf 'tools\t%s\t%s\tfail\n' "$label" "$name" >>"$RESULTS"
    fi
}

tools() { # server-name url
    local name="$1" url="$2" b="compat-tools-$1"
    export AWS_ACCESS_KEY_ID="$AK" AWS_SECRET_ACCESS_KEY="$SK" AWS_DEFAULT_REGION="$REGION" AWS_REGION="$REGION"
    local aws=("$AWS" --endpoint-url "$url")
    step "$name" awscli/create-bucket "${aws[@]}" s3api create-bucket --bucket "$b"
    step "$name" awscli/create-bucket-again "bash" -c "${aws[*]} s3api create-bucket --bucket $b 2>&1 | grep -q BucketAlreadyOwnedByYou"
    step "$name" awscli/head-bucket "${aws[@]}" s3api head-bucket --bucket "$b"
    step "$name" awscli/get-bucket-location "${aws[@]}" s3api get-bucket-location --bucket "$b"
    step "$name" awscli/get-bucket-versioning "${aws[@]}" s3api get-bucket-versioning --bucket "$b"
    step "$name" awscli/put-bucket-versioning-suspended "${aws[@]}" s3api put-bucket-versioning --bucket "$b" --versioning-configuration Status=Suspended
    step "$name" awscli/get-bucket-acl "${aws[@]}" s3api get-bucket-acl --bucket "$b"
    step "$name" awscli/put-bucket-acl-private "${aws[@]}" s3api put-bucket-acl --bucket "$b" --acl private
    step "$name" awscli/put-object "${aws[@]}" s3api put-object --bucket "$b" --key "dir/a b.txt" --body "$TOOLDIR/tree/f1.txt"
    step "$name" awscli/head-object "${aws[@]}" s3api head-object --bucket "$b" --key "dir/a b.txt"
    step "$name" awscli/get-object "${aws[@]}" s3api get-object --bucket "$b" --key "dir/a b.txt" "$TOOLDIR/got.txt"
    step "$name" awscli/get-object-acl "${aws[@]}" s3api get-object-acl --bucket "$b" --key "dir/a b.txt"
    step "$name" awscli/put-object-acl-private "${aws[@]}" s3api put-object-acl --bucket "$b" --key "dir/a b.txt" --acl private
    step "$name" awscli/copy-object "${aws[@]}" s3api copy-object --bucket "$b" --key copy.txt --copy-source "$b/dir/a b.txt"
    step "$name" awscli/list-objects "${aws[@]}" s3api list-objects --bucket "$b"
    step "$name" awscli/list-objects-v2-fetch-owner "bash" -c "${aws[*]} s3api list-objects-v2 --bucket $b --fetch-owner | grep -q '\"Owner\"'"
    step "$name" awscli/list-object-versions "bash" -c "${aws[*]} s3api list-object-versions --bucket $b | grep -q '\"VersionId\": \"null\"'"
    step "$name" awscli/s3-cp-multipart "${aws[@]}" s3 cp "$TOOLDIR/big.bin" "s3://$b/big.bin"
    step "$name" awscli/get-object-part-number "bash" -c "${aws[*]} s3api head-object --bucket $b --key big.bin --part-number 1 | grep -q PartsCount"
    step "$name" awscli/s3-sync-up "${aws[@]}" s3 sync "$TOOLDIR/tree" "s3://$b/tree/"
    step "$name" awscli/s3-ls-recursive "${aws[@]}" s3 ls --recursive "s3://$b/"
    step "$name" awscli/s3-sync-down "${aws[@]}" s3 sync "s3://$b/tree/" "$TOOLDIR/down-$name/"
    step "$name" awscli/s3-presign "bash" -c "curl -sf \"\$(${aws[*]} s3 presign s3://$b/copy.txt)\" | grep -q 'file 1'"
    step "$name" awscli/create-multipart-then-delete-bucket "bash" -c "${aws[*]} s3api create-bucket --bucket $b-mpu && ${aws[*]} s3api create-multipart-upload --bucket $b-mpu --key k >/dev/null && ${aws[*]} s3api delete-bucket --bucket $b-mpu"
    step "$name" boto3/default-presigned-url "$PY" - "$url" "$b" <<'EOF'
import sys, boto3, requests
from botocore.config import Config
url, b = sys.argv[1], sys.argv[2]
c = boto3.client("s3", endpoint_url=url, config=Config(s3={"addressing_style": "path"}))
r = requests.get(c.generate_presigned_url("get_object", Params={"Bucket": b, "Key": "copy.txt"}), timeout=30)
assert r.status_code == 200 and r.content == b"file 1\n", (r.status_code, r.text)
EOF
    step "$name" boto3/sigv2-client "$PY" - "$url" "$b" <<'EOF'
import sys, boto3
from botocore.config import Config
url, b = sys.argv[1], sys.argv[2]
c = boto3.client("s3", endpoint_url=url, config=Config(signature_version="s3", s3={"addressing_style": "path"}))
c.put_object(Bucket=b, Key="v2", Body=b"sigv2")
assert c.get_object(Bucket=b, Key="v2")["Body"].read() == b"sigv2"
EOF
    step "$name" boto3/delete-objects-version-null "$PY" - "$url" "$b" <<'EOF'
import sys, boto3
url, b = sys.argv[1], sys.argv[2]
c = boto3.client("s3", endpoint_url=url)
c.put_object(Bucket=b, Key="vn", Body=b"1")
r = c.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "vn", "VersionId": "null"}]})
assert [d["Key"] for d in r["Deleted"]] == ["vn"] and not r.get("Errors"), r
EOF
    local s5=("$S5CMD" --endpoint-url "$url")
    step "$name" s5cmd/ls-buckets "${s5[@]}" ls
    step "$name" s5cmd/cp-up "${s5[@]}" cp "$TOOLDIR/tree/*" "s3://$b/s5/"
    step "$name" s5cmd/ls "${s5[@]}" ls "s3://$b/s5/*"
    step "$name" s5cmd/cp-down "${s5[@]}" cp "s3://$b/s5/*" "$TOOLDIR/s5-$name/"
    step "$name" s5cmd/rm "${s5[@]}" rm "s3://$b/s5/*"
    local rc=(rclone --config /dev/null --s3-provider Other --s3-endpoint "$url" --s3-access-key-id "$AK"
        --s3-secret-access-key "$SK" --s3-region "$REGION" --low-level-retries 1 --retries 1)
    step "$name" rclone/lsd "${rc[@]}" lsd :s3:
    step "$name" rclone/copy-up "${rc[@]}" copy "$TOOLDIR/tree" ":s3:$b/rc/"
    step "$name" rclone/copy-big "${rc[@]}" copyto --s3-upload-cutoff 5M --s3-chunk-size 5M "$TOOLDIR/big.bin" ":s3:$b/rc-big.bin"
    step "$name" rclone/check "${rc[@]}" check "$TOOLDIR/tree" ":s3:$b/rc/"
    step "$name" rclone/lsjson-versions "${rc[@]}" lsjson --s3-versions ":s3:$b/rc/"
    step "$name" rclone/delete "${rc[@]}" delete ":s3:$b/rc/"
    export MC_CONFIG_DIR="$OUT/mc-$name"
    step "$name" mc/alias-set "$MC" alias set "s-$name" "$url" "$AK" "$SK" --api S3v4
    step "$name" mc/ls "$MC" ls "s-$name"
    step "$name" mc/mb "$MC" mb "s-$name/$b-mc"
    step "$name" mc/cp-recursive "$MC" cp --recursive "$TOOLDIR/tree/" "s-$name/$b-mc/tree/"
    step "$name" mc/cp-multipart "$MC" cp "$TOOLDIR/big.bin" "s-$name/$b-mc/big.bin"
    step "$name" mc/ls-recursive "$MC" ls --recursive "s-$name/$b-mc"
    step "$name" mc/stat "$MC" stat "s-$name/$b-mc/big.bin"
    step "$name" mc/cat "bash" -c "'$MC' cat 's-$name/$b-mc/tree/f2.txt' | grep -q 'file 2'"
    step "$name" mc/share-download "bash" -c "curl -sf \"\$('$MC' share download --json 's-$name/$b-mc/tree/f3.txt' | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"share\"])')\" | grep -q 'file 3'"
    step "$name" mc/mirror "$MC" mirror "s-$name/$b-mc/tree" "$TOOLDIR/mc-mirror-$name"
    step "$name" mc/version-info "$MC" version info "s-$name/$b-mc"
    step "$name" mc/rm-recursive "$MC" rm --recursive --force "s-$name/$b-mc"
    step "$name" mc/rb "$MC" rb --force "s-$name/$b-mc"
    step "$name" awscli/s3-rb-force "${aws[@]}" s3 rb --force "s3://$b"
}

if [[ $TOOLS == 1 ]]; then
    echo "tools: AWS CLI $("$AWS" --version 2>&1 | awk '{print $1}' | cut -d/ -f2), s5cmd $("$S5CMD" version 2>&1 | head -1), rclone $(rclone version 2>/dev/null | head -1 | awk '{print $2}'), mc $("$MC" --version 2>/dev/null | head -1 | awk '{print $3}')"
    tools ferry "$FURL"
    tools minio "$MURL"
fi

# --- scores -------------------------------------------------------------------------
"$PY" - "$RESULTS" "$CLAIMED" <<'EOF'
import collections, re, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
claimed = re.compile(sys.argv[2])
res = collections.defaultdict(dict)
for part, case, server, outcome in rows:
    res[(part, case)][server] = outcome == "pass"
def score(sel):
    cases = [k for k in res if sel(k)]
    f = sum(res[k].get("ferry", False) for k in cases)
    m = sum(res[k].get("minio", False) for k in cases)
    return len(cases), f, m
print()
print(f"{'':44} {'ferry serve':>12} {'MinIO':>12}")
lines = [
    ("suite: every case run", lambda k: k[0] == "suite"),
    ("suite: cases of operations ferry claims", lambda k: k[0] == "suite" and claimed.search(k[1])),
    ("tools: AWS CLI, boto3, s5cmd, rclone, mc", lambda k: k[0] == "tools"),
]
for label, sel in lines:
    n, f, m = score(sel)
    if n:
        print(f"{label:44} {f:>5} / {n:<5} {m:>5} / {n:<5}")
gap = sorted(k for k in res if res[k].get("minio") and not res[k].get("ferry")
             and (k[0] == "tools" or claimed.search(k[1])))
print()
print(f"claimed cases and tool steps MinIO passes and ferry serve fails: {len(gap)}")
for part, case in gap:
    print(f"  {part}: {case}")
better = sorted(k for k in res if res[k].get("ferry") and not res[k].get("minio"))
print(f"cases ferry serve passes and MinIO fails: {len(better)}")
EOF
