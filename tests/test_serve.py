"""`ferry serve` itself: start-up lines, credentials, signals, addressing, the synthetic bucket."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time

import pytest

from helpers import (RawConn, b64, clean_env, crc32c, payload, raw_request, require_tool, run, s3_client, sha256,
                     unsigned)


def test_dev_default_credentials(ferry):
    srv = ferry("--memory", creds=False)
    assert srv.access_key == "ferry" and srv.secret_key == "ferry-secret", srv.lines
    assert srv.profile and srv.profile.split()[0].strip(",") == "lan", srv.lines
    s3 = s3_client(srv)
    s3.create_bucket(Bucket="dev")
    assert "dev" in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_credentials_from_environment(ferry):
    env = clean_env(AWS_ACCESS_KEY_ID="envkey", AWS_SECRET_ACCESS_KEY="envsecret")
    srv = ferry("--memory", env=env, creds=False)
    assert srv.access_key == "envkey", srv.lines
    s3_client(srv, access_key="envkey", secret_key="envsecret").create_bucket(Bucket="env")
    # A secret the user chose is never printed, by flag or by environment.
    assert not any("envsecret" in line for line in srv.lines), srv.lines
    assert any("secret key: not printed" in line for line in srv.lines), srv.lines
    flagged = ferry("--memory", "--access-key", "flagkey", "--secret-key", "flag-secret-1234", creds=False)
    assert not any("flag-secret-1234" in line for line in flagged.lines), flagged.lines
    s3_client(flagged, access_key="flagkey", secret_key="flag-secret-1234").create_bucket(Bucket="flag")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signal(ferry, sig):
    srv = ferry("--memory", "--anonymous")
    assert unsigned(srv, "GET", "/").status_code == 200
    t0 = time.monotonic()
    code = srv.stop(sig, timeout=10)
    assert code == 0, f"exit code {code} after {sig.name}\n{srv.stderr()}"
    assert time.monotonic() - t0 < 10


def test_bad_flags_fail_fast():
    from helpers import ferry_binary
    p = subprocess.run([str(ferry_binary()), "serve", "--profile", "nosuch"], capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert p.returncode != 0 and p.stderr.strip()


def test_virtual_host_style(anon_server):
    data = payload(5000, 12)
    assert unsigned(anon_server, "PUT", "/vhost").status_code in (200, 409)
    with RawConn(anon_server) as c:
        host = f"vhost.localhost:{anon_server.port}"
        c.send(raw_request("PUT", "/dir/obj", host=host, body=data))
        assert c.read_response().status == 200
        c.send(raw_request("GET", "/dir/obj", host=host))
        r = c.read_response()
        assert r.status == 200 and r.body == data
    assert unsigned(anon_server, "GET", "/vhost/dir/obj").content == data


def test_synthetic_bucket(anon_server):
    a = unsigned(anon_server, "GET", "/synthetic/1MiB/anything")
    assert a.status_code == 200 and len(a.content) == 1 << 20
    b = unsigned(anon_server, "GET", "/synthetic/1MiB/anything")
    assert a.content == b.content, "synthetic bytes are not deterministic"
    c = unsigned(anon_server, "GET", "/synthetic/1MiB/other")
    assert c.content != a.content
    s = unsigned(anon_server, "GET", "/synthetic/x/size=12345")
    assert s.status_code == 200 and len(s.content) == 12345
    r = unsigned(anon_server, "GET", "/synthetic/1MiB/anything", headers={"Range": "bytes=1000-1999"})
    assert r.status_code == 206 and r.content == a.content[1000:2000]
    h = unsigned(anon_server, "HEAD", "/synthetic/1MiB/anything")
    assert int(h.headers["content-length"]) == 1 << 20
    # The checksum it sends lets a client verify the bytes.
    crc = h.headers.get("x-amz-checksum-crc32c")
    if crc:
        assert crc == b64(crc32c(a.content).to_bytes(4, "big")), "synthetic x-amz-checksum-crc32c is wrong"
    # rclone check / aws s3 sync read a 32-hex ETag without '-' as the object's MD5.
    etag = h.headers.get("etag", "").strip('"')
    if len(etag) == 32 and "-" not in etag:
        assert etag == hashlib.md5(a.content).hexdigest(), \
            "synthetic ETag looks like an MD5 but is not the MD5 of the bytes (clients will report corruption)"


def test_user_cert_and_key(ferry, tmp_path):
    openssl, curl = require_tool("openssl"), require_tool("curl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", key, "-out", cert])
    srv = ferry("--memory", "--anonymous", "--tls", "--cert", str(cert), "--key", str(key))
    assert srv.scheme == "https", srv.lines
    p = run([curl, "-sS", "--cacert", cert, "-w", "%{http_code}", "-o", "/dev/null", f"{srv.url}/"])
    assert p.stdout == "200"
