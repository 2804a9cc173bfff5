"""`Client.get` of large objects against a real `ferry serve`: the buffer pool (a dropped
`Buffer`'s memory is what the next `get` of a similar size lands in, never memory a live
view still reads), its limit and off switch, and the stream that gets ranged helpers
when the server caps each connection (`--profile s3`)."""

from __future__ import annotations

import numpy as np
import pytest

import ferry
from ferry.testing import FerryServer

from test_py_calls import blob

MIB = 1024 * 1024
# Above `get`'s split (16 MiB) and the pool's 4 MiB floor; B within a quarter of A.
A, B = 17 * MIB + 12, 17 * MIB - 4096


def address(buf) -> int:
    return np.frombuffer(buf, dtype=np.uint8).__array_interface__["data"][0]


@pytest.fixture
def pool():
    """The pool on, emptied before and after (other tests' buffers are not ours)."""
    before = ferry.set_buffer_pool(1 << 30)
    ferry.set_buffer_pool(0)
    ferry.set_buffer_pool(1 << 30)
    yield
    ferry.set_buffer_pool(0)
    ferry.set_buffer_pool(before)


@pytest.fixture(scope="module")
def objects(client):
    name = "py-get-pool"
    client.create_bucket(name)
    a, b = blob(A, seed=41), blob(B, seed=42)
    client.put(f"s3://{name}/a", a)
    client.put(f"s3://{name}/b", b)
    return name, a, b


def test_a_dropped_buffer_is_where_the_next_get_lands(client, objects, pool):
    name, a, b = objects
    first = client.get(f"s3://{name}/a")
    at = address(first)
    assert first == a
    assert ferry.buffer_pool()[1:] == (0, 0), "a live buffer is not in the pool"
    del first
    limit, kept, count = ferry.buffer_pool()
    assert count == 1 and A <= kept <= A + A // 8 and limit == 1 << 30
    # Another object a little smaller: the same memory, every byte its own.
    second = client.get(f"s3://{name}/b")
    assert address(second) == at and second == b
    assert ferry.buffer_pool()[1:] == (0, 0)


def test_memory_a_view_still_reads_is_never_reused(client, objects, pool):
    name, a, b = objects
    first = client.get(f"s3://{name}/a")
    view = memoryview(first)
    at = address(first)
    del first  # the view keeps the Buffer, and so its memory, alive
    second = client.get(f"s3://{name}/b")
    assert address(second) != at
    assert view == a and second == b
    del view
    assert ferry.buffer_pool()[2] == 1


def test_limit_zero_keeps_nothing(client, objects, pool):
    name, a, _ = objects
    assert ferry.set_buffer_pool(0) == 1 << 30
    buf = client.get(f"s3://{name}/a")
    assert buf == a
    del buf
    assert ferry.buffer_pool() == (0, 0, 0)
    # A limit below the buffer: it is freed, not kept.
    ferry.set_buffer_pool(A // 2)
    del_me = client.get(f"s3://{name}/a")
    del del_me
    assert ferry.buffer_pool()[1:] == (0, 0)


def test_a_capped_connection_gets_helpers_and_the_same_bytes():
    """90 MB/s per connection (the s3 profile) is below the 250 MB/s a stream must keep to
    read on alone, so the read splits: more than one GET, the stored CRC checked."""
    with FerryServer(["--profile", "s3"]) as srv:
        c = srv.client()
        c.create_bucket("capped")
        data = blob(40 * MIB + 5, seed=43)
        c.put("s3://capped/x", data)
        before = c.stats()["requests"]["GET"]
        assert c.get("s3://capped/x") == data
        assert c.stats()["requests"]["GET"] - before > 1


def test_iter_get_lands_in_the_memory_of_the_buffer_dropped_before(client, objects, pool):
    """`iter_get` draws on the pool as `get` does: each object dropped before the next is
    asked for gives its memory to it, so a loop over many large objects keeps reusing
    the same few buffers (each byte its own)."""
    name, a, b = objects
    urls = [f"s3://{name}/{k}" for k in ("a", "b", "a", "b")]
    addresses = []
    for buf, want in zip(client.iter_get(urls), (a, b, a, b)):
        assert buf == want
        addresses.append(address(buf))
        del buf
    # The first object lands in fresh memory (the pool is empty); each later one is
    # collected after the one before was dropped, into its memory when the size fits.
    assert len(set(addresses)) < len(addresses), f"every object in fresh memory: {addresses}"
    assert ferry.buffer_pool()[2] >= 1, "no dropped iter_get buffer was kept"
