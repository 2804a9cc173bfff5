"""Every call of ferry.Client against a real `ferry serve`, bytes compared exactly."""

from __future__ import annotations

import datetime
import io
import os
import random
import urllib.request

import pytest

import ferry

MIB = 1024 * 1024


def blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def test_put_get_small(client, bucket):
    data = blob(1000)
    out = client.put(f"s3://{bucket}/small", data)
    assert out.size == 1000 and out.parts == 0 and out.etag
    got = client.get(f"s3://{bucket}/small")
    assert isinstance(got, ferry.Buffer)
    assert bytes(got) == data and len(got) == 1000 and got == data


def test_empty_object(client, bucket):
    client.put(f"s3://{bucket}/empty", b"")
    assert bytes(client.get(f"s3://{bucket}/empty")) == b""
    assert client.head(f"s3://{bucket}/empty").size == 0


def test_large_object_multipart_and_parallel_get(client, bucket):
    # Above the split threshold (16 MiB): put in parts, get in parallel ranged parts,
    # checked against the stored full-object CRC64NVME.
    data = blob(37 * MIB + 123, seed=1)
    out = client.put(f"s3://{bucket}/large", data)
    assert out.size == len(data) and out.parts == 5
    info = client.head(f"s3://{bucket}/large")
    assert info.checksum_algorithm == "CRC64NVME" and info.checksum
    got = client.get(f"s3://{bucket}/large")
    assert len(got) == len(data)
    assert memoryview(got) == memoryview(data)


def test_buffer_protocol_without_copies(client, bucket):
    data = blob(4096, seed=2)
    client.put(f"s3://{bucket}/buf", data)
    buf = client.get(f"s3://{bucket}/buf")
    view = memoryview(buf)
    assert view.readonly and view.format == "B" and view.nbytes == 4096 and view.ndim == 1
    with pytest.raises(TypeError):
        view[0] = 1
    np = pytest.importorskip("numpy")
    arr = np.frombuffer(buf, dtype=np.uint8)
    assert arr.tobytes() == data
    # The same memory, twice: the views share their address.
    assert np.frombuffer(buf, dtype=np.uint8).ctypes.data == arr.ctypes.data
    assert buf.to_bytes() == data
    assert "4096 bytes" in repr(buf)


def test_get_range_end_exclusive(client, bucket):
    data = blob(100_000, seed=3)
    url = f"s3://{bucket}/range"
    client.put(url, data)
    assert bytes(client.get_range(url, 10, 20)) == data[10:20]
    assert bytes(client.get_range(url, 0, 1)) == data[:1]
    assert bytes(client.get_range(url, 99_990, 100_000)) == data[99_990:]
    assert bytes(client.get_range(url, 5, 5)) == b""


def test_get_ranges_coalesced_exact(client, bucket):
    data = blob(3 * MIB, seed=4)
    url = f"s3://{bucket}/ranges"
    client.put(url, data)
    starts = [2 * MIB, 0, 100, 150, 1_000_000, 3 * MIB - 10, 7]
    ends = [2 * MIB + 4096, 64, 300, 250, 1_000_001, 3 * MIB, 7]
    parts = client.get_ranges(url, starts, ends)
    assert [bytes(p) for p in parts] == [data[s:e] for s, e in zip(starts, ends)]
    assert [bytes(p) for p in client.get_ranges(url, starts, ends, max_gap=0)] == [data[s:e] for s, e in zip(starts, ends)]
    assert [bytes(p) for p in client.get_ranges(url, starts, ends, max_gap=4 * MIB)] == [data[s:e] for s, e in zip(starts, ends)]
    with pytest.raises(ValueError):
        client.get_ranges(url, [0, 1], [5])
    with pytest.raises(ValueError):
        client.get_ranges(url, [10], [5])


