"""Fault flags and emulation profiles, observed from the client side."""

from __future__ import annotations

import statistics
import time

import pytest
import requests
from botocore.exceptions import ClientError

from helpers import RawConn, assert_s3_error, client_error_code, raw_request, require_tool, run, s3_client

SYN = ("--synthetic-bucket", "synthetic")


def test_fault_503_slowdown(ferry):
    srv = ferry("--memory", "--anonymous", *SYN, "--fault-503-rate", "1.0", "--seed", "1")
    for i in range(3):
        r = requests.get(f"{srv.url}/synthetic/1MiB/k{i}", timeout=30)
        assert r.status_code == 503, r.status_code
        assert_s3_error(r.content, "SlowDown")


def test_fault_503_seen_by_boto3(ferry):
    srv = ferry("--memory", *SYN, "--fault-503-rate", "1.0")
    s3 = s3_client(srv, retries=1)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket="synthetic", Key="1MiB/x")
    assert client_error_code(ei.value) == (503, "SlowDown")


def test_fault_500_internal_error(ferry):
    srv = ferry("--memory", "--anonymous", *SYN, "--fault-500-rate", "1.0", "--seed", "2")
    r = requests.get(f"{srv.url}/synthetic/1MiB/k", timeout=30)
    assert r.status_code == 500
    assert_s3_error(r.content, "InternalError")


def test_fault_reset_cuts_body(ferry):
    srv = ferry("--memory", "--anonymous", *SYN, "--fault-reset-rate", "1.0", "--seed", "3")
    size = 16 * 1024 * 1024
    with RawConn(srv) as c:
        c.send(raw_request("GET", "/synthetic/16MiB/reset"))
        head = c._read_until(b"\r\n\r\n").decode("latin-1")
        assert head.startswith("HTTP/1.1 200"), head
        assert f"content-length: {size}" in head.lower(), head
        got = len(c.buf)
        c.buf = b""
        try:
            while True:
                chunk = c.sock.recv(1 << 20)
                if not chunk:
                    break
                got += len(chunk)
        except (ConnectionResetError, BrokenPipeError):
            pass
    assert got < size, f"the whole body arrived ({got} bytes) despite --fault-reset-rate 1.0"
    # requests sees it as an error too
    with pytest.raises(requests.exceptions.RequestException):
        requests.get(f"{srv.url}/synthetic/16MiB/reset2", timeout=30).raise_for_status()


def test_fault_stall(ferry):
    srv = ferry("--memory", "--anonymous", *SYN, "--fault-stall-rate", "1.0", "--fault-stall", "3s")
    with pytest.raises((requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError)):
        requests.get(f"{srv.url}/synthetic/4MiB/stall", timeout=(5, 0.5))


def _ttfb(server, n=7):
    out = []
    with RawConn(server) as c:
        for i in range(n):
            t0 = time.perf_counter()
            c.send(raw_request("GET", f"/synthetic/1KiB/ttfb-{i}"))
            while not c.buf:
                c._fill()
            out.append(time.perf_counter() - t0)
            r = c.read_response()
            assert r.status == 200 and len(r.body) == 1024
    return statistics.median(out)


def test_profile_s3_latency_and_no_h2(ferry):
    srv = ferry("--memory", "--anonymous", *SYN, "--profile", "s3")
    assert srv.profile and "s3" in srv.profile, srv.lines
    median = _ttfb(srv)
    # Behaviour, not speed: first-byte latency is injected (p50 30 ms); loopback alone is ~0.1 ms.
    assert median > 0.005, f"median first byte {median * 1000:.2f} ms: no latency injected by --profile s3"
    curl = require_tool("curl")
    p = run([curl, "-sS", "--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version}",
             f"{srv.url}/synthetic/1KiB/x"], check=False)
    assert p.returncode != 0 or p.stdout.strip() != "2", "--profile s3 must not speak HTTP/2"


def test_ttfb_flag(ferry):
    srv = ferry("--memory", "--anonymous", *SYN, "--ttfb-p50", "40ms")
    assert _ttfb(srv, n=5) > 0.005
