"""ferry.testing as users meet it: the pytest plugin's fixtures (registered by the
package's pytest11 entry point, not by a conftest here) and FerryServer with flags."""

from __future__ import annotations

import pytest

from ferry.testing import FerryServer


def test_plugin_fixtures(ferry_server, ferry_bucket):
    assert ferry_server.url.startswith("http://127.0.0.1:")
    c = ferry_server.client()
    c.put(f"s3://{ferry_bucket}/k", b"v")
    assert bytes(c.get(f"s3://{ferry_bucket}/k")) == b"v"


def test_server_flags_and_stop():
    with FerryServer(flags=["--profile", "s3"]) as srv:
        c = srv.client()
        c.create_bucket("flags")
        c.put("s3://flags/k", b"v")
        assert bytes(c.get("s3://flags/k")) == b"v"
        assert "listening on" in srv.output()
    assert srv.proc.poll() is not None


def test_missing_binary_says_so(monkeypatch):
    monkeypatch.setenv("FERRY_BIN", "")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="FERRY_BIN"):
        FerryServer()


def test_a_server_that_cannot_start_raises(tmp_path):
    with pytest.raises(RuntimeError, match="did not start"):
        FerryServer(flags=["--no-such-flag"]).start()