def test_get_ranges_over_several_objects(client, bucket):
    a, b = blob(200_000, seed=40), blob(300_000, seed=41)
    client.put(f"s3://{bucket}/ra", a)
    client.put(f"s3://{bucket}/rb", b)
    urls = [f"s3://{bucket}/rb", f"s3://{bucket}/ra", f"s3://{bucket}/rb", f"s3://{bucket}/ra"]
    starts, ends = [5, 0, 250_000, 199_000], [50, 10, 260_000, 200_000]
    want = [b[5:50], a[0:10], b[250_000:260_000], a[199_000:200_000]]
    assert [bytes(p) for p in client.get_ranges(urls, starts, ends)] == want
    with pytest.raises(ValueError):
        client.get_ranges(urls[:2], starts, ends)
    with pytest.raises(ferry.NotFound):
        client.get_ranges([f"s3://{bucket}/ra", f"s3://{bucket}/none"], [0, 0], [1, 1])


def test_get_many_in_input_order(client, bucket):
    blobs = {f"s3://{bucket}/many/{i:03}": blob(i * 997 + 1, seed=i) for i in range(60)}
    blobs[f"s3://{bucket}/many/big"] = blob(20 * MIB, seed=99)
    for url, data in blobs.items():
        client.put(url, data)
    urls = list(reversed(list(blobs)))
    got = client.get_many(urls)
    assert [bytes(b) for b in got] == [blobs[u] for u in urls]
    got = client.get_many(urls, max_bytes_in_flight=4 * MIB, concurrency=8)
    assert [bytes(b) for b in got] == [blobs[u] for u in urls]


def test_get_many_errors(client, bucket):
    client.put(f"s3://{bucket}/there", b"x")
    urls = [f"s3://{bucket}/there", f"s3://{bucket}/missing"]
    with pytest.raises(ferry.NotFound):
        client.get_many(urls)
    got = client.get_many(urls, return_exceptions=True)
    assert bytes(got[0]) == b"x"
    assert isinstance(got[1], ferry.NotFound) and isinstance(got[1], FileNotFoundError)
    with pytest.raises(TypeError):
        client.get_many(f"s3://{bucket}/there")


def test_iter_get_ordered(client, bucket):
    blobs = [blob(50_000 + i, seed=i) for i in range(40)]
    urls = [f"s3://{bucket}/seq/{i:02}" for i in range(40)]
    for u, d in zip(urls, blobs):
        client.put(u, d)
    it = client.iter_get(urls)
    assert iter(it) is it
    assert [bytes(b) for b in it] == blobs
    with pytest.raises(StopIteration):
        next(it)


def test_iter_get_error_in_place(client, bucket):
    client.put(f"s3://{bucket}/a", b"a")
    it = client.iter_get([f"s3://{bucket}/a", f"s3://{bucket}/nope", f"s3://{bucket}/a"])
    assert bytes(next(it)) == b"a"
    with pytest.raises(ferry.NotFound):
        next(it)
    assert bytes(next(it)) == b"a"


def test_put_sources(client, bucket, tmp_path):
    data = blob(300_000, seed=5)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    sources = {
        "path": path,
        "str": str(path),
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "buffer": None,
        "file": io.BytesIO(data),
        "iterable": [data[:1000], b"", data[1000:200_000], data[200_000:]],
        "generator": (data[i:i + 70_000] for i in range(0, len(data), 70_000)),
    }
    client.put(f"s3://{bucket}/src/orig", data)
    sources["buffer"] = client.get(f"s3://{bucket}/src/orig")
    for name, src in sources.items():
        out = client.put(f"s3://{bucket}/src/{name}", src)
        assert out.size == len(data), name
        assert bytes(client.get(f"s3://{bucket}/src/{name}")) == data, name
    with pytest.raises(TypeError):
        client.put(f"s3://{bucket}/src/bad", 12345)


