"""Client.stats() counts the requests of every provider, not only S3's: gs:// against
fake-gcs-server and az:// against Azurite, with the fixtures of test_py_gcs.py and
test_py_azure.py (each reports itself skipped, with the reason, when its emulator is
not available)."""

from __future__ import annotations

from test_py_azure import az_client, azurite, make_container  # noqa: F401 (fixtures)
from test_py_gcs import both, fake_gcs, gcs_bucket  # noqa: F401 (fixtures)


DATA = b"s" * 3000


def counted_calls(client, base: str) -> tuple[dict, dict]:
    """Put, get, head, list and delete one object under `base`; the requests by
    operation they made, and the stats after them."""
    before = client.stats()["requests"]
    client.put(f"{base}/s/k", DATA)
    assert client.get(f"{base}/s/k") == DATA
    client.head(f"{base}/s/k")
    assert [e.url for e in client.list(f"{base}/s/", recursive=True)] == [f"{base}/s/k"]
    client.delete(f"{base}/s/k")
    after = client.stats()
    return {k: v - before[k] for k, v in after["requests"].items()}, after


def check(delta: dict, stats: dict) -> None:
    assert delta["PUT"] == 1, delta
    assert delta["GET"] >= 1 and delta["HEAD"] >= 1 and delta["LIST"] >= 1 and delta["DELETE"] >= 1, delta
    assert delta["CREATE_UPLOAD"] == 0 and delta["UPLOAD_PART"] == 0, delta
    assert 0 < sum(delta.values()) <= stats["requests_sent"]
    assert stats["bytes_out"] >= len(DATA) and stats["bytes_in"] >= len(DATA)
    assert stats["first_byte_p50_s"] is not None


def test_stats_count_gs_requests(both, fake_gcs):  # noqa: F811
    check(*counted_calls(both, f"gs://{gcs_bucket(fake_gcs, 'py-gcs-stats')}"))


def test_stats_count_az_requests(az_client, azurite):  # noqa: F811
    check(*counted_calls(az_client, f"az://{make_container(azurite, 'py-az-stats')}"))
