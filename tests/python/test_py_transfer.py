"""Client.cp and Client.sync against a real `ferry serve`: local trees and objects
compared byte for byte, the summaries counted, failures raised with their reasons, and
pandas/pyarrow reading what was moved."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pandas
import pyarrow.parquet as pq
import pytest

import ferry

MIB = 1024 * 1024


def blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def read_tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


TREE = {
    "a.txt": b"alpha",
    "empty": b"",
    "sub/b.bin": blob(100_000, seed=1),
    "sub/deeper/c.bin": blob(12 * MIB + 5, seed=2),  # above the 8 MiB part: multipart up, ranged down
}


def test_cp_one_file_up_and_down(client, bucket, tmp_path):
    src = tmp_path / "one.bin"
    data = blob(3000, seed=3)
    src.write_bytes(data)
    s = client.cp(src, f"s3://{bucket}/dir/")  # a trailing / takes the file's name
    assert isinstance(s, ferry.TransferSummary)
    assert (s.objects, s.bytes, s.failed) == (1, 3000, [])
    assert client.get(f"s3://{bucket}/dir/one.bin") == data

    out = tmp_path / "down"
    out.mkdir()
    s = client.cp(f"s3://{bucket}/dir/one.bin", str(out))  # an existing directory too
    assert (s.objects, s.bytes) == (1, 3000)
    assert (out / "one.bin").read_bytes() == data
    # The file carries the object's Last-Modified, so a later sync compares the same time.
    lm = client.head(f"s3://{bucket}/dir/one.bin").last_modified.timestamp()
    assert abs((out / "one.bin").stat().st_mtime - lm) < 1.0
    # A download leaves no partial file or state behind.
    assert sorted(p.name for p in out.iterdir()) == ["one.bin"]


def test_cp_recursive_round_trip_and_server_side(client, bucket, tmp_path):
    up = tmp_path / "up"
    make_tree(up, TREE)
    s = client.cp(up, f"s3://{bucket}/tree/", recursive=True)
    assert s.objects == len(TREE) and s.bytes == sum(map(len, TREE.values())) and not s.failed
    keys = sorted(e.key for e in client.list(f"s3://{bucket}/tree/", recursive=True))
    assert keys == sorted(f"tree/{k}" for k in TREE)
    assert client.head(f"s3://{bucket}/tree/sub/deeper/c.bin").size == len(TREE["sub/deeper/c.bin"])

    s = client.cp(f"s3://{bucket}/tree/", f"s3://{bucket}/copy/", recursive=True)  # server side
    assert s.objects == len(TREE) and not s.failed

    down = tmp_path / "down"
    s = client.cp(f"s3://{bucket}/copy/", down, recursive=True)
    assert s.objects == len(TREE) and s.bytes == sum(map(len, TREE.values()))
    assert read_tree(down) == TREE


def test_cp_several_sources(client, bucket, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"A")
    b.write_bytes(b"BB")
    s = client.cp([a, str(b)], f"s3://{bucket}/many")  # several sources: dest is a directory
    assert (s.objects, s.bytes) == (2, 3)
    assert client.get(f"s3://{bucket}/many/a.txt") == b"A"
    assert client.get(f"s3://{bucket}/many/b.txt") == b"BB"


def test_cp_failure_raises_with_the_summary(client, bucket, tmp_path):
    client.put(f"s3://{bucket}/there", b"here")
    out = tmp_path / "out"
    with pytest.raises(ferry.NotFound) as e:
        client.cp([f"s3://{bucket}/there", f"s3://{bucket}/missing"], out)
    assert isinstance(e.value, FileNotFoundError)
    assert "1 of 2 failed" in str(e.value) and "missing" in str(e.value)
    s = e.value.summary
    assert s.objects == 1 and len(s.failed) == 1
    assert s.failed[0][0] == f"s3://{bucket}/missing" and s.failed[0][1]
    assert (out / "there").read_bytes() == b"here"
    # Nothing, not even a partial, under the missing object's name.
    assert sorted(p.name for p in out.iterdir()) == ["there"]


def test_cp_refuses_keys_that_leave_the_destination(client, bucket, tmp_path):
    client.put(f"s3://{bucket}/p/ok", b"ok")
    client.put(f"s3://{bucket}/p/../escape", b"bad")
    dest = tmp_path / "d" / "e"
    with pytest.raises(ferry.Error) as e:
        client.cp(f"s3://{bucket}/p/", dest, recursive=True)
    s = e.value.summary
    assert s.objects == 1 and len(s.failed) == 1
    assert "leave the destination" in s.failed[0][1]
    assert (dest / "ok").read_bytes() == b"ok"
    assert not (tmp_path / "d" / "escape").exists()


@pytest.mark.parametrize(
    "args, match",
    [
        (("LOCAL", "LOCAL2"), "local"),
        (("DIR", "s3://BUCKET/x/"), "directory"),
        (("s3://BUCKET", "LOCAL"), "bucket"),
        (("-", "s3://BUCKET/x"), "put or get"),
    ],
)
def test_cp_usage_mistakes_are_value_errors(client, bucket, tmp_path, args, match):
    (tmp_path / "dir").mkdir()
    names = {"LOCAL": str(tmp_path / "f"), "LOCAL2": str(tmp_path / "g"), "DIR": str(tmp_path / "dir")}
    src, dst = (names.get(a, a.replace("BUCKET", bucket)) for a in args)
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match=match):
        client.cp(src, dst)


def test_cp_progress_callback(client, bucket, tmp_path):
    up = tmp_path / "up"
    make_tree(up, TREE)
    seen = []
    client.cp(up, f"s3://{bucket}/prog/", recursive=True, callback=lambda d, t: seen.append((d, t)))
    total = sum(map(len, TREE.values()))
    assert seen and seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


def test_cp_parquet_for_pandas(server, client, bucket, tmp_path):
    df = pandas.DataFrame({"a": range(1000), "b": [f"row {i}" for i in range(1000)]})
    local = tmp_path / "t.parquet"
    df.to_parquet(local)
    client.cp(local, f"s3://{bucket}/pq/t.parquet")
    opts = {"endpoint_url": server.url, "credentials": server.credentials}
    back = pandas.read_parquet(f"ferry://{bucket}/pq/t.parquet", storage_options=opts)
    pandas.testing.assert_frame_equal(back, df)
    down = tmp_path / "down"
    client.cp(f"s3://{bucket}/pq/", down, recursive=True)
    assert pq.read_table(down / "t.parquet").to_pandas().equals(df)


def test_sync_up_then_nothing_then_changes(client, bucket, tmp_path):
    src = tmp_path / "src"
    make_tree(src, TREE)
    url = f"s3://{bucket}/mirror/"
    s = client.sync(src, url)
    assert s.objects == len(TREE) and s.skipped == 0 and s.deleted == 0
    s = client.sync(src, url)  # uploads are newer than the files: nothing to do
    assert (s.objects, s.bytes, s.skipped) == (0, 0, len(TREE))

    (src / "a.txt").write_bytes(b"alpha, longer")  # a size change
    (src / "new.txt").write_bytes(b"new")
    client.put(f"s3://{bucket}/mirror/extra", b"only at the destination")
    s = client.sync(src, url, dry_run=True, delete=True)
    assert s.objects == 0
    assert sorted((op, Path(a).name, r) for op, a, _, r in s.planned) == [
        ("cp", "a.txt", "sizes differ"),
        ("cp", "new.txt", "missing at the destination"),
        ("rm", "extra", "not in the source"),
    ]
    assert client.get(f"s3://{bucket}/mirror/a.txt") == b"alpha"  # nothing done

    s = client.sync(src, url, delete=True)
    assert (s.objects, s.deleted, s.skipped) == (2, 1, len(TREE) - 1)
    assert client.get(f"s3://{bucket}/mirror/a.txt") == b"alpha, longer"
    with pytest.raises(ferry.NotFound):
        client.head(f"s3://{bucket}/mirror/extra")


def test_sync_down_with_delete(client, bucket, tmp_path):
    for k, v in TREE.items():
        client.put(f"s3://{bucket}/down/{k}", v)
    dst = tmp_path / "dst"
    make_tree(dst, {"stale.txt": b"old", "sub/b.bin": b"different size"})
    s = client.sync(f"s3://{bucket}/down/", dst, delete=True)
    assert s.objects == len(TREE) and s.deleted == 1
    assert read_tree(dst) == TREE
    s = client.sync(f"s3://{bucket}/down/", dst)  # files carry Last-Modified: nothing to do
    assert (s.objects, s.skipped) == (0, len(TREE))


def test_sync_checksum_sees_same_size_changes(client, bucket, tmp_path):
    src = tmp_path / "src"
    make_tree(src, {"f.bin": b"0123456789"})
    url = f"s3://{bucket}/ck/"
    client.sync(src, url)
    # Same size, other bytes, and an older mtime: the default rule skips it...
    (src / "f.bin").write_bytes(b"abcdefghij")
    old = time.time() - 3600
    os.utime(src / "f.bin", (old, old))
    assert client.sync(src, url).objects == 0
    # ...the stored CRC against the file's does not.
    s = client.sync(src, url, checksum=True)
    assert s.objects == 1
    assert client.get(f"s3://{bucket}/ck/f.bin") == b"abcdefghij"
    assert client.sync(src, url, checksum=True).skipped == 1


def test_sync_usage_mistakes(client, bucket, tmp_path):
    with pytest.raises(ValueError, match="both sides are local"):
        client.sync(tmp_path, tmp_path / "x")
    with pytest.raises(ValueError, match="not a directory"):
        client.sync(tmp_path / "missing", f"s3://{bucket}/p/")
    with pytest.raises(ValueError, match="exclude"):
        client.sync(tmp_path, f"s3://{bucket}/p/", checksum=True, size_only=True)


def test_cp_download_resumes_after_an_interruption(bucket, tmp_path):
    from ferry.testing import FerryServer

    data = blob(40 * MIB, seed=9)
    with FerryServer(flags=["--rate-per-conn", "20000000"]) as srv:  # 20 MB/s a connection
        c = srv.client()
        c.create_bucket(bucket)
        c.put(f"s3://{bucket}/big.bin", data)
        out = tmp_path / "out"
        out.mkdir()

        def stop(done, total):
            if done > 20 * MIB:
                raise RuntimeError("interrupted")

        with pytest.raises(RuntimeError, match="interrupted"):
            c.cp(f"s3://{bucket}/big.bin", out / "big.bin", part_size=MIB, callback=stop)
        # Nothing under the final name; the finished parts wait beside it.
        assert not (out / "big.bin").exists()
        left = [p.name for p in out.iterdir()]
        assert left and all(n.startswith(".big.bin.ferry-") for n in left), left
        s = c.cp(f"s3://{bucket}/big.bin", out / "big.bin", part_size=MIB)
        assert s.resumed_bytes > 0 and s.bytes == len(data)
        assert (out / "big.bin").read_bytes() == data
        assert [p.name for p in out.iterdir()] == ["big.bin"]


def test_cp_and_sync_async(client, bucket, tmp_path):
    import threading

    src = tmp_path / "src"
    make_tree(src, TREE)
    seen, threads = [], set()

    def cb(done, total):
        seen.append((done, total))
        threads.add(threading.get_ident())

    async def main():
        s = await client.cp_async(src, f"s3://{bucket}/acp/", recursive=True, callback=cb)
        assert s.objects == len(TREE)
        total = sum(map(len, TREE.values()))
        assert seen[-1] == (total, total)
        s = await client.sync_async(f"s3://{bucket}/acp/", tmp_path / "dst")
        assert s.objects == len(TREE)
        s = await client.sync_async(f"s3://{bucket}/acp/", tmp_path / "dst")
        assert (s.objects, s.skipped) == (0, len(TREE))
        with pytest.raises(ValueError, match="local"):
            await client.cp_async(src, tmp_path / "x")
        with pytest.raises(ValueError, match="exclude"):
            client.sync_async(src, f"s3://{bucket}/p/", checksum=True, size_only=True)  # at the call
        with pytest.raises(ferry.NotFound) as e:
            await client.cp_async(f"s3://{bucket}/acp/missing", tmp_path / "m")
        assert e.value.summary.failed
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert threads == {loop_thread}
    assert read_tree(tmp_path / "dst") == TREE
