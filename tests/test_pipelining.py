"""Raw-socket HTTP/1.1: 32 requests in one write, 32 responses in order."""

from __future__ import annotations

from helpers import RawConn, payload, raw_request, sha256, unsigned

SIZES = [0, 1, 100, 1024 * 1024, 4096, 7, 65536, 12345] * 4  # 32 objects


def _seed(server):
    r = unsigned(server, "PUT", "/pipe")
    assert r.status_code in (200, 409), r.text
    objs = []
    for i, size in enumerate(SIZES):
        key, data = f"obj-{i:02d}", payload(size, 100 + i)
        r = unsigned(server, "PUT", f"/pipe/{key}", data)
        assert r.status_code == 200, r.text
        objs.append((key, data))
    return objs


def test_pipeline_32_gets(anon_server):
    objs = _seed(anon_server)
    batch = b"".join(raw_request("GET", f"/pipe/{k}") for k, _ in objs)
    with RawConn(anon_server) as c:
        c.send(batch)  # one sendall for all 32
        for i, (key, data) in enumerate(objs):
            r = c.read_response()
            assert r.status == 200, (i, key, r.status, r.body[:200])
            assert len(r.body) == len(data) and sha256(r.body) == sha256(data), f"response {i} is not {key}"
        # the connection is still usable afterwards
        c.send(raw_request("GET", f"/pipe/{objs[3][0]}"))
        assert c.read_response().body == objs[3][1]


def test_pipeline_with_head_and_missing(anon_server):
    objs = _seed(anon_server)[:6]
    reqs = [("GET", objs[0][0]), ("HEAD", objs[3][0]), ("GET", objs[1][0]), ("GET", "no-such-key"),
            ("HEAD", objs[0][0]), ("GET", objs[3][0]), ("GET", objs[2][0])]
    data = dict(objs)
    with RawConn(anon_server) as c:
        c.send(b"".join(raw_request(m, f"/pipe/{k}") for m, k in reqs))
        for method, key in reqs:
            r = c.read_response(method)
            if key == "no-such-key":
                assert r.status == 404 and b"<Code>NoSuchKey</Code>" in r.body
            elif method == "HEAD":
                assert r.status == 200 and r.body == b""
                assert int(r.header("content-length")) == len(data[key])
            else:
                assert r.status == 200 and sha256(r.body) == sha256(data[key]), key


def test_pipeline_connection_close_at_k(anon_server):
    objs = _seed(anon_server)[:8]
    k = 3
    reqs = []
    for i, (key, _) in enumerate(objs):
        hdrs = {"Connection": "close"} if i == k else {}
        reqs.append(raw_request("GET", f"/pipe/{key}", headers=hdrs))
    with RawConn(anon_server) as c:
        c.send(b"".join(reqs))
        for i in range(k + 1):
            r = c.read_response()
            assert r.status == 200 and r.body == objs[i][1], i
        last = r
        assert (last.header("connection") or "").lower() == "close"
        assert c.at_eof(), "server kept the connection open after a 'Connection: close' request"