def test_put_numpy_arrays(client, bucket):
    np = pytest.importorskip("numpy")
    arr = np.arange(1_000_000, dtype=np.float64)
    client.put(f"s3://{bucket}/np/f64", arr)  # contiguous: sent from the array's memory
    got = np.frombuffer(client.get(f"s3://{bucket}/np/f64"), dtype=np.float64)
    assert np.array_equal(got, arr)
    strided = arr[::3]  # not contiguous: copied first
    client.put(f"s3://{bucket}/np/strided", strided)
    assert np.array_equal(np.frombuffer(client.get(f"s3://{bucket}/np/strided"), dtype=np.float64), strided)
    big = np.random.default_rng(15).integers(0, 1 << 30, 5_000_000, dtype=np.int32)  # 20 MB: multipart
    assert client.put(f"s3://{bucket}/np/big", big).parts == 3
    assert np.array_equal(np.frombuffer(client.get(f"s3://{bucket}/np/big"), dtype=np.int32), big)


def test_put_large_file_object_multipart(client, bucket, tmp_path):
    data = blob(19 * MIB, seed=6)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    with open(path, "rb") as f:
        out = client.put(f"s3://{bucket}/bigfile", f)
    assert out.parts == 3 and out.size == len(data)
    out = client.put(f"s3://{bucket}/bigpath", path)
    assert out.parts == 3
    for key in ("bigfile", "bigpath"):
        assert client.get(f"s3://{bucket}/{key}") == data


def test_put_if_not_exists(client, bucket, tmp_path):
    url = f"s3://{bucket}/once"
    client.put(url, b"first", if_not_exists=True)
    with pytest.raises(ferry.Precondition):
        client.put(url, b"second", if_not_exists=True)
    assert bytes(client.get(url)) == b"first"
    big = tmp_path / "big"
    big.write_bytes(blob(9 * MIB, seed=14))
    client.put(url + "-big", big, if_not_exists=True)
    with pytest.raises(ferry.Precondition):
        client.put(url + "-big", big, if_not_exists=True)
    client.put(url, b"third")  # without the condition: replaced
    assert bytes(client.get(url)) == b"third"


def test_put_source_raising_aborts(client, bucket):
    def chunks():
        yield b"x" * (9 * MIB)
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        client.put(f"s3://{bucket}/broken", chunks())
    with pytest.raises(ferry.NotFound):
        client.head(f"s3://{bucket}/broken")


def test_head(client, bucket):
    data = blob(1234, seed=7)
    client.put(f"s3://{bucket}/dir/h.bin", data)
    info = client.head(f"s3://{bucket}/dir/h.bin")
    assert isinstance(info, ferry.ObjectInfo)
    assert (info.url, info.bucket, info.key, info.size) == (f"s3://{bucket}/dir/h.bin", bucket, "dir/h.bin", 1234)
    assert info.etag.startswith('"') and not info.is_dir
    assert info.checksum_algorithm == "CRC64NVME"
    lm = info.last_modified
    assert isinstance(lm, datetime.datetime) and lm.tzinfo is not None
    assert abs((datetime.datetime.now(datetime.timezone.utc) - lm).total_seconds()) < 300


def test_list(client, bucket):
    keys = ["a/1", "a/2", "a/b/3", "c", "d/4"]
    for k in keys:
        client.put(f"s3://{bucket}/{k}", k.encode())
    top = list(client.list(f"s3://{bucket}/"))
    assert [(e.key, e.is_dir) for e in top] == [("a/", True), ("c", False), ("d/", True)]
    assert top[1].size == 1 and top[1].url == f"s3://{bucket}/c" and top[1].etag
    assert [e.key for e in client.list(f"s3://{bucket}/a/")] == ["a/1", "a/2", "a/b/"]
    deep = list(client.list(f"s3://{bucket}", recursive=True))
    assert [e.key for e in deep] == keys
    assert all(e.size == len(e.key) and e.last_modified is not None for e in deep)
    assert [e.key for e in client.list(f"s3://{bucket}/a/", recursive=True)] == ["a/1", "a/2", "a/b/3"]


def test_list_many_pages(client, bucket):
    urls = [f"s3://{bucket}/p/{i:05}" for i in range(2500)]
    client.put(urls[0], b"")
    # Bulk create through put_async + gather would do too; sequential puts are fast here.
    for u in urls[1:]:
        client.put(u, b"")
    assert [e.url for e in client.list(f"s3://{bucket}/p/", recursive=True)] == urls
    assert len(list(client.list(f"s3://{bucket}/p/"))) == 2500


