"""list(...).to_arrow() through the Arrow C stream interface, stats() by operation, and
the routing of gs:// and az:// URLs to their providers' stores, against `ferry serve`."""

from __future__ import annotations

import asyncio
import datetime

import pyarrow as pa
import pytest

import ferry
from ferry.testing import FerryServer

MIB = 1024 * 1024


def fill(client, prefix: str, n: int) -> None:
    async def main():
        await asyncio.gather(*(client.put_async(f"{prefix}{i:05}", b"x" * (i % 50)) for i in range(n)))

    asyncio.run(main())


def test_to_arrow_matches_the_listing(client, bucket):
    fill(client, f"s3://{bucket}/t/", 2100)  # three pages of 1,000
    entries = list(client.list(f"s3://{bucket}/t/", recursive=True))
    table = client.list(f"s3://{bucket}/t/", recursive=True).to_arrow()
    assert isinstance(table, pa.Table)
    assert table.schema == pa.schema(
        [
            pa.field("key", pa.string(), nullable=False),
            pa.field("size", pa.uint64(), nullable=False),
            pa.field("last_modified", pa.timestamp("us", tz="UTC")),
            pa.field("etag", pa.string()),
            pa.field("is_dir", pa.bool_(), nullable=False),
        ]
    )
    assert table.num_rows == 2100
    assert table.column("key").to_pylist() == [e.key for e in entries]
    assert table.column("size").to_pylist() == [e.size for e in entries]
    assert table.column("etag").to_pylist() == [e.etag for e in entries]
    assert table.column("last_modified").to_pylist() == [e.last_modified for e in entries]
    assert not any(table.column("is_dir").to_pylist())
    df = table.to_pandas()
    assert int(df["size"].sum()) == sum(i % 50 for i in range(2100))


def test_to_arrow_one_level_with_directories(client, bucket):
    for k in ("a", "d1/x", "d1/y", "d2/z", "e"):
        client.put(f"s3://{bucket}/lv/{k}", b"12345")
    t = client.list(f"s3://{bucket}/lv/").to_arrow()
    rows = t.to_pylist()
    assert [(r["key"], r["is_dir"]) for r in rows] == [
        ("lv/a", False),
        ("lv/d1/", True),
        ("lv/d2/", True),
        ("lv/e", False),
    ]
    d = rows[1]
    assert (d["size"], d["etag"], d["last_modified"]) == (0, None, None)
    assert isinstance(rows[0]["last_modified"], datetime.datetime) and rows[0]["etag"]


def test_arrow_reader_streams_and_uses_up_the_iterator(client, bucket):
    fill(client, f"s3://{bucket}/r/", 40)
    it = client.list(f"s3://{bucket}/r/", recursive=True)
    first = next(it)
    assert first.key == "r/00000"
    reader = it.to_arrow_reader()
    assert isinstance(reader, pa.RecordBatchReader)
    rest = reader.read_all()
    assert rest.column("key").to_pylist() == [f"r/{i:05}" for i in range(1, 40)]
    assert list(it) == []  # the stream took the rest
    # Any reader of the Arrow PyCapsule interface takes the listing as it is.
    assert pa.table(client.list(f"s3://{bucket}/r/", recursive=True)).num_rows == 40


def test_to_arrow_raises_the_listing_error(client):
    with pytest.raises(OSError, match="NoSuchBucket|does not exist|not found"):
        client.list("s3://no-such-bucket-here/", recursive=True).to_arrow()


def test_stats_by_operation(server, bucket):
    c = server.client()
    c.put(f"s3://{bucket}/s/small", b"x" * 1000)
    c.put(f"s3://{bucket}/s/big", b"y" * (20 * MIB))  # 3 parts
    assert len(c.get(f"s3://{bucket}/s/big")) == 20 * MIB
    c.head(f"s3://{bucket}/s/small")
    list(c.list(f"s3://{bucket}/s/", recursive=True))
    c.copy(f"s3://{bucket}/s/small", f"s3://{bucket}/s/copy")
    c.delete(f"s3://{bucket}/s/copy")
    c.delete([f"s3://{bucket}/s/small", f"s3://{bucket}/s/big"])
    s = c.stats()
    r = s["requests"]
    assert set(r) == {
        "GET", "HEAD", "PUT", "LIST", "DELETE", "DELETE_BATCH", "COPY", "CREATE_UPLOAD",
        "UPLOAD_PART", "COMPLETE_UPLOAD", "ABORT_UPLOAD", "OTHER",
    }
    assert (r["CREATE_UPLOAD"], r["UPLOAD_PART"], r["COMPLETE_UPLOAD"]) == (1, 3, 1)
    assert r["PUT"] == 1 and r["COPY"] == 1 and r["DELETE"] == 1 and r["DELETE_BATCH"] == 1
    assert r["GET"] >= 1 and r["HEAD"] >= 1 and r["LIST"] >= 1 and r["ABORT_UPLOAD"] == 0
    assert 0 < sum(r.values()) <= s["requests_sent"]
    assert s["bytes_out"] >= 20 * MIB + 1000
    assert s["bytes_in"] >= 20 * MIB
    assert s["retries"] == 0
    assert 0 < s["first_byte_p50_s"] <= s["first_byte_p95_s"] < 10


def test_stats_count_the_retried_failures(bucket):
    with FerryServer(flags=["--fault-503-rate", "0.1", "--seed", "3"]) as srv:
        c = srv.client()
        c.create_bucket(bucket)
        for i in range(40):
            c.put(f"s3://{bucket}/k{i}", b"z" * 100)
        assert all(bytes(b) == b"z" * 100 for b in c.get_many([f"s3://{bucket}/k{i}" for i in range(40)]))
        s = c.stats()
        # Every call succeeded; the 503s on the way were retried and counted.
        assert s["retries"] > 0
        assert sum(s["requests"].values()) >= 81 + s["retries"]
