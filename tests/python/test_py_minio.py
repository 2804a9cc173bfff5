"""The Python package against MinIO, a third-party S3 server that checks SigV4 strictly.

MinIO is `$FERRY_MINIO` (scripts/test.sh sets it), else the binary scripts/setup.sh
built (named in .ferry-run/minio-bin). Without either, these tests are reported skipped
with the reason."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest
from emulators import binary, free_port, wait_until

import ferry

USER, PASSWORD = "ferrypython", "ferry-python-secret"
MIB = 1024 * 1024


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


@pytest.fixture(scope="module")
def minio():
    exe = binary("FERRY_MINIO", "minio-bin")
    if exe is None:
        pytest.skip("MinIO is not available (set FERRY_MINIO or run scripts/setup.sh): Python tests against MinIO not run")
    port = free_port()
    data = tempfile.mkdtemp(prefix="ferry-py-minio-")
    env = dict(os.environ, MINIO_ROOT_USER=USER, MINIO_ROOT_PASSWORD=PASSWORD, MINIO_BROWSER="off")
    proc = subprocess.Popen([exe, "server", data, "--address", f"127.0.0.1:{port}", "--quiet"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        # Ready, then past its start-up 503s (an anonymous ListBuckets answers 403).
        for path, want in (("/minio/health/ready", 200), ("/", 403)):
            wait_until(lambda: _status(url + path) == want, proc, f"MinIO (answering {path} with {want})", 60)
        yield url
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def mc(minio):
    c = ferry.Client(minio, credentials=(USER, PASSWORD), region="us-east-1")
    c.create_bucket("py-minio")
    return c


def blob(n, seed):
    return random.Random(seed).randbytes(n)


def test_round_trips(mc):
    small, large = blob(5000, 60), blob(21 * MIB, 61)
    assert mc.put("s3://py-minio/small", small).parts == 0
    assert mc.put("s3://py-minio/dir/large", large).parts == 3
    assert mc.get("s3://py-minio/small") == small
    assert mc.get("s3://py-minio/dir/large") == large
    assert bytes(mc.get_range("s3://py-minio/dir/large", 10 * MIB, 10 * MIB + 7)) == large[10 * MIB:10 * MIB + 7]
    parts = mc.get_ranges("s3://py-minio/dir/large", [0, 5, 20 * MIB], [3, 4000, 21 * MIB])
    assert [bytes(p) for p in parts] == [large[:3], large[5:4000], large[20 * MIB:]]
    assert [bytes(b) for b in mc.get_many(["s3://py-minio/dir/large", "s3://py-minio/small"])] == [large, small]
    assert [bytes(b) for b in mc.iter_get(["s3://py-minio/small"] * 3)] == [small] * 3
    assert mc.head("s3://py-minio/dir/large").size == len(large)
    assert [(e.key, e.is_dir) for e in mc.list("s3://py-minio/")] == [("dir/", True), ("small", False)]
    assert [e.key for e in mc.list("s3://py-minio/", recursive=True)] == ["dir/large", "small"]
    mc.copy("s3://py-minio/dir/large", "s3://py-minio/copy")
    assert mc.get("s3://py-minio/copy") == large
    with urllib.request.urlopen(mc.presign("s3://py-minio/small", expires=60), timeout=10) as r:
        assert r.read() == small
    with mc.open("s3://py-minio/dir/large") as f:
        f.seek(7 * MIB)
        assert f.read(100) == large[7 * MIB:7 * MIB + 100]
    mc.delete(["s3://py-minio/copy", "s3://py-minio/dir/large", "s3://py-minio/small"])
    assert list(mc.list("s3://py-minio/", recursive=True)) == []


def test_errors(minio, mc):
    with pytest.raises(ferry.NotFound):
        mc.get("s3://py-minio/missing")
    wrong = ferry.Client(minio, credentials=(USER, "not-the-secret"), region="us-east-1")
    with pytest.raises(ferry.Auth):
        wrong.get("s3://py-minio/missing")
