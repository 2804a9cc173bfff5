"""Bad input over raw sockets: each gets a 4xx with an S3 <Error> body, and the server lives on."""

from __future__ import annotations

import hashlib
import socket
import urllib.parse

import pytest

from helpers import RawConn, assert_s3_error, b64, raw_request, unsigned


def _still_serving(server):
    with RawConn(server) as c:
        c.send(raw_request("GET", "/"))
        r = c.read_response()
        assert r.status == 200, f"server not answering normally afterwards: {r.status} {r.body[:200]!r}"


def _exchange(server, data: bytes, method="GET"):
    with RawConn(server) as c:
        c.send(data)
        return c.read_response(method)


CASES = {
    "garbage request line": (b"HELLO THERE\r\n\r\n", (400,)),
    "binary garbage": (bytes(range(256)) + b"\r\n\r\n", (400,)),
    "bad http version": (b"GET /x HTTP/9.9\r\nHost: x\r\n\r\n", (400, 505)),
    "header section over 64 KiB": (b"GET /x/y HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n", (400, 431)),
    "many headers over 64 KiB": (b"GET /x/y HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 100) for i in range(700)) + b"\r\n", (400, 431)),
    "invalid content-length": (b"PUT /x/y HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", (400,)),
    "negative content-length": (b"PUT /x/y HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", (400,)),
    "conflicting content-length": (b"PUT /x/y HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", (400,)),
    "unknown method": (b"FROB /x/y HTTP/1.1\r\nHost: x\r\n\r\n", (400, 405, 501)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_malformed_request(anon_server, name):
    data, statuses = CASES[name]
    try:
        r = _exchange(anon_server, data)
    except (EOFError, ConnectionResetError) as e:
        pytest.fail(f"{name}: connection closed without an error response ({e})")
    assert r.status in statuses, f"{name}: got {r.status} {r.body[:200]!r}"
    assert_s3_error(r.body)
    _still_serving(anon_server)


def test_truncated_body_then_close(anon_server):
    assert unsigned(anon_server, "PUT", "/trunc").status_code in (200, 409)
    with RawConn(anon_server) as c:
        c.send(b"PUT /trunc/partial HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"z" * 1000)
        c.sock.shutdown(socket.SHUT_WR)
        try:
            r = c.read_response()
            assert 400 <= r.status < 500, r.status
        except (EOFError, ConnectionResetError):
            pass  # closing without a response is also right
    r = unsigned(anon_server, "GET", "/trunc/partial")
    assert r.status_code == 404, "a truncated upload became an object"
    _still_serving(anon_server)


def test_delete_objects_malformed_xml(anon_server):
    assert unsigned(anon_server, "PUT", "/mxml").status_code in (200, 409)
    body = b"<Delete><Object><Key>a</Key></Object"
    r = unsigned(anon_server, "POST", "/mxml?delete", body,
                 headers={"Content-MD5": b64(hashlib.md5(body).digest()), "Content-Type": "application/xml"})
    assert r.status_code == 400, r.text
    assert_s3_error(r.content, "MalformedXML")
    _still_serving(anon_server)


def test_complete_multipart_malformed_xml(anon_server):
    assert unsigned(anon_server, "PUT", "/mxml2").status_code in (200, 409)
    r = unsigned(anon_server, "POST", "/mxml2/k?uploads")
    assert r.status_code == 200, r.text
    upload_id = r.text.split("<UploadId>")[1].split("</UploadId>")[0]
    r = unsigned(anon_server, "POST", f"/mxml2/k?uploadId={urllib.parse.quote(upload_id)}", b"not xml at all")
    assert r.status_code == 400
    assert_s3_error(r.content, "MalformedXML")
