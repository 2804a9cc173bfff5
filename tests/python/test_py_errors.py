"""The package's exception messages: each names the object and the cause once, with the
server's request id when it answered, like the command line's error lines."""

from __future__ import annotations

import asyncio
import socket

import pytest

import ferry
from ferry.testing import FerryServer


def _said_once(msg: str) -> None:
    parts = [p.strip() for p in msg.split(": ") if len(p.strip()) > 3]
    for i, p in enumerate(parts):
        assert p not in parts[i + 1:], f"{p!r} said twice in {msg!r}"


def test_not_found_names_the_object_and_request_id(client, bucket):
    url = f"s3://{bucket}/absent"
    for call in (client.get, client.head, lambda u: client.get_range(u, 0, 1)):
        with pytest.raises(ferry.NotFound) as ei:
            call(url)
        msg = str(ei.value)
        assert msg.startswith(f"{url}: not found"), msg
        assert ei.value.request_id and f"request id {ei.value.request_id}" in msg, msg
        _said_once(msg)
    async def get():
        return await client.get_async(url)

    with pytest.raises(ferry.NotFound) as ei:
        asyncio.run(get())
    assert str(ei.value).startswith(f"{url}: not found") and "NoSuchKey" in str(ei.value)


def test_missing_bucket_on_put_names_the_object(client):
    url = "s3://no-such-bucket-here/k"
    with pytest.raises(ferry.NotFound) as ei:
        client.put(url, b"x")
    msg = str(ei.value)
    assert msg.startswith(url) and "NoSuchBucket" in msg and "request id" in msg, msg


def test_wrong_credentials_say_so(server, bucket):
    bad = server.client(credentials={"access_key_id": server.credentials["access_key_id"], "secret_access_key": "wrong"})
    url = f"s3://{bucket}/k"
    with pytest.raises(ferry.Auth) as ei:
        bad.put(url, b"x")
    msg = str(ei.value)
    assert msg.startswith(url) and "SignatureDoesNotMatch" in msg and "request id" in msg, msg
    assert isinstance(ei.value, PermissionError)


def test_a_closed_port_is_said_once():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = ferry.Client(f"http://127.0.0.1:{port}", credentials={"access_key_id": "a", "secret_access_key": "b"})
    with pytest.raises(ferry.Transport) as ei:
        c.get("s3://b/k")
    msg = str(ei.value)
    assert msg.startswith("s3://b/k: cannot connect"), msg
    assert msg.lower().count("refused") == 1, msg


def test_throttling_names_the_object():
    with FerryServer(["--fault-503-rate", "1.0", "--seed", "3"]) as srv:
        with pytest.raises(ferry.Throttled) as ei:
            srv.client().head("s3://slow/k")
    msg = str(ei.value)
    assert msg.startswith("s3://slow/k: throttled") and "SlowDown" in msg and "request id" in msg, msg


def test_a_silent_server_is_given_up_on_after_the_timeout_and_retries(monkeypatch):
    # A listener that accepts connections and never answers: every attempt waits out
    # `timeout`. The defaults (60 s x 5 attempts) would take minutes; these take about 1 s.
    import pickle
    import time

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        keys = {"access_key_id": "a", "secret_access_key": "b"}
        c = ferry.Client(url, credentials=keys, timeout=0.3, connect_timeout=1, retries=2)
        started = time.monotonic()
        with pytest.raises(ferry.Transport) as ei:
            c.get("s3://b/k")
        took = time.monotonic() - started
        assert took < 15, f"gave up after {took:.1f} s"
        assert str(ei.value).startswith("s3://b/k: "), str(ei.value)
        # The settings travel with the client to worker processes.
        assert pickle.loads(pickle.dumps(c)).__reduce__()[1][-3:] == (0.3, 1.0, 2)
    finally:
        silent.close()
    # AWS_MAX_ATTEMPTS is read when `retries` is not given, as the AWS SDKs read it.
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    assert ferry.Client(url, credentials=keys).__reduce__()[1][-1] == 3
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "many")
    with pytest.raises(ValueError, match="AWS_MAX_ATTEMPTS"):
        ferry.Client(url, credentials=keys)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    for bad in ({"timeout": 0}, {"connect_timeout": -1}, {"retries": 0}):
        with pytest.raises(ValueError):
            ferry.Client(url, credentials=keys, **bad)
