"""The disk backend: restart survival, kill -9 during a PUT, keys that try to escape."""

from __future__ import annotations

import os
import signal
import time

from helpers import RawConn, client_error_code, payload, s3_client, sha256, unsigned

MiB = 1024 * 1024


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_restart_keeps_objects(ferry, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    srv = ferry("--data", str(data_dir))
    s3 = s3_client(srv)
    s3.create_bucket(Bucket="keep")
    objs = {f"k/{i}": payload(size, i) for i, size in enumerate([0, 10, 100_000, 3 * MiB])}
    for k, v in objs.items():
        s3.put_object(Bucket="keep", Key=k, Body=v, Metadata={"n": k}, ContentType="application/x-keep")
    assert srv.stop(signal.SIGTERM) == 0, "SIGTERM should stop the server cleanly (exit 0)"
    srv.start()
    s3 = s3_client(srv)
    assert "keep" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="keep")["Contents"]] == sorted(objs)
    for k, v in objs.items():
        got = s3.get_object(Bucket="keep", Key=k)
        assert sha256(got["Body"].read()) == sha256(v), k
        assert got["Metadata"] == {"n": k} and got["ContentType"] == "application/x-keep"


def test_kill9_during_put_leaves_nothing(ferry, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    srv = ferry("--data", str(data_dir), "--anonymous")
    assert unsigned(srv, "PUT", "/kill").status_code == 200
    old = payload(1000, 1)
    assert unsigned(srv, "PUT", "/kill/old", old).status_code == 200
    assert unsigned(srv, "PUT", "/kill/victim", b"previous version").status_code == 200
    total = 50 * MiB
    with RawConn(srv) as c:
        c.send(f"PUT /kill/fresh HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\n\r\n".encode())
        c.send(payload(10 * MiB, 2))
        with RawConn(srv) as c2:
            c2.send(f"PUT /kill/victim HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\n\r\n".encode())
            c2.send(payload(10 * MiB, 3))
            time.sleep(1.0)  # let the server write part of both bodies to disk
            srv.proc.send_signal(signal.SIGKILL)
            srv.proc.wait(timeout=10)
    srv.start()
    s3 = s3_client(srv)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="kill").get("Contents", [])]
    assert keys == ["old", "victim"], f"a partial upload became visible: {keys}"
    r = unsigned(srv, "GET", "/kill/fresh")
    assert r.status_code == 404, r.status_code
    assert unsigned(srv, "GET", "/kill/victim").content == b"previous version"
    assert unsigned(srv, "GET", "/kill/old").content == old


ESCAPES = ["../../x", "..%2F..%2Fx", "/abs", "a/../../../../etc/passwd-ferry", "..", ".", "./dot",
           "k" * 1000, "é" * 300, "日本語/キー/🚀/\u0301combining", "nul\u2400-sym", "back\\slash\\..\\..\\x",
           "dir/", "trailing/../", "a//b"]


def test_path_escape_stays_inside_data_dir(ferry, tmp_path):
    parent = tmp_path / "parent"
    data_dir = parent / "data"
    data_dir.mkdir(parents=True)
    srv = ferry("--data", str(data_dir))
    s3 = s3_client(srv)
    s3.create_bucket(Bucket="esc")
    before_parent = sorted(os.listdir(parent))
    before_tmp = sorted(os.listdir(tmp_path))
    for i, key in enumerate(ESCAPES):
        assert len(key.encode()) <= 1024
        data = payload(100 + i, i)
        try:
            s3.put_object(Bucket="esc", Key=key, Body=data)
        except Exception as e:  # a refusal is fine, an escape is not
            status, code = client_error_code(e)
            assert 400 <= status < 500, (key, status, code)
            continue
        assert s3.get_object(Bucket="esc", Key=key)["Body"].read() == data, key
    assert sorted(os.listdir(parent)) == before_parent, "files appeared next to the data dir"
    assert sorted(os.listdir(tmp_path)) == before_tmp
    real = os.path.realpath(data_dir)
    for f in _files(data_dir):
        assert os.path.realpath(os.path.join(data_dir, f)).startswith(real + os.sep), f
    # after a restart the keys list back exactly
    srv.stop()
    srv.start()
    s3 = s3_client(srv)
    listed = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket="esc") for o in p.get("Contents", [])]
    for key in listed:
        assert key in ESCAPES, f"unexpected key after restart: {key!r}"


def test_raw_dot_segments_stay_inside(ferry, tmp_path):
    """Paths a client would normalise, sent as-is: refused or stored inside the data dir."""
    parent = tmp_path / "parent"
    data_dir = parent / "data"
    data_dir.mkdir(parents=True)
    srv = ferry("--data", str(data_dir), "--anonymous")
    assert unsigned(srv, "PUT", "/raw").status_code == 200
    before = sorted(os.listdir(parent))
    for path in ("/raw/../../../x-raw", "/raw/%2e%2e/%2e%2e/%2e%2e/x-raw2", "/../../x-raw3",
                 "/raw/..%2f..%2f..%2fx-raw4", "/raw/%2fabs-raw5"):
        with RawConn(srv) as c:
            c.send(f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc".encode())
            r = c.read_response()
            assert r.status in (200, 400, 403, 404), (path, r.status, r.body[:200])
    assert sorted(os.listdir(parent)) == before, "files appeared next to the data dir"
    assert not (tmp_path / "x-raw").exists() and not (tmp_path / "x-raw3").exists()
    real = os.path.realpath(data_dir)
    for f in _files(data_dir):
        assert os.path.realpath(os.path.join(data_dir, f)).startswith(real + os.sep), f
    assert unsigned(srv, "GET", "/raw").status_code == 200  # still serving


def _du(root) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def test_client_vanishing_mid_upload_leaves_no_files(ferry, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    srv = ferry("--data", str(data_dir), "--anonymous")
    assert unsigned(srv, "PUT", "/gone").status_code == 200
    with RawConn(srv) as c:
        c.send(f"PUT /gone/partial HTTP/1.1\r\nHost: x\r\nContent-Length: {50 * MiB}\r\n\r\n".encode())
        c.send(payload(8 * MiB, 4))
        time.sleep(0.5)
    # the temp file of the abandoned upload must go away
    deadline = time.monotonic() + 10
    while _du(data_dir) > MiB and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _du(data_dir) <= MiB, f"{_du(data_dir)} bytes left under the data dir: {_files(data_dir)}"
    assert unsigned(srv, "GET", "/gone/partial").status_code == 404
