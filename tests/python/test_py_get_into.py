"""`Client.get_into`: an object read into the caller's writable buffer, against a real
`ferry serve`. Exact bytes through the one-GET path and the parallel-parts path, into
each kind of buffer a loader hands over (bytearray, numpy array, a memoryview slice,
an mmap); a buffer of the wrong size or a read-only one is refused before a byte is
written; the awaitable twin."""

from __future__ import annotations

import asyncio
import mmap

import numpy as np
import pytest

import ferry

from test_py_calls import blob

MIB = 1024 * 1024
# Above `get`'s split (16 MiB), not a multiple of the 8 MiB part: three parts, the last short.
LARGE = 17 * MIB + 12


@pytest.fixture(scope="module")
def objects(client):
    name = "py-get-into"
    client.create_bucket(name)
    small, large = blob(1000, seed=31), blob(LARGE, seed=32)
    client.put(f"s3://{name}/small", small)
    client.put(f"s3://{name}/large", large)
    return name, small, large


def test_get_into_bytearray_exact_bytes(client, objects):
    b, small, large = objects
    for key, want in (("small", small), ("large", large)):
        buf = bytearray(len(want))
        assert client.get_into(f"s3://{b}/{key}", buf) == len(want)
        assert buf == want
    # The same buffer again, another object of its size: every byte rewritten.
    buf = bytearray(b"\xee" * len(small))
    client.get_into(f"s3://{b}/small", buf)
    assert buf == small


def test_get_into_numpy_array_of_another_dtype(client, objects):
    b, _, large = objects
    arr = np.zeros(LARGE // 4, dtype=np.float32)
    assert arr.nbytes == LARGE
    assert client.get_into(f"s3://{b}/large", arr) == LARGE
    assert arr.tobytes() == large


def test_get_into_memoryview_slice_leaves_the_rest(client, objects):
    b, small, _ = objects
    backing = bytearray(b"\x55" * (len(small) + 20))
    assert client.get_into(f"s3://{b}/small", memoryview(backing)[10:10 + len(small)]) == len(small)
    assert backing[10:10 + len(small)] == small
    assert backing[:10] == b"\x55" * 10 and backing[-10:] == b"\x55" * 10


def test_get_into_mmap(client, objects, tmp_path):
    b, _, large = objects
    path = tmp_path / "landing"
    path.write_bytes(b"\0" * LARGE)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), LARGE) as m:
        assert client.get_into(f"s3://{b}/large", m) == LARGE
        m.flush()
    assert path.read_bytes() == large


@pytest.mark.parametrize("delta", [-1, 1])
def test_get_into_wrong_size_is_a_value_error_and_writes_nothing(client, objects, delta):
    b, small, large = objects
    for key, want in (("small", small), ("large", large)):
        buf = bytearray(b"\xaa" * (len(want) + delta))
        with pytest.raises(ValueError, match=f"is {len(want)} bytes but the buffer holds {len(want) + delta}"):
            client.get_into(f"s3://{b}/{key}", buf)
        assert buf == b"\xaa" * (len(want) + delta)


def test_get_into_read_only_buffers_are_refused(client, objects):
    b, small, _ = objects
    with pytest.raises(TypeError, match="read-only"):
        client.get_into(f"s3://{b}/small", bytes(len(small)))
    with pytest.raises(TypeError, match="read-only"):
        client.get_into(f"s3://{b}/small", memoryview(bytearray(len(small))).toreadonly())
    frozen = np.zeros(len(small), dtype=np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        client.get_into(f"s3://{b}/small", frozen)
    assert not frozen.any()
    with pytest.raises(TypeError, match="writable buffer"):
        client.get_into(f"s3://{b}/small", "not a buffer")
    with pytest.raises(ValueError, match="contiguous"):
        client.get_into(f"s3://{b}/small", np.zeros((len(small), 2), dtype=np.uint8)[:, 0])


def test_get_into_missing_object_leaves_the_buffer(client, objects):
    b, small, _ = objects
    buf = bytearray(b"\xaa" * len(small))
    with pytest.raises(ferry.NotFound):
        client.get_into(f"s3://{b}/missing", buf)
    assert buf == b"\xaa" * len(small)


def test_get_into_async_twin(client, objects):
    b, small, large = objects

    async def main():
        big, little = np.empty(LARGE, dtype=np.uint8), bytearray(len(small))
        got = await asyncio.gather(client.get_into_async(f"s3://{b}/large", big),
                                   client.get_into_async(f"s3://{b}/small", little))
        assert got == [LARGE, len(small)]
        assert big.tobytes() == large and little == small
        with pytest.raises(ValueError, match="exactly the object's size"):
            await client.get_into_async(f"s3://{b}/small", bytearray(3))

    asyncio.run(main())