def test_delete_one_and_many(client, bucket):
    urls = [f"s3://{bucket}/del/{i}" for i in range(1500)]
    for u in urls:
        client.put(u, b"1")
    client.delete(urls[0])
    with pytest.raises(ferry.NotFound):
        client.head(urls[0])
    client.delete(urls[1:])
    assert list(client.list(f"s3://{bucket}/del/", recursive=True)) == []
    client.delete(urls[0])  # a missing object: no error


def test_copy(client, bucket):
    small, large = blob(10_000, seed=8), blob(18 * MIB, seed=9)
    client.put(f"s3://{bucket}/cp/small", small)
    client.put(f"s3://{bucket}/cp/large", large)
    client.copy(f"s3://{bucket}/cp/small", f"s3://{bucket}/cp/small2")
    client.copy(f"s3://{bucket}/cp/large", f"s3://{bucket}/cp/large2")
    assert client.get(f"s3://{bucket}/cp/small2") == small
    assert client.get(f"s3://{bucket}/cp/large2") == large
    with pytest.raises(ferry.NotFound):
        client.copy(f"s3://{bucket}/cp/none", f"s3://{bucket}/cp/x")


def test_presign(client, bucket):
    data = blob(5000, seed=10)
    client.put(f"s3://{bucket}/ps", data)
    url = client.presign(f"s3://{bucket}/ps", expires=60)
    assert "X-Amz-Signature=" in url
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.read() == data
    with pytest.raises(ferry.ConfigError):
        client.presign(f"s3://{bucket}/ps", expires=30 * 24 * 3600)


def test_open_file_object(client, bucket):
    data = blob(10 * MIB + 17, seed=11)
    url = f"s3://{bucket}/open"
    client.put(url, data)
    with client.open(url, block_size=MIB) as f:
        assert f.readable() and f.seekable() and not f.writable()
        assert f.read(10) == data[:10] and f.tell() == 10
        f.seek(-100, os.SEEK_END)
        assert f.read() == data[-100:] and f.read(5) == b""
        f.seek(5 * MIB)
        buf = bytearray(3 * MIB)
        assert f.readinto(buf) == 3 * MIB and bytes(buf) == data[5 * MIB:8 * MIB]
        f.seek(100)
        f.seek(50, os.SEEK_CUR)
        assert f.read(2 * MIB) == data[150:150 + 2 * MIB]
        f.seek(0)
        assert f.read() == data
    assert f.closed
    with pytest.raises(ValueError):
        f.read(1)
    # Wrapped like any raw file.
    with client.open(url) as raw, io.BufferedReader(raw) as f:
        assert f.read(1000) == data[:1000]


def test_open_reads_ahead_when_sequential(client, bucket):
    data = blob(10 * MIB + 5, seed=18)
    url = f"s3://{bucket}/ahead"
    client.put(url, data)
    with client.open(url, block_size=MIB) as f:
        out = bytearray()
        while chunk := f.read(64 * 1024):
            out += chunk
        assert bytes(out) == data
        # 11 blocks: the first two fetched while the reader waited, the rest read ahead.
        assert (f.fetches, f.ahead_hits) == (2, 9)
    with client.open(url, block_size=MIB) as f:
        f.seek(5 * MIB)
        assert f.read(10) == data[5 * MIB:5 * MIB + 10]
        f.seek(100)  # random access: no read-ahead taken
        assert f.read(10) == data[100:110]
        assert f.ahead_hits == 0


