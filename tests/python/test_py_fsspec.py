"""ferry.fsspec.FerryFileSystem: fsspec calls, and pandas / pyarrow reading Parquet through it."""

from __future__ import annotations

import pickle

import pytest

# Optional extras (scripts/requirements.txt pins them for CPython 3.11+): where absent,
# these tests are reported skipped with the reason.
fsspec = pytest.importorskip("fsspec")
np = pytest.importorskip("numpy")
pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
ds = pytest.importorskip("pyarrow.dataset")
pq = pytest.importorskip("pyarrow.parquet")

import ferry  # noqa: E402
from ferry.fsspec import FerryFileSystem, register  # noqa: E402

from test_py_calls import blob  # noqa: E402


@pytest.fixture
def fs(server):
    return fsspec.filesystem("ferry", endpoint_url=server.url, credentials=server.credentials, skip_instance_cache=True)


def test_registered_by_entry_point():
    assert fsspec.get_filesystem_class("ferry") is FerryFileSystem


def test_pipe_cat_info(fs, bucket):
    data = blob(100_000, seed=30)
    fs.pipe(f"ferry://{bucket}/d/x.bin", data)
    assert fs.cat(f"ferry://{bucket}/d/x.bin") == data
    assert fs.cat_file(f"{bucket}/d/x.bin", start=10, end=20) == data[10:20]
    assert fs.cat_file(f"{bucket}/d/x.bin", start=-5) == data[-5:]
    assert fs.cat_file(f"{bucket}/d/x.bin", start=5, end=-5) == data[5:-5]
    info = fs.info(f"{bucket}/d/x.bin")
    assert info["type"] == "file" and info["size"] == 100_000 and info["name"] == f"{bucket}/d/x.bin"
    assert fs.info(f"{bucket}/d")["type"] == "directory"
    assert fs.isfile(f"{bucket}/d/x.bin") and fs.isdir(f"{bucket}/d") and fs.isdir(bucket)
    assert fs.exists(f"{bucket}/d/x.bin") and not fs.exists(f"{bucket}/d/nope")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{bucket}/nope")
    with pytest.raises(FileNotFoundError):
        fs.cat(f"{bucket}/nope")


