"""The asyncio twins: awaited on asyncio, many at once, same bytes as the sync calls."""

from __future__ import annotations

import asyncio

import pytest

import ferry

from test_py_calls import blob

MIB = 1024 * 1024


def test_async_twins(client, bucket):
    small, large = blob(777, seed=20), blob(17 * MIB, seed=21)

    async def main():
        out = await client.put_async(f"s3://{bucket}/s", small)
        assert out.size == 777
        out = await client.put_async(f"s3://{bucket}/l", large)
        assert out.parts == 3
        assert bytes(await client.get_async(f"s3://{bucket}/s")) == small
        assert await client.get_async(f"s3://{bucket}/l") == large
        assert bytes(await client.get_range_async(f"s3://{bucket}/l", 5, 500)) == large[5:500]
        parts = await client.get_ranges_async(f"s3://{bucket}/l", [0, 10 * MIB], [10, 10 * MIB + 5])
        assert [bytes(p) for p in parts] == [large[:10], large[10 * MIB:10 * MIB + 5]]
        many = await client.get_many_async([f"s3://{bucket}/l", f"s3://{bucket}/s"])
        assert [bytes(b) for b in many] == [large, small]
        info = await client.head_async(f"s3://{bucket}/l")
        assert info.size == len(large)
        with pytest.raises(ferry.NotFound):
            await client.get_async(f"s3://{bucket}/missing")
        got = await client.get_many_async([f"s3://{bucket}/missing"], return_exceptions=True)
        assert isinstance(got[0], FileNotFoundError)

    asyncio.run(main())


def test_async_gather_many(client, bucket):
    blobs = [blob(10_000 + i, seed=i) for i in range(50)]

    async def main():
        await asyncio.gather(*(client.put_async(f"s3://{bucket}/g/{i}", b) for i, b in enumerate(blobs)))
        got = await asyncio.gather(*(client.get_async(f"s3://{bucket}/g/{i}") for i in range(50)))
        assert [bytes(g) for g in got] == blobs

    asyncio.run(main())


def test_async_put_from_file_objects_and_iterables(client, bucket, tmp_path):
    import io

    big = blob(20 * MIB + 3, seed=22)  # above one 8 MiB part: a multipart upload from chunks

    def chunks():
        for at in range(0, len(big), 3 * MIB):
            yield big[at:at + 3 * MIB]

    async def main():
        out = await client.put_async(f"s3://{bucket}/f", io.BytesIO(b"x" * 1000))
        assert (out.size, out.parts) == (1000, 0)
        out = await client.put_async(f"s3://{bucket}/it", chunks())
        assert out.size == len(big) and out.parts == 3
        path = tmp_path / "big.bin"
        path.write_bytes(big)
        with open(path, "rb") as f:
            out = await client.put_async(f"s3://{bucket}/file", f)
        assert out.size == len(big)
        with pytest.raises(TypeError, match="if_not_exists"):
            await client.put_async(f"s3://{bucket}/x", io.BytesIO(b"x"), if_not_exists=True)

    asyncio.run(main())
    assert client.get(f"s3://{bucket}/f") == b"x" * 1000
    assert client.get(f"s3://{bucket}/it") == big
    assert client.get(f"s3://{bucket}/file") == big


def test_async_put_source_raising_aborts(client, bucket):
    def chunks():
        yield blob(9 * MIB, seed=23)  # past one part: the multipart upload has begun
        raise OSError("the source broke")

    async def main():
        await client.put_async(f"s3://{bucket}/broken", chunks())

    with pytest.raises(OSError, match="the source broke"):
        asyncio.run(main())
    with pytest.raises(ferry.NotFound):
        client.head(f"s3://{bucket}/broken")


def test_async_callbacks_run_on_the_loop(client, bucket):
    import threading

    data = blob(30 * MIB, seed=24)
    seen, threads = [], set()

    def cb(done, total):
        seen.append((done, total))
        threads.add(threading.get_ident())

    async def main():
        loop_thread = threading.get_ident()
        await client.put_async(f"s3://{bucket}/cb", data, callback=cb)
        assert seen[-1] == (len(data), len(data))
        seen.clear()
        got = await client.get_async(f"s3://{bucket}/cb", callback=cb)
        assert got == data and seen[-1] == (len(data), len(data))
        seen.clear()
        await client.get_many_async([f"s3://{bucket}/cb", f"s3://{bucket}/cb"], callback=cb)
        assert seen[-1] == (2 * len(data), 2 * len(data))
        assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
        return loop_thread

    loop_thread = asyncio.run(main())
    assert threads == {loop_thread}


def test_async_in_two_event_loops(client, bucket):
    client.put(f"s3://{bucket}/two", b"two")

    async def one():
        return await client.get_async(f"s3://{bucket}/two")

    for _ in range(2):
        assert asyncio.run(one()) == b"two"
    # Outside a running loop there is nothing to await on.
    with pytest.raises(RuntimeError):
        client.get_async(f"s3://{bucket}/two")


def test_async_for_over_list_and_iter_get(client, bucket):
    blobs = [blob(3000 + i, seed=i) for i in range(30)]
    urls = [f"s3://{bucket}/ai/{i:02}" for i in range(30)]
    for u, b in zip(urls, blobs):
        client.put(u, b)

    async def main():
        keys = [e.key async for e in client.list(f"s3://{bucket}/ai/", recursive=True)]
        assert keys == [f"ai/{i:02}" for i in range(30)]
        got = [bytes(b) async for b in client.iter_get(urls)]
        assert got == blobs
        it = client.iter_get([urls[0], f"s3://{bucket}/ai/missing", urls[1]])
        assert bytes(await it.__anext__()) == blobs[0]
        with pytest.raises(ferry.NotFound):
            await it.__anext__()
        assert bytes(await it.__anext__()) == blobs[1]
        with pytest.raises(StopAsyncIteration):
            await it.__anext__()
        # A second __anext__ while the first is pending is refused, not mixed up.
        it = client.list(f"s3://{bucket}/ai/")
        first = it.__anext__()
        with pytest.raises(RuntimeError, match="in use"):
            it.__anext__()
        assert (await first).key == "ai/00"

    asyncio.run(main())
