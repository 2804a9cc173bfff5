"""`read_table`: Parquet columns straight from object storage, in few requests.

```text
urls ─► HEAD each (threads; sizes) ─► one get_ranges over every file's tail (64 KiB)
     ─► footers parsed by pyarrow (a longer footer: its rest fetched)
     ─► the requested columns' chunks of every row group of every file: one get_ranges
        (the engine coalesces neighbouring chunks into fewer GETs)
     ─► pyarrow reads each file from those bytes only ─► one Table
```

pyarrow reads each file through a sparse file object that holds just the fetched
ranges; a read outside them (a writer that put something where the footer does not
say) is fetched on the spot and counted in `ReadStats.extra_reads`.
"""

from __future__ import annotations

import io
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

import ferry

__all__ = ["read_table", "ReadStats"]

#: Bytes fetched from the end of each file first: a footer of 20 columns and a few row
#: groups is a few KiB; 64 KiB covers most in the first request.
TAIL = 64 * 1024


@dataclass
class ReadStats:
    files: int = 0
    #: Bytes of the files in all.
    file_bytes: int = 0
    #: Bytes asked for: footers and column chunks.
    bytes_requested: int = 0
    #: Reads pyarrow made outside the fetched ranges (fetched one by one).
    extra_reads: int = 0


class _Sparse(io.RawIOBase):
    """A read-only file of `size` bytes of which only some ranges are held."""

    def __init__(self, client, url: str, size: int, stats: ReadStats):
        super().__init__()
        self._client, self._url, self._size, self._stats = client, url, size, stats
        self._ranges: list[tuple[int, memoryview]] = []
        self._pos = 0

    def add(self, start: int, data) -> None:
        self._ranges.append((start, memoryview(data)))

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
        for at, data in self._ranges:
            if at <= start and end <= at + len(data):
                return data[start - at:end - at]
        self._stats.extra_reads += 1
        data = memoryview(self._client.get_range(self._url, start, end))
        self.add(start, data)
        return data

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        if end <= self._pos:
            return b""
        out = bytes(self._slice(self._pos, end))
        self._pos = end
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        memoryview(b).cast("B")[:len(data)] = data
        return len(data)


def _footer_len(tail: memoryview) -> int:
    if len(tail) < 8 or bytes(tail[-4:]) != b"PAR1":
        raise ValueError("not a Parquet file (no PAR1 at its end)")
    return struct.unpack("<I", tail[-8:-4])[0] + 8


def read_table(
    urls: str | Sequence[str],
    columns: Sequence[str] | None = None,
    client: ferry.Client | None = None,
    stats: ReadStats | None = None,
):
    """Reads `columns` (all when `None`) of one Parquet file or several (concatenated,
    in the order given) into a `pyarrow.Table`, fetching only the footers and the
    chunks of those columns (module note). Needs pyarrow.

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
            f.add(s, tail)
    if more_urls:
        got = client.get_ranges(more_urls, more_starts, more_ends)
        for f, st, head, tail in zip(more_files, more_starts, got, more_tails):
            f.add(st, bytes(head) + bytes(tail))  # pyarrow reads the footer in one piece
        stats.bytes_requested += sum(e - s for s, e in zip(more_starts, more_ends))

    # The chunks of the requested columns, of every row group of every file: one call.
    parquet_files = [pq.ParquetFile(f) for f in files]
    want = None if columns is None else set(columns)
    c_urls, c_starts, c_ends, c_files = [], [], [], []
    for f, pf in zip(files, parquet_files):
        meta = pf.metadata
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            for ci in range(group.num_columns):
                col = group.column(ci)
                if want is not None and col.path_in_schema.split(".")[0] not in want:
                    continue
                start = col.data_page_offset
                if col.has_dictionary_page and col.dictionary_page_offset:
                    start = min(start, col.dictionary_page_offset)
                c_urls.append(f._url)
                c_starts.append(start)
                c_ends.append(start + col.total_compressed_size)
                c_files.append(f)
    if c_urls:
        for f, st, got in zip(c_files, c_starts, client.get_ranges(c_urls, c_starts, c_ends)):
            f.add(st, got)
        stats.bytes_requested += sum(e - s for s, e in zip(c_starts, c_ends))

    tables = [pf.read(columns=list(columns) if columns is not None else None) for pf in parquet_files]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
