"""Round-trip a few objects through a running `ferry serve` with boto3 and print a table.

Run by scripts/demo.sh, which starts the server and sets FERRY_ENDPOINT, FERRY_ACCESS_KEY
and FERRY_SECRET_KEY. Every byte that goes up is checked (sha256) when it comes back.
"""

import hashlib
import os
import random
import sys
import tempfile
import time

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

MiB = 1024 * 1024
BUCKET = "demo"

rows = []
failed = False


def step(name, fn):
    """Run one step, time it, and record (name, ok, detail, bytes, ms)."""
    global failed
    t0 = time.perf_counter()
    try:
        detail, nbytes = fn()
        ok = True
    except Exception as e:  # report, keep going, exit non-zero at the end
        detail, nbytes, ok = f"{type(e).__name__}: {e}"[:70], None, False
        failed = True
    rows.append((name, ok, detail, nbytes, (time.perf_counter() - t0) * 1000))


def human(n):
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def main():
    s3 = boto3.session.Session().client(
        "s3", endpoint_url=os.environ["FERRY_ENDPOINT"], region_name="us-east-1",
        aws_access_key_id=os.environ["FERRY_ACCESS_KEY"], aws_secret_access_key=os.environ["FERRY_SECRET_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}))
    rng = random.Random(42)
    objects = {
        "hello.txt": b"hello, ferry\n",
        "data/1MiB.bin": rng.randbytes(MiB),
        "data/ünïcødé-ключ.txt": "ünïcødé ✓\n".encode() * 20,
    }
    big = rng.randbytes(20 * MiB)
    tmp = tempfile.mkdtemp(prefix="ferry-demo-")
    big_path = os.path.join(tmp, "big.bin")
    with open(big_path, "wb") as f:
        f.write(big)
    sha = lambda b: hashlib.sha256(b).hexdigest()

    step(f"create bucket {BUCKET}", lambda: (s3.create_bucket(Bucket=BUCKET) and "created", None))
    for key, data in objects.items():
        step(f"put {key}", lambda k=key, d=data: (
            "etag " + s3.put_object(Bucket=BUCKET, Key=k, Body=d)["ETag"].strip('"')[:12] + "…", len(d)))
    cfg = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)

    def upload_big():
        s3.upload_file(big_path, BUCKET, "big/20MiB.bin", Config=cfg)
        etag = s3.head_object(Bucket=BUCKET, Key="big/20MiB.bin")["ETag"].strip('"')
        return f"multipart, etag …{etag[-10:]}", len(big)

    step("upload_file big/20MiB.bin (5 MiB parts)", upload_big)
    objects["big/20MiB.bin"] = big

    def listing():
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
        assert keys == sorted(objects), keys
        return f"{len(keys)} keys, in order", None

    step("list_objects_v2", listing)
    for key, data in objects.items():
        def get(k=key, d=data):
            got = s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()
            assert sha(got) == sha(d), "sha256 mismatch"
            return "sha256 " + sha(got)[:12] + "… matches", len(got)
        step(f"get {key}", get)

    def range_get():
        r = s3.get_object(Bucket=BUCKET, Key="data/1MiB.bin", Range="bytes=1000-1999")
        body = r["Body"].read()
        assert body == objects["data/1MiB.bin"][1000:2000], "range bytes differ"
        return f"{r['ResponseMetadata']['HTTPStatusCode']} {r['ContentRange']}", len(body)

    step("range get bytes=1000-1999", range_get)

    def delete_all():
        r = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in objects]})
        left = s3.list_objects_v2(Bucket=BUCKET)["KeyCount"]
        assert left == 0, f"{left} keys left"
        return f"{len(r.get('Deleted', []))} deleted, bucket empty", None

    step("delete_objects", delete_all)
    step(f"delete bucket {BUCKET}", lambda: (s3.delete_bucket(Bucket=BUCKET) and "deleted", None))
    os.remove(big_path)
    os.rmdir(tmp)

    w = max(len(r[0]) for r in rows)
    print(f"\n{'step':<{w}}  {'result':<6}  {'bytes':>9}  {'ms':>7}  detail")
    print(f"{'-' * w}  ------  ---------  -------  {'-' * 30}")
    for name, ok, detail, nbytes, ms in rows:
        print(f"{name:<{w}}  {'ok' if ok else 'FAILED':<6}  {human(nbytes):>9}  {ms:7.1f}  {detail}")
    total = sum(len(d) for d in objects.values())
    print(f"\n{'all steps passed' if not failed else 'SOME STEPS FAILED'}: "
          f"{len(objects)} objects, {human(total)} up and back, bytes checked with sha256.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
