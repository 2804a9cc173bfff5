"""`Client.open`: a read-only binary file object over one object.

Reads are ranged GETs pinned to the ETag seen when the file was opened (`If-Match`), so
a file never mixes two versions of an object: a change in between raises
`ferry.Precondition`.

What a read that misses the bytes held fetches depends on where it starts:

- where the previous read ended, or at the object's start (a reader going through the
  object in order): a block of `block_size` bytes, so small sequential reads cost one
  GET per block;
- anywhere else (after a seek: a Parquet footer, then each column chunk pyarrow asks
  for): the bytes asked for, at least `SEEK_READ_MIN`, so a column reader fetches its
  columns and not the blocks around them;
- a read of a block or more: exactly that, straight into the caller's buffer.

Read-ahead: once a block is fetched where the previous read ended (the reader is going
through the object in order), the next block is requested in the background
(`Client._get_range_ahead`, a task on ferry's runtime) while the caller reads this one,
so a sequential reader waits for first bytes only at its start. A seek elsewhere drops
the block read ahead (its request is aborted).
"""

from __future__ import annotations

import io

#: Bytes fetched per GET for small reads: 4 MiB, half the engine's 8 MiB parts, so a
#: seek-heavy reader (a Parquet footer, then column chunks) over-reads little while a
#: sequential one needs few requests.
DEFAULT_BLOCK_SIZE = 4 * 1024 * 1024
#: The least a read after a seek fetches: 256 KiB takes ~3 ms at S3's 90 MB/s per
#: connection, a tenth of its ~30 ms first byte (docs/lab/README.md, profiles), so a
#: reader of small scattered fields (a length, then the field it points to) gets the
#: bytes around each for a tenth of a round trip, while a column chunk (hundreds of KiB
#: and up) is fetched as asked.
SEEK_READ_MIN = 256 * 1024


class ObjectFile(io.RawIOBase):
    """A read-only, seekable binary file over an object (see `Client.open`)."""

    def __init__(self, client, url: str, block_size: int = DEFAULT_BLOCK_SIZE, known: tuple[int, str] | None = None):
        """`known`: (size, ETag) from a listing, in place of a HEAD (ferry.fsspec)."""
        super().__init__()
        if known is None:
            info = client.head(url)
            known = (info.size, info.etag)
        self._client = client
        self.url = url
        self.name = url
        self.size, self.etag = known
        self._block_size = max(1, int(block_size))
        self._pos = 0
        self._block_start = 0
        self._block = memoryview(b"")
        self._ahead = None  # PendingRange of the block after the current one
        self._read_end = 0  # where the last read ended: a read starting here is sequential
        #: Blocks served by read-ahead, and GETs made while the reader waited.
        self.ahead_hits = 0
        self.fetches = 0
        #: Bytes fetched, read-ahead included (a read-ahead dropped unread counts too).
        self.bytes_fetched = 0

    # io.RawIOBase
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._checkClosed()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence!r}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def _fetch(self, start: int, end: int):
        self.fetches += 1
        self.bytes_fetched += end - start
        return self._client._get_range_if_match(self.url, start, end, self.etag)

    def _load(self, n: int) -> None:
        """Makes bytes at the position current for a read of `n` that missed them: a
        block, from read-ahead when it has it, for a sequential read; what was asked
        (at least `SEEK_READ_MIN`) after a seek (module note)."""
        start = self._pos
        sequential = start == self._read_end
        ahead, self._ahead = self._ahead, None
        if not sequential:
            del ahead  # dropped: its request is aborted
            end = min(self.size, start + max(n, SEEK_READ_MIN))
            self._block = memoryview(self._fetch(start, end))
            self._block_start = start
            return
        end = min(self.size, start + self._block_size)
        if ahead is not None and ahead.start == start and ahead.end == end:
            self._block = memoryview(ahead.result())
            self.ahead_hits += 1
        else:
            del ahead
            self._block = memoryview(self._fetch(start, end))
        self._block_start = start
        # Read ahead once the reader has gone on from an earlier read (not at its first
        # read at the start, which may be all it wants: a format's magic bytes).
        if start > 0 and end < self.size:
            nxt = min(self.size, end + self._block_size)
            self.bytes_fetched += nxt - end
            self._ahead = self._client._get_range_ahead(self.url, end, nxt, self.etag)

    def _cached(self, n: int) -> memoryview | None:
        """Up to `n` bytes at the position from the current block, if it holds the position."""
        off = self._pos - self._block_start
        if 0 <= off < len(self._block):
            return self._block[off:off + n]
        return None

    def readinto(self, b) -> int:
        self._checkClosed()
        out = memoryview(b).cast("B")
        n = min(len(out), max(0, self.size - self._pos))
        if n == 0:
            return 0
        got = self._cached(n)
        if got is None:
            if n >= self._block_size:
                data = memoryview(self._fetch(self._pos, self._pos + n))
                out[:len(data)] = data
                self._pos += len(data)
                self._read_end = self._pos
                return len(data)
            self._load(n)
            got = self._cached(n)
            if got is None:
                return 0
        out[:len(got)] = got
        self._pos += len(got)
        self._read_end = self._pos
        return len(got)

    def read(self, size: int = -1) -> bytes:
        self._checkClosed()
        if size is None or size < 0:
            return self.readall()
        n = min(size, max(0, self.size - self._pos))
        if n == 0:
            return b""
        got = self._cached(n)
        if got is not None and len(got) == n:
            self._pos += n
            self._read_end = self._pos
            return bytes(got)
        buf = bytearray(n)
        done = 0
        while done < n:
            k = self.readinto(memoryview(buf)[done:])
            if k == 0:
                break
            done += k
        del buf[done:]
        return bytes(buf)

    def readall(self) -> bytes:
        self._checkClosed()
        if self._pos >= self.size:
            return b""
        data = bytes(self._fetch(self._pos, self.size))
        self._pos += len(data)
        self._read_end = self._pos
        return data

    def close(self) -> None:
        self._ahead = None
        super().close()

    def __repr__(self) -> str:
        return f"<ferry.ObjectFile {self.url!r} size={self.size} pos={self._pos}>"
