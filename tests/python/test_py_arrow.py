"""ferry.arrow.read_table: only footers and the requested columns' chunks are fetched,
and the table equals pyarrow's own read of the same files."""

from __future__ import annotations

import io

import pytest

# Optional extras (scripts/requirements.txt pins them for CPython 3.11+).
np = pytest.importorskip("numpy")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import ferry.arrow  # noqa: E402


def _parquet(n: int, seed: int, row_group_size: int = 20_000) -> tuple[pa.Table, bytes]:
    rng = np.random.default_rng(seed)
    cols = {f"c{i:02}": rng.standard_normal(n) for i in range(20)}
    cols["name"] = pa.array([f"row-{i % 1000}" for i in range(n)])  # dictionary-encoded
    table = pa.table(cols)
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=row_group_size)
    return table, out.getvalue()


def test_read_table_fetches_only_the_columns(client, bucket):
    files = [_parquet(60_000, seed=s) for s in range(3)]
    urls = [f"s3://{bucket}/lake/part-{i}.parquet" for i in range(3)]
    for u, (_, data) in zip(urls, files):
        client.put(u, data)
    stats = ferry.arrow.ReadStats()
    got = ferry.arrow.read_table(urls, columns=["c03", "c11", "name"], client=client, stats=stats)
    want = pa.concat_tables([pq.read_table(io.BytesIO(d), columns=["c03", "c11", "name"]) for _, d in files])
    assert got.equals(want)
    assert stats.files == 3 and stats.extra_reads == 0
    # 3 of 21 columns: well under a fifth of the bytes.
    assert stats.bytes_requested < stats.file_bytes / 5, stats


def test_read_table_one_file_all_columns(client, bucket):
    table, data = _parquet(5_000, seed=9)
    client.put(f"s3://{bucket}/one.parquet", data)
    got = ferry.arrow.read_table(f"s3://{bucket}/one.parquet", client=client)
    assert got.equals(pq.read_table(io.BytesIO(data)))


def test_read_table_long_footer(client, bucket):
    # Many row groups of many columns: a footer longer than the first tail fetched.
    table, data = _parquet(200_000, seed=10, row_group_size=500)
    assert struct_len(data) > ferry.arrow.TAIL
    client.put(f"s3://{bucket}/long-footer.parquet", data)
    stats = ferry.arrow.ReadStats()
    got = ferry.arrow.read_table(f"s3://{bucket}/long-footer.parquet", columns=["c00"], client=client, stats=stats)
    assert got.equals(pq.read_table(io.BytesIO(data), columns=["c00"]))
    assert stats.extra_reads == 0


def struct_len(data: bytes) -> int:
    import struct

    return struct.unpack("<I", data[-8:-4])[0]


def test_not_parquet(client, bucket):
    client.put(f"s3://{bucket}/not.parquet", b"hello world, not parquet")
    with pytest.raises(ValueError, match="PAR1"):
        ferry.arrow.read_table(f"s3://{bucket}/not.parquet", client=client)


def test_read_table_window_bounds_the_bytes_in_flight(client, bucket):
    # 6 files of 5 row groups each, the window a little over one row group's chunks: the
    # scan goes unit by unit (runs of row groups), never holding more than the window,
    # and the table is still pyarrow's own read, byte for byte.
    files = [_parquet(50_000, seed=20 + s, row_group_size=10_000) for s in range(6)]
    urls = [f"s3://{bucket}/win/part-{i}.parquet" for i in range(6)]
    for u, (_, data) in zip(urls, files):
        client.put(u, data)
    cols = ["c01", "c07", "name"]
    meta = pq.ParquetFile(io.BytesIO(files[0][1])).metadata
    group = meta.row_group(0)
    rg_bytes = sum(group.column(i).total_compressed_size for i in range(group.num_columns)
                   if group.column(i).path_in_schema in cols)
    budget = rg_bytes * 3
    stats = ferry.arrow.ReadStats()
    got = ferry.arrow.read_table(urls, columns=cols, client=client, stats=stats, max_bytes_in_flight=budget)
    want = pa.concat_tables([pq.read_table(io.BytesIO(d), columns=cols) for _, d in files])
    assert got.equals(want)
    assert stats.extra_reads == 0
    assert 0 < stats.peak_bytes_in_flight <= budget, (stats, budget)
    # More units than files: a file's row groups are split across units.
    assert stats.units > len(urls), stats
    # The default window takes each of these small files as one unit.
    whole = ferry.arrow.ReadStats()
    assert ferry.arrow.read_table(urls, columns=cols, client=client, stats=whole).equals(want)
    assert whole.units == len(urls) and whole.peak_bytes_in_flight > budget


def test_read_table_pandas_round_trip(client, bucket):
    # What pandas users get: the DataFrame of ferry's table equals pandas' own read.
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"k": np.arange(30_000), "v": np.random.default_rng(3).standard_normal(30_000),
                       "s": [None if i % 7 == 0 else f"s{i % 50}" for i in range(30_000)]})
    out = io.BytesIO()
    df.to_parquet(out, row_group_size=4_000)
    client.put(f"s3://{bucket}/pd.parquet", out.getvalue())
    got = ferry.arrow.read_table(f"s3://{bucket}/pd.parquet", columns=["k", "s"], client=client,
                                 max_bytes_in_flight=64 * 1024).to_pandas()
    pd.testing.assert_frame_equal(got, pd.read_parquet(io.BytesIO(out.getvalue()), columns=["k", "s"]))


def test_read_table_empty_file_and_bad_window(client, bucket):
    empty = pa.table({"a": pa.array([], pa.int64())})
    out = io.BytesIO()
    pq.write_table(empty, out)
    client.put(f"s3://{bucket}/empty.parquet", out.getvalue())
    got = ferry.arrow.read_table(f"s3://{bucket}/empty.parquet", client=client)
    assert got.num_rows == 0 and got.schema.names == ["a"]
    with pytest.raises(ValueError, match="max_bytes_in_flight"):
        ferry.arrow.read_table(f"s3://{bucket}/empty.parquet", client=client, max_bytes_in_flight=0)
