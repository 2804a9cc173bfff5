"""gs:// URLs through the Python package: the client's Google Cloud Storage engine
against fake-gcs-server (a third-party emulator of GCS's JSON API), and copies between
it and S3 (`ferry serve`).

fake-gcs-server is `$FERRY_FAKE_GCS` (scripts/test.sh sets it), else the binary
scripts/setup.sh built (named in .ferry-run/fake-gcs-bin). Without either, these tests
are reported skipped with the reason."""

from __future__ import annotations

import json
import random
import subprocess
import urllib.request

import pytest
from emulators import binary, free_port, wait_until

import ferry

MIB = 1024 * 1024


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def fake_gcs():
    """`host:port` of a fake-gcs-server in memory, for STORAGE_EMULATOR_HOST."""
    exe = binary("FERRY_FAKE_GCS", "fake-gcs-bin")
    if exe is None:
        pytest.skip("fake-gcs-server is not available (set FERRY_FAKE_GCS or run scripts/setup.sh): "
                    "Python gs:// tests not run")
    host = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [exe, "-scheme", "http", "-host", "127.0.0.1", "-port", host.split(":")[1], "-backend", "memory",
         "-log-level", "error", "-external-url", f"http://{host}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _answers(f"http://{host}/storage/v1/b"), proc, "fake-gcs-server", 30, poll=0.1)
        yield host
    finally:
        proc.kill()
        proc.wait(10)


def gcs_bucket(host: str, name: str) -> str:
    body = json.dumps({"name": name}).encode()
    req = urllib.request.Request(f"http://{host}/storage/v1/b?project=test", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    return name


@pytest.fixture
def both(fake_gcs, server, monkeypatch):
    """A client with no endpoint_url: S3 from AWS_ENDPOINT_URL (ferry serve), GCS from
    STORAGE_EMULATOR_HOST (fake-gcs-server), each provider's own lookup."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)
    return ferry.Client(credentials=server.credentials, region="us-east-1")


def test_gs_calls_go_to_the_gcs_store(both, fake_gcs):
    b = gcs_bucket(fake_gcs, "py-gcs-calls")
    small, large = random.Random(1).randbytes(5000), random.Random(2).randbytes(20 * MIB + 7)
    both.put(f"gs://{b}/d/small", small)
    both.put(f"gs://{b}/d/large", large)  # past one part: the GCS store's multipart
    assert both.get(f"gs://{b}/d/small") == small
    assert both.get(f"gs://{b}/d/large") == large
    assert bytes(both.get_range(f"gs://{b}/d/large", 10, 20)) == large[10:20]
    info = both.head(f"gs://{b}/d/large")
    assert info.size == len(large) and info.url == f"gs://{b}/d/large"
    entries = list(both.list(f"gs://{b}/d/", recursive=True))
    assert [(e.url, e.size) for e in entries] == [(f"gs://{b}/d/large", len(large)), (f"gs://{b}/d/small", 5000)]
    assert both.list(f"gs://{b}/d/").to_arrow().column("key").to_pylist() == ["d/large", "d/small"]
    both.delete(f"gs://{b}/d/small")
    with pytest.raises(ferry.NotFound):
        both.get(f"gs://{b}/d/small")


def test_cp_and_sync_between_s3_and_gs(both, fake_gcs, tmp_path):
    b = gcs_bucket(fake_gcs, "py-gcs-cp")
    both.create_bucket("py-s3-for-gcs")
    files = {f"k{i}": random.Random(i).randbytes(1000 * i + 1) for i in range(5)}
    for k, v in files.items():
        both.put(f"s3://py-s3-for-gcs/p/{k}", v)
    s = both.cp("s3://py-s3-for-gcs/p/", f"gs://{b}/p/", recursive=True)  # streamed through
    assert s.objects == 5 and s.bytes == sum(map(len, files.values()))
    assert {k: bytes(both.get(f"gs://{b}/p/{k}")) for k in files} == files
    s = both.sync(f"gs://{b}/p/", tmp_path / "down")
    assert s.objects == 5
    assert {p.name: p.read_bytes() for p in (tmp_path / "down").iterdir()} == files
    assert both.sync(f"gs://{b}/p/", tmp_path / "down").skipped == 5


def test_an_explicit_endpoint_url_reaches_gcs_too(fake_gcs, monkeypatch):
    # Without STORAGE_EMULATOR_HOST, the emulator named as endpoint_url serves gs://.
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    b = gcs_bucket(fake_gcs, "py-gcs-endpoint")
    c = ferry.Client(f"http://{fake_gcs}", credentials="anonymous")
    c.put(f"gs://{b}/x", b"through endpoint_url")
    assert c.get(f"gs://{b}/x") == b"through endpoint_url"


@pytest.fixture
def registered():
    """Registers ferry's fsspec filesystems by name, and takes them back afterwards."""
    from fsspec.registry import _registry

    from ferry.fsspec import register

    names = []

    def reg(protocol):
        names.append(protocol)
        register(protocol)

    yield reg
    for name in names:
        _registry.pop(name, None)


def test_fsspec_register_gs_routes_paths_to_gcs(fake_gcs, monkeypatch, registered):
    import fsspec

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs)
    b = gcs_bucket(fake_gcs, "py-fsspec-gs")
    registered("gs")
    fs = fsspec.filesystem("gs", skip_instance_cache=True)
    fs.pipe_file(f"gs://{b}/dir/a.txt", b"hello gcs")
    assert fs.cat_file(f"gs://{b}/dir/a.txt") == b"hello gcs"
    assert [p.rsplit("/", 2)[-2:] for p in fs.ls(f"gs://{b}/dir", detail=False)] == [["dir", "a.txt"]]
    # What fsspec wrote is a GCS object: the client reads it by its gs:// URL.
    assert bytes(ferry.Client().get(f"gs://{b}/dir/a.txt")) == b"hello gcs"


def test_fsspec_register_refuses_a_protocol_it_cannot_serve():
    from ferry.fsspec import register

    with pytest.raises(ValueError, match="ferry serves"):
        register("hdfs")
