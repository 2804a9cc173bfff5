"""az:// URLs through the Python package: the client's Azure Blob Storage engine against
Azurite (Microsoft's emulator), found from AZURE_STORAGE_CONNECTION_STRING as Azure's own
tools find it.

Azurite is `$FERRY_AZURITE` (scripts/test.sh sets it), else the one scripts/setup.sh
installed (named in .ferry-run/azurite-bin). Without either, these tests are reported
skipped with the reason."""

from __future__ import annotations

import os
import random
import socket
import subprocess

import pytest
from emulators import ROOT, binary, free_port, wait_until

import ferry

MIB = 1024 * 1024
# The emulator's well-known development account (Azure's emulator documentation).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    """The connection string of an Azurite blob service in memory."""
    exe = binary("FERRY_AZURITE", "azurite-bin")
    if exe is None:
        pytest.skip("Azurite is not available (set FERRY_AZURITE or run scripts/setup.sh): "
                    "Python az:// tests not run")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
         "--skipApiVersionCheck", "--disableTelemetry", "--loose"],
        cwd=tmp_path_factory.mktemp("azurite"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _listens(port), proc, "Azurite", 60)
        yield (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
               f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};")
    finally:
        proc.kill()
        proc.wait(10)


def make_container(conn: str, name: str) -> str:
    env = dict(os.environ, AZURE_STORAGE_CONNECTION_STRING=conn)
    subprocess.run([str(ROOT / "target" / "release" / "ferry"), "mb", f"az://{name}"], env=env, check=True,
                   capture_output=True)
    return name


@pytest.fixture
def az_client(azurite, monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite)
    return ferry.Client()


def test_az_calls_go_to_the_azure_store(az_client, azurite):
    c = make_container(azurite, "py-az-calls")
    small, large = random.Random(1).randbytes(5000), random.Random(2).randbytes(20 * MIB + 7)
    az_client.put(f"az://{c}/d/small", small)
    az_client.put(f"az://{c}/d/large", large)  # past one part: blocks and a block list
    assert az_client.get(f"az://{c}/d/small") == small
    assert az_client.get(f"az://{c}/d/large") == large
    assert bytes(az_client.get_range(f"az://{c}/d/large", 10, 20)) == large[10:20]
    info = az_client.head(f"az://{c}/d/large")
    assert info.size == len(large) and info.url == f"az://{c}/d/large"
    entries = list(az_client.list(f"az://{c}/d/", recursive=True))
    assert [(e.url, e.size) for e in entries] == [(f"az://{c}/d/large", len(large)), (f"az://{c}/d/small", 5000)]
    az_client.delete(f"az://{c}/d/small")
    with pytest.raises(ferry.NotFound):
        az_client.get(f"az://{c}/d/small")


def test_a_missing_container_is_not_found(az_client):
    with pytest.raises(ferry.NotFound):
        az_client.get("az://no-such-container/blob")


def test_fsspec_register_az_routes_paths_to_azure(az_client, azurite):
    import fsspec
    from fsspec.registry import _registry

    from ferry.fsspec import register

    c = make_container(azurite, "py-fsspec-az")
    register("az")
    try:
        fs = fsspec.filesystem("az", skip_instance_cache=True)
        fs.pipe_file(f"az://{c}/dir/a.txt", b"hello azure")
        assert fs.cat_file(f"az://{c}/dir/a.txt") == b"hello azure"
        assert fs.info(f"az://{c}/dir/a.txt")["size"] == len(b"hello azure")
        # What fsspec wrote is a blob: the client reads it by its az:// URL.
        assert bytes(az_client.get(f"az://{c}/dir/a.txt")) == b"hello azure"
    finally:
        _registry.pop("az", None)
