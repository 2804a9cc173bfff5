"""`ferry cp s3://... DIR` end to end against `ferry serve`: what a download leaves on disk
besides the bytes. Files get the object's Last-Modified as their mtime (the listing's, in
milliseconds, for a tree; HEAD's, in seconds, for one object), in nested directories, by
one GET or by ranged parts, synced or not; and what an earlier killed run left beside a
target (its temp file, its resume state) is gone once the download completes."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import time

import pytest

from helpers import file_sha256, payload, s3_client, sha256
from test_cli import fy  # noqa: F401 (a fixture)

MIB = 1024 * 1024

# Several files per directory, three levels, one object above the part size (ranged).
OBJECTS = {"a.txt": 16 * 1024, "b.txt": 0, "d1/c.txt": 16 * 1024, "d1/d.txt": 7, "d1/d2/e.txt": 16 * 1024,
           "d1/d2/f.txt": 300, "d1/d2/d3/g.txt": 16 * 1024, "h/i.txt": 5, "h/big.bin": 6 * MIB + 3}


def listing_ms(s3, bucket, prefix):
    """Key below `prefix` -> its Last-Modified from the listing, in ms since the epoch."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            t = o["LastModified"]
            out[o["Key"][len(prefix):]] = calendar.timegm(t.utctimetuple()) * 1000 + t.microsecond // 1000
    return out


def mtime_ms(path):
    return os.stat(path).st_mtime_ns // 1_000_000


@pytest.mark.parametrize("sync_flag", [[], ["--fsync"]], ids=["page-cache", "fsync"])
def test_tree_download_gives_every_file_its_last_modified(fy, bucket, tmp_path, mem_server, sync_flag):
    s3 = s3_client(mem_server)
    for i, (key, size) in enumerate(OBJECTS.items()):
        s3.put_object(Bucket=bucket, Key=f"t/{key}", Body=payload(size, 40 + i))
    want = listing_ms(s3, bucket, "t/")
    assert sorted(want) == sorted(OBJECTS)
    # A file left with its download time must differ from its object's time.
    time.sleep(0.2)
    dest = tmp_path / "back"
    fy(*sync_flag, "cp", "-r", "--part-size", "5MiB", f"s3://{bucket}/t/", dest)
    for i, (key, size) in enumerate(OBJECTS.items()):
        f = dest / key
        assert file_sha256(f) == sha256(payload(size, 40 + i)), key
        assert mtime_ms(f) == want[key], f"{key}: mtime {mtime_ms(f)} ms, Last-Modified {want[key]} ms"
    # Nothing but the objects: no temp or state files.
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(OBJECTS)


def test_one_object_gets_heads_last_modified(fy, bucket, tmp_path, mem_server):
    s3 = s3_client(mem_server)
    s3.put_object(Bucket=bucket, Key="one", Body=payload(1000, 3))
    head = s3.head_object(Bucket=bucket, Key="one")["LastModified"]
    fy("cp", f"s3://{bucket}/one", tmp_path / "one")
    assert os.stat(tmp_path / "one").st_mtime_ns == calendar.timegm(head.utctimetuple()) * 1_000_000_000


@pytest.mark.parametrize("recursive", [False, True], ids=["one-object", "tree"])
def test_what_a_killed_run_left_is_gone_after_a_small_download(fy, bucket, tmp_path, mem_server, recursive):
    """A killed ranged download of an earlier, larger version left its temp file and state;
    the object is now small (one GET, no state of its own): both are still cleaned up."""
    s3 = s3_client(mem_server)
    data = payload(16 * 1024, 9)
    s3.put_object(Bucket=bucket, Key="d/sub/obj", Body=data)
    s3.put_object(Bucket=bucket, Key="d/sub/other", Body=payload(10, 1))
    dest_dir = tmp_path / "out" / "sub"
    dest_dir.mkdir(parents=True)
    part, state = dest_dir / ".obj.ferry-part", dest_dir / ".obj.ferry-state"
    part.write_bytes(b"\0" * (20 * MIB))
    state.write_text(json.dumps({"algo": "CRC64NVME", "etag": '"0123"', "size": 20 * MIB, "part_size": 8 * MIB,
                                 "done": {"0": "AAAAAAAAAAA="}}))
    if recursive:
        p = fy("--json", "cp", "-r", f"s3://{bucket}/d/", tmp_path / "out")
        lines = [json.loads(line) for line in p.out.splitlines()]
        assert sorted(r["dest"] for r in lines) == sorted([str(dest_dir / "obj"), str(dest_dir / "other")])
    else:
        p = fy("--json", "cp", f"s3://{bucket}/d/sub/obj", dest_dir / "obj")
        assert json.loads(p.out)["resumed_bytes"] == 0
    assert (dest_dir / "obj").read_bytes() == data
    assert not part.exists(), "the earlier run's temp file is still there"
    assert not state.exists(), "the earlier run's resume state is still there"


def test_a_temp_file_without_state_is_replaced(fy, bucket, tmp_path, mem_server):
    """A failed single GET leaves its temp file (no state): the next run writes over it."""
    s3 = s3_client(mem_server)
    data = payload(5000, 12)
    s3.put_object(Bucket=bucket, Key="x", Body=data)
    (tmp_path / ".x.ferry-part").write_bytes(b"stale bytes, longer than nothing" * 1000)
    fy("cp", f"s3://{bucket}/x", tmp_path / "x")
    assert (tmp_path / "x").read_bytes() == data
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".x")]


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs: a real file system that fills up (needs root to mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("size,part", [(6 * MIB + 3, "5MiB"), (5 * MIB, "8MiB")], ids=["ranged", "one-get"])
def test_a_full_disk_fails_clearly_and_leaves_nothing(fy, bucket, mem_server, small_disk, size, part):
    """A download that does not fit: exit 1, the error names the file and the disk being
    full, and nothing is left under the target's name or beside it (the ranged download's
    temp file is allocated at its start, so that one fails before a byte is fetched; the
    one-GET download fails as its writes run out of room)."""
    s3 = s3_client(mem_server)
    s3.put_object(Bucket=bucket, Key="full/x.bin", Body=payload(size, 7))
    p = fy("cp", "--part-size", part, f"s3://{bucket}/full/x.bin", small_disk / "x.bin", check=False)
    assert p.returncode == 1, (p.returncode, p.err)
    assert "No space left on device" in p.err and "x.bin" in p.err, p.err
    assert p.err.count("No space left on device") == 1, p.err
    assert sorted(os.listdir(small_disk)) == [], os.listdir(small_disk)