def test_open_reads_after_a_seek_fetch_what_was_asked(client, bucket):
    """A column reader (seek, read a chunk; seek, read another) fetches its chunks, not
    the blocks around them; reading on from there turns into blocks and read-ahead."""
    from ferry._file import SEEK_READ_MIN

    data = blob(20 * MIB, seed=19)
    url = f"s3://{bucket}/columns"
    client.put(url, data)
    with client.open(url, block_size=4 * MIB) as f:
        f.seek(-64 * 1024, os.SEEK_END)  # a footer
        assert f.read(64 * 1024) == data[-64 * 1024:]
        f.seek(MIB)  # a column chunk
        assert f.read(700_000) == data[MIB:MIB + 700_000]
        f.seek(9 * MIB)  # a small field: the least a seek fetches
        assert f.read(10) == data[9 * MIB:9 * MIB + 10]
        assert f.bytes_fetched == 64 * 1024 + 700_000 + SEEK_READ_MIN
        assert f.fetches == 3 and f.ahead_hits == 0
        # Reading on in order from there: a block where the fetched bytes end, the next
        # one read ahead (up to the object's end), and that one served from it.
        got = bytearray()
        while len(got) < 8 * MIB:
            got += f.read(64 * 1024)
        assert bytes(got) == data[9 * MIB + 10:17 * MIB + 10]
        assert (f.fetches, f.ahead_hits) == (4, 1)
        assert f.bytes_fetched == 64 * 1024 + 700_000 + 11 * MIB


def test_open_pins_the_version(client, bucket):
    url = f"s3://{bucket}/pinned"
    client.put(url, blob(3 * MIB, seed=12))
    with client.open(url, block_size=MIB) as f:
        f.read(10)
        client.put(url, blob(3 * MIB, seed=13))
        f.seek(2 * MIB)
        with pytest.raises(ferry.Precondition):
            f.read(10)


def test_bucket_calls(client):
    client.create_bucket("py-made-here")
    client.put("s3://py-made-here/k", b"v")
    client.delete("s3://py-made-here/k")
    client.delete_bucket("py-made-here")
    with pytest.raises(ferry.NotFound):
        client.head("s3://py-made-here/k")


def test_progress_callbacks(client, bucket, tmp_path):
    data = blob(30 * MIB, seed=16)
    seen = []

    def cb(done, total):
        seen.append((done, total))

    client.put(f"s3://{bucket}/prog", data, callback=cb)
    assert seen and seen[-1] == (len(data), len(data))
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    seen.clear()
    path = tmp_path / "p.bin"
    path.write_bytes(data[:9 * MIB])
    client.put(f"s3://{bucket}/prog-path", path, callback=cb)
    assert seen[-1] == (9 * MIB, 9 * MIB)
    seen.clear()
    client.put(f"s3://{bucket}/prog-file", io.BytesIO(data[:3 * MIB]), callback=cb)
    assert seen[-1] == (3 * MIB, None)
    seen.clear()
    assert client.get(f"s3://{bucket}/prog", callback=cb) == data
    assert seen[-1] == (len(data), len(data))
    seen.clear()
    got = client.get_many([f"s3://{bucket}/prog", f"s3://{bucket}/prog-path"], callback=cb)
    assert [len(g) for g in got] == [len(data), 9 * MIB]
    assert seen[-1] == (len(data) + 9 * MIB, len(data) + 9 * MIB)


def test_a_raising_callback_stops_the_call(bucket):
    from ferry.testing import FerryServer

    with FerryServer(flags=["--rate-per-conn", "20000000"]) as srv:  # 20 MB/s: the get takes a while
        c = srv.client()
        c.create_bucket(bucket)
        c.put(f"s3://{bucket}/big", blob(40 * MIB, seed=17))

        def cb(done, total):
            if done > 0:
                raise RuntimeError("enough")

        with pytest.raises(RuntimeError, match="enough"):
            c.get(f"s3://{bucket}/big", callback=cb)


def test_stats(server, bucket):
    c = server.client(transport="h1-pool")
    c.put(f"s3://{bucket}/st", b"x")
    c.get(f"s3://{bucket}/st")
    s = c.stats()
    assert s["transport"] == "h1-pool"
    assert s["requests_sent"] >= 2 and s["connections_opened"] >= 1
    assert s["concurrency_limit"] >= 1 and s["throttles"] == 0
