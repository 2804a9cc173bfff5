"""`read_table`: Parquet columns straight from object storage, in few requests, with
the bytes held at any moment bounded.

```text
urls ─► HEAD each (threads; sizes) ─► one get_ranges over every file's tail (64 KiB)
     ─► footers parsed by pyarrow (a longer footer: its rest fetched)
     ─► plan: units of work, each a run of one file's row groups whose requested
        column chunks are at most UNIT_BYTES (a bigger row group is a unit alone)
     ─► fetch units ahead on FETCHERS threads (one get_ranges per unit: the engine
        coalesces neighbouring chunks), while the bytes fetched and not yet decoded
        stay within max_bytes_in_flight
     ─► the caller's thread decodes the units in order (pyarrow, on its own CPU
        threads), each from its fetched chunks only, then drops those bytes
     ─► one Table (the units' tables concatenated, no copy)
```

Why a window rather than one call for everything: one call holds every column chunk of
every file until the last file is decoded, so the process peaks at the compressed bytes
plus the table; and pyarrow decodes nothing until the last byte arrived, so fetching
and decoding add up. With the window, decoding unit i overlaps the fetches of the units
after it, and memory is the table plus the window.

pyarrow reads each unit through a sparse file object that holds the footer and that
unit's fetched ranges, and hands pyarrow views of them (`read_buffer`, no copy); a read
outside them (a writer that put something where the footer does not say) is fetched on
the spot and counted in `ReadStats.extra_reads`.
"""

from __future__ import annotations

import collections
import io
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import ferry

__all__ = ["read_table", "ReadStats"]

#: Bytes fetched from the end of each file first: a footer of 20 columns and a few row
#: groups is a few KiB; 64 KiB covers most in the first request.
TAIL = 64 * 1024

#: Fetched and not yet decoded bytes, at most (a unit bigger than this is fetched
#: alone). 64 MiB is about what keeps the link busy through a round trip: S3's ~30 ms
#: first byte plus a 3 MB chunk at 90 MB/s per connection is ~65 ms, and at ~1 GB/s
#: (a 10 Gb/s NIC, or loopback on the lab machine) that is ~65 MB on the way. The lab's
#: parquet-scan sweep (docs/lab/parquet-scan.md) measured 32, 64 and 128 MiB.
DEFAULT_BYTES_IN_FLIGHT = 64 * 1024 * 1024

#: The most requested chunk bytes in one unit: a quarter of the window, so at least
#: four units are on the way while one is decoded.
UNIT_FRACTION = 4

#: Threads waiting on fetches (each one `get_ranges` call, the GIL released): the
#: window holds at most this many units.
FETCHERS = 16


@dataclass
class ReadStats:
    files: int = 0
    #: Bytes of the files in all.
    file_bytes: int = 0
    #: Bytes asked for: footers and column chunks.
    bytes_requested: int = 0
    #: Reads pyarrow made outside the fetched ranges (fetched one by one).
    extra_reads: int = 0
    #: Units of work (runs of row groups) fetched and decoded.
    units: int = 0
    #: The most column-chunk bytes fetched or being fetched and not yet decoded.
    peak_bytes_in_flight: int = 0
    #: Seconds the caller waited for fetched bytes (after the footers), and spent in
    #: pyarrow decoding: where a scan's time goes.
    fetch_wait_s: float = 0.0
    decode_s: float = 0.0


class _Sparse(io.RawIOBase):
    """A read-only file of `size` bytes of which only some ranges are held."""

    def __init__(self, client, url: str, size: int, stats: ReadStats):
        super().__init__()
        self._client, self._url, self._size, self._stats = client, url, size, stats
        self._footer: list[tuple[int, memoryview]] = []
        self._ranges: list[tuple[int, memoryview]] = []
        self._pos = 0

    def add_footer(self, start: int, data) -> None:
        self._footer.append((start, memoryview(data)))

    def hold(self, starts: Sequence[int], parts: Sequence) -> None:
        """Holds these column chunks (a unit's) in place of the previous unit's."""
        self._ranges = [(s, memoryview(p)) for s, p in zip(starts, parts)]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def _slice(self, start: int, end: int):
        for at, data in self._ranges + self._footer:
            if at <= start and end <= at + len(data):
                return data[start - at:end - at]
        self._stats.extra_reads += 1
        data = memoryview(self._client.get_range(self._url, start, end))
        self._ranges.append((start, data))
        return data

    def _take(self, n: int | None):
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        if end <= self._pos:
            return memoryview(b"")
        out = self._slice(self._pos, end)
        self._pos = end
        return out

    def read_buffer(self, n: int = -1):
        """`read` without a copy: a view of the held bytes (pyarrow's PythonFile
        prefers this method when a file has it)."""
        return self._take(n)

    def read(self, n: int = -1) -> bytes:
        return bytes(self._take(n))

    def readinto(self, b) -> int:
        data = self._take(len(b))
        memoryview(b).cast("B")[:len(data)] = data
        return len(data)


def _footer_len(tail: memoryview) -> int:
    if len(tail) < 8 or bytes(tail[-4:]) != b"PAR1":
        raise ValueError("not a Parquet file (no PAR1 at its end)")
    return struct.unpack("<I", tail[-8:-4])[0] + 8


@dataclass
class _Unit:
    """A run of one file's row groups and the byte ranges of their requested chunks."""

    file: int
    row_groups: list
    starts: list
    ends: list

    @property
    def nbytes(self) -> int:
        return sum(e - s for s, e in zip(self.starts, self.ends))


