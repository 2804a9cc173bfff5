"""`get_many` with what a listing knows: `ObjectInfo` entries (from `list` and `head`) and
`sizes` go with the GETs as size hints, against a real `ferry serve`, bytes compared
exactly. A wrong size hint costs speed only: the bytes still come back whole."""

from __future__ import annotations

import asyncio
import random

import pytest

import ferry

MIB = 1024 * 1024


def blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture
def objects(client, bucket):
    """Small objects and one over a part size (8 MiB), under one prefix."""
    data = {f"s3://{bucket}/g/{i:03}": blob(i * 1013 + 1, seed=i) for i in range(40)}
    data[f"s3://{bucket}/g/big"] = blob(20 * MIB, seed=7)
    for url, b in data.items():
        client.put(url, b)
    return data


def test_get_many_takes_the_entries_of_a_listing(client, bucket, objects):
    entries = list(client.list(f"s3://{bucket}/g/", recursive=True))
    assert sorted(e.url for e in entries) == sorted(objects)
    got = client.get_many(entries)
    assert [bytes(b) for b in got] == [objects[e.url] for e in entries]
    # Entries and URLs mixed, in the caller's order; a head() result is an entry too.
    head = client.head(f"s3://{bucket}/g/big")
    mixed = [head, f"s3://{bucket}/g/001", entries[5]]
    got = client.get_many(mixed, concurrency=2)
    assert [bytes(b) for b in got] == [objects[head.url], objects[f"s3://{bucket}/g/001"], objects[entries[5].url]]


def test_get_many_sizes_and_wrong_hints(client, bucket, objects):
    urls = sorted(objects)
    got = client.get_many(urls, sizes=[len(objects[u]) for u in urls])
    assert [bytes(b) for b in got] == [objects[u] for u in urls]
    # Wrong sizes, too small and too large, and unknown ones: the same bytes.
    wrong = [1 if i % 3 == 0 else None if i % 3 == 1 else 64 * MIB for i in range(len(urls))]
    got = client.get_many(urls, sizes=wrong)
    assert [bytes(b) for b in got] == [objects[u] for u in urls]


def test_get_many_async_takes_entries(client, bucket, objects):
    entries = list(client.list(f"s3://{bucket}/g/", recursive=True))

    async def main():
        return await client.get_many_async(entries, sizes=[e.size for e in entries])

    got = asyncio.run(main())
    assert [bytes(b) for b in got] == [objects[e.url] for e in entries]


def test_get_many_refuses_what_is_not_an_object(client, bucket, objects):
    dirs = [e for e in client.list(f"s3://{bucket}/", recursive=False) if e.is_dir]
    assert dirs, "the non-recursive listing has the g/ prefix"
    with pytest.raises(ValueError, match="common prefix"):
        client.get_many(dirs)
    with pytest.raises(ValueError, match="2 objects but 1 sizes"):
        client.get_many([f"s3://{bucket}/g/001", f"s3://{bucket}/g/002"], sizes=[5])
    with pytest.raises(TypeError, match="URL .str. or an ObjectInfo"):
        client.get_many([f"s3://{bucket}/g/001", 42])
    # A missing object among listed ones: its place holds the error, the rest arrive.
    entries = [e for e in client.list(f"s3://{bucket}/g/", recursive=True)][:3]
    client.delete(entries[1].url)
    got = client.get_many(entries, return_exceptions=True)
    assert bytes(got[0]) == objects[entries[0].url] and bytes(got[2]) == objects[entries[2].url]
    assert isinstance(got[1], ferry.NotFound)


def _metric(url: str, name: str) -> int:
    """A gauge of the server's /_ferry/metrics."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/_ferry/metrics", timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == name:
            return int(parts[1])
    raise AssertionError(f"no {name} in {text}")


def test_get_many_pipelines_small_objects_past_the_connection_count():
    """Small objects of known size fill each connection's pipeline: a server that answers
    each GET after 40 ms sees more requests in progress at once than the client has
    connections (its own count, /_ferry/metrics); an explicit `concurrency` still bounds
    the objects in flight. (On auto a pipeline's depth follows the controller's limit,
    here the 4 connections, so 4 x 4.) Bytes compared exactly."""
    from ferry.testing import FerryServer

    conns = 4
    with FerryServer(["--ttfb-p50", "40ms", "--ttfb-p99", "40ms"]) as srv:
        setup = srv.client()
        setup.create_bucket("pipe")
        data = {f"s3://pipe/o{i:03}": blob(2048 + i, seed=i) for i in range(96)}
        for url, b in data.items():
            setup.put(url, b)
        urls = sorted(data)
        sizes = [len(data[u]) for u in urls]
        # Bounded by the caller: `conns` objects at once (the PUTs above went one at a
        # time); auto's pipelining probe and hedged GETs may add copies of some.
        got = srv.client(max_connections=conns).get_many(urls, sizes=sizes, concurrency=conns)
        assert [bytes(b) for b in got] == [data[u] for u in urls]
        bounded = _metric(srv.url, "ferry_requests_in_progress_peak")
        assert bounded <= 2 * conns, f"{bounded} requests in progress with concurrency={conns}"
        # The default: admission lets the small GETs share the connections' places.
        got = srv.client(max_connections=conns).get_many(urls, sizes=sizes)
        assert [bytes(b) for b in got] == [data[u] for u in urls]
        peak = _metric(srv.url, "ferry_requests_in_progress_peak")
        assert 2 * conns < peak <= conns * 32 + conns, f"{peak} requests in progress at once on {conns} connections"