def test_cat_ranges(fs, bucket):
    a, b = blob(50_000, seed=31), blob(70_000, seed=32)
    fs.pipe({f"{bucket}/a": a, f"{bucket}/b": b})
    paths = [f"{bucket}/a", f"{bucket}/b", f"{bucket}/a", f"{bucket}/b"]
    starts, ends = [0, 100, 40_000, 69_990], [10, 2000, 40_010, 70_000]
    want = [a[0:10], b[100:2000], a[40_000:40_010], b[69_990:70_000]]
    assert fs.cat_ranges(paths, starts, ends) == want
    assert fs.cat_ranges(paths, starts, ends, max_gap=0) == want
    assert fs.cat_ranges(paths, starts, ends, max_gap=1 << 20) == want
    out = fs.cat_ranges([f"{bucket}/a", f"{bucket}/missing"], [0, 0], [5, 5])
    assert out[0] == a[:5] and isinstance(out[1], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges([f"{bucket}/missing"], [0], [5], on_error="raise")


def test_ls_find(fs, bucket):
    for k in ["t/1", "t/2", "t/u/3", "t/u/v/4", "z"]:
        fs.pipe(f"{bucket}/{k}", k.encode())
    assert fs.ls(f"{bucket}/t", detail=False) == [f"{bucket}/t/1", f"{bucket}/t/2", f"{bucket}/t/u"]
    entries = fs.ls(f"ferry://{bucket}/t/")
    assert [(e["name"], e["type"]) for e in entries] == [
        (f"{bucket}/t/1", "file"), (f"{bucket}/t/2", "file"), (f"{bucket}/t/u", "directory")]
    assert fs.find(f"{bucket}/t") == [f"{bucket}/t/1", f"{bucket}/t/2", f"{bucket}/t/u/3", f"{bucket}/t/u/v/4"]
    found = fs.find(f"{bucket}", detail=True)
    assert sorted(found) == [f"{bucket}/t/1", f"{bucket}/t/2", f"{bucket}/t/u/3", f"{bucket}/t/u/v/4", f"{bucket}/z"]
    assert found[f"{bucket}/z"]["size"] == 1
    assert fs.find(f"{bucket}/t", maxdepth=1) == [f"{bucket}/t/1", f"{bucket}/t/2"]
    assert fs.glob(f"{bucket}/t/*") == [f"{bucket}/t/1", f"{bucket}/t/2", f"{bucket}/t/u"]
    assert fs.du(f"{bucket}/t") == 3 + 3 + 5 + 7


def test_put_get_rm(fs, bucket, tmp_path):
    data = blob(2_000_000, seed=33)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    fs.put_file(str(src), f"{bucket}/up/src.bin")
    assert fs.cat(f"{bucket}/up/src.bin") == data
    dst = tmp_path / "dst.bin"
    fs.get_file(f"{bucket}/up/src.bin", str(dst))
    assert dst.read_bytes() == data
    fs.copy(f"{bucket}/up/src.bin", f"{bucket}/up/copy.bin")
    assert fs.cat(f"{bucket}/up/copy.bin") == data
    fs.pipe(f"{bucket}/up/deep/x", b"x")
    fs.rm(f"{bucket}/up", recursive=True)
    assert fs.find(f"{bucket}/up") == []
    fs.pipe(f"{bucket}/one", b"1")
    fs.rm(f"{bucket}/one")
    assert not fs.exists(f"{bucket}/one")


def test_open_read_write(fs, bucket):
    data = blob(3_000_000, seed=34)
    with fs.open(f"{bucket}/w.bin", "wb") as f:
        f.write(data[:1_000_000])
        f.write(data[1_000_000:])
    with fs.open(f"{bucket}/w.bin", "rb") as f:
        f.seek(2_000_000)
        assert f.read(100) == data[2_000_000:2_000_100]
        f.seek(0)
        assert f.read() == data
    with pytest.raises(ValueError):
        fs.open(f"{bucket}/w.bin", "ab")


def test_pickle(fs, bucket):
    fs.pipe(f"{bucket}/pk", b"pk")
    again = pickle.loads(pickle.dumps(fs))
    assert again.cat(f"{bucket}/pk") == b"pk"


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({f"c{i}": rng.standard_normal(n) for i in range(20)} | {"id": np.arange(n)})


def test_pandas_reads_parquet_through_ferry(server, fs, bucket):
    table = _table(50_000, seed=35)
    with fs.open(f"{bucket}/pq/t.parquet", "wb") as f:
        pq.write_table(table, f, row_group_size=10_000)
    opts = {"endpoint_url": server.url, "credentials": server.credentials}
    df = pd.read_parquet(f"ferry://{bucket}/pq/t.parquet", columns=["c1", "c7", "id"], storage_options=opts)
    assert list(df.columns) == ["c1", "c7", "id"]
    want = table.select(["c1", "c7", "id"]).to_pandas()
    pd.testing.assert_frame_equal(df, want)


def test_pyarrow_dataset_through_ferry(fs, bucket):
    tables = [_table(5_000, seed=s) for s in range(3)]
    for i, t in enumerate(tables):
        with fs.open(f"{bucket}/dset/part-{i}.parquet", "wb") as f:
            pq.write_table(t, f)
    dataset = ds.dataset(f"{bucket}/dset", filesystem=fs, format="parquet")
    got = dataset.to_table(columns=["c3", "id"]).sort_by([("c3", "ascending")])
    want = pa.concat_tables([t.select(["c3", "id"]) for t in tables]).sort_by([("c3", "ascending")])
    assert got.equals(want)


def test_register_s3_only_when_asked(server, bucket):
    import importlib

    reg = importlib.import_module("fsspec.registry")  # the module (fsspec.registry is a mapping)

    before = reg._registry.get("s3")
    try:
        register("s3")
        s3 = fsspec.filesystem("s3", endpoint_url=server.url, credentials=server.credentials, skip_instance_cache=True)
        assert isinstance(s3, FerryFileSystem)
        s3.pipe(f"s3://{bucket}/via-s3", b"s3")
        assert s3.cat(f"s3://{bucket}/via-s3") == b"s3"
        assert bytes(ferry.Client(server.url, credentials=server.credentials).get(f"s3://{bucket}/via-s3")) == b"s3"
    finally:
        if before is None:
            reg._registry.pop("s3", None)
        else:
            reg._registry["s3"] = before


def test_listings_are_cached_and_writes_drop_them(fs, bucket):
    """A reader that lists a directory and then asks about its files (as pandas and
    pyarrow do) is answered from the listing: no HEAD per file, none on open; a write
    through the filesystem drops the listing it changed."""
    a, b = blob(10_000, seed=40), blob(20_000, seed=41)
    fs.pipe({f"{bucket}/t/a.bin": a, f"{bucket}/t/b.bin": b})
    assert sorted(fs.ls(f"{bucket}/t", detail=False)) == [f"{bucket}/t/a.bin", f"{bucket}/t/b.bin"]
    sent = fs.client.stats()["requests_sent"]
    assert fs.info(f"{bucket}/t/b.bin")["size"] == 20_000
    assert fs.isfile(f"{bucket}/t/a.bin") and fs.isdir(f"{bucket}/t")
    assert not fs.exists(f"{bucket}/t/c.bin")
    assert fs.ls(f"{bucket}/t", detail=False) and fs.client.stats()["requests_sent"] == sent, "answered from the listing"
    with fs.open(f"{bucket}/t/b.bin", "rb") as f:
        assert fs.client.stats()["requests_sent"] == sent, "open takes size and ETag from the listing: no HEAD"
        assert f.size == 20_000 and f.read() == b
    # A write drops the listing: the new file is seen, a removed one is gone.
    fs.pipe(f"{bucket}/t/c.bin", b"c")
    assert fs.cat(f"{bucket}/t/c.bin") == b"c" and fs.info(f"{bucket}/t/c.bin")["size"] == 1
    assert len(fs.ls(f"{bucket}/t")) == 3
    fs.rm(f"{bucket}/t/a.bin")
    assert not fs.exists(f"{bucket}/t/a.bin") and len(fs.ls(f"{bucket}/t")) == 2


def test_listing_cache_off(server, bucket):
    fs = fsspec.filesystem("ferry", endpoint_url=server.url, credentials=server.credentials,
                           skip_instance_cache=True, use_listings_cache=False)
    fs.pipe(f"{bucket}/u/a.bin", b"a")
    fs.ls(f"{bucket}/u")
    sent = fs.client.stats()["requests_sent"]
    assert fs.info(f"{bucket}/u/a.bin")["size"] == 1 and fs.info(f"{bucket}/u")["type"] == "directory"
    assert fs.client.stats()["requests_sent"] > sent, "every info asks the store"