def _chunk_spans(meta, rg: int, want) -> list[tuple[int, int]]:
    """The byte ranges of row group `rg`'s chunks of the wanted columns (all if None):
    from the dictionary page (when there is one) to the end of the data pages."""
    group = meta.row_group(rg)
    spans = []
    for ci in range(group.num_columns):
        col = group.column(ci)
        if want is not None and col.path_in_schema.split(".")[0] not in want:
            continue
        start = col.data_page_offset
        if col.has_dictionary_page and col.dictionary_page_offset:
            start = min(start, col.dictionary_page_offset)
        spans.append((start, start + col.total_compressed_size))
    return spans


def _plan(metas, want, unit_bytes: int) -> list[_Unit]:
    """Units in table order: each file's row groups, cut into runs of at most
    `unit_bytes` of requested chunks (at least one row group each)."""
    units: list[_Unit] = []
    for fi, meta in enumerate(metas):
        cur = None
        for rg in range(meta.num_row_groups):
            spans = _chunk_spans(meta, rg, want)
            size = sum(e - s for s, e in spans)
            if cur is None or (cur.row_groups and cur.nbytes + size > unit_bytes):
                cur = _Unit(fi, [], [], [])
                units.append(cur)
            cur.row_groups.append(rg)
            cur.starts += [s for s, _ in spans]
            cur.ends += [e for _, e in spans]
        if meta.num_row_groups == 0:
            units.append(_Unit(fi, [], [], []))
    return units


def read_table(
    urls: str | Sequence[str],
    columns: Sequence[str] | None = None,
    client: ferry.Client | None = None,
    stats: ReadStats | None = None,
    max_bytes_in_flight: int = DEFAULT_BYTES_IN_FLIGHT,
):
    """Reads `columns` (all when `None`) of one Parquet file or several (concatenated,
    in the order given) into a `pyarrow.Table`, fetching only the footers and the
    chunks of those columns, at most `max_bytes_in_flight` of chunks fetched and not
    yet decoded at a time (module note). Needs pyarrow.

    Example::

        table = ferry.arrow.read_table([f"s3://lake/t/part-{i}.parquet" for i in range(100)],
                                       columns=["user_id", "amount"])
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    client = client or ferry.Client()
    urls = [urls] if isinstance(urls, str) else list(urls)
    stats = stats if stats is not None else ReadStats()
    if not urls:
        raise ValueError("no files to read")
    budget = int(max_bytes_in_flight)
    if budget <= 0:
        raise ValueError(f"max_bytes_in_flight must be positive (got {max_bytes_in_flight!r})")
    with ThreadPoolExecutor(min(32, len(urls))) as ex:
        sizes = [info.size for info in ex.map(client.head, urls)]
    stats.files += len(urls)
    stats.file_bytes += sum(sizes)
    files = [_Sparse(client, u, n, stats) for u, n in zip(urls, sizes)]

    # Footers: every file's tail in one call, then the rest of any longer footer.
    starts = [max(0, n - TAIL) for n in sizes]
    tails = client.get_ranges(urls, starts, sizes)
    stats.bytes_requested += sum(n - s for n, s in zip(sizes, starts))
    more_urls, more_starts, more_ends, more_files, more_tails = [], [], [], [], []
    for f, n, s, tail in zip(files, sizes, starts, tails):
        need = _footer_len(memoryview(tail))
        if need > n:
            raise ValueError(f"{f._url}: a footer of {need} bytes in a file of {n}")
        if need > n - s:
            more_urls.append(f._url)
            more_starts.append(n - need)
            more_ends.append(s)
            more_files.append(f)
            more_tails.append(tail)
        else:
            f.add_footer(s, tail)
    if more_urls:
        got = client.get_ranges(more_urls, more_starts, more_ends)
        for f, st, head, tail in zip(more_files, more_starts, got, more_tails):
            f.add_footer(st, bytes(head) + bytes(tail))  # pyarrow reads the footer in one piece
        stats.bytes_requested += sum(e - s for s, e in zip(more_starts, more_ends))
    del tails, more_tails

    parquet_files = [pq.ParquetFile(f) for f in files]
    want = None if columns is None else set(columns)
    cols = list(columns) if columns is not None else None
    units = _plan([pf.metadata for pf in parquet_files], want, max(1, budget // UNIT_FRACTION))
    stats.units += len(units)
    stats.bytes_requested += sum(u.nbytes for u in units)

    def fetch(u: _Unit):
        return client.get_ranges(urls[u.file], u.starts, u.ends) if u.starts else []

    tables = []
    with ThreadPoolExecutor(FETCHERS) as ex:
        pending: collections.deque = collections.deque()
        in_flight = nxt = 0
        try:
            for u in units:
                # Top up the window: always the unit about to be decoded, then as many
                # after it as fit.
                while nxt < len(units) and len(pending) < FETCHERS and (
                        not pending or in_flight + units[nxt].nbytes <= budget):
                    pending.append(ex.submit(fetch, units[nxt]))
                    in_flight += units[nxt].nbytes
                    nxt += 1
                stats.peak_bytes_in_flight = max(stats.peak_bytes_in_flight, in_flight)
                t0 = time.perf_counter()
                parts = pending.popleft().result()
                t1 = time.perf_counter()
                f = files[u.file]
                f.hold(u.starts, parts)
                del parts
                pf = parquet_files[u.file]
                tables.append(pf.read_row_groups(u.row_groups, columns=cols) if u.row_groups else pf.read(columns=cols))
                f.hold([], [])
                stats.fetch_wait_s += t1 - t0
                stats.decode_s += time.perf_counter() - t1
                in_flight -= u.nbytes
        finally:
            for fut in pending:
                fut.cancel()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
