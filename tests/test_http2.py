"""HTTP/2: h2c by prior knowledge (curl, h2load) and h2 by ALPN over TLS."""

from __future__ import annotations

import re

from helpers import payload, require_tool, run, sha256, unsigned


def _seed(server, bucket, key, data):
    r = unsigned(server, "PUT", f"/{bucket}")
    assert r.status_code in (200, 409), r.text  # 409: already exists
    r = unsigned(server, "PUT", f"/{bucket}/{key}", data)
    assert r.status_code == 200, r.text


def test_curl_h2c_prior_knowledge(anon_server, tmp_path):
    curl = require_tool("curl")
    data = payload(100_000, 1)
    _seed(anon_server, "h2c", "obj", data)
    out = tmp_path / "o"
    p = run([curl, "-sS", "--http2-prior-knowledge", "-o", out, "-w", "%{http_version} %{http_code}",
             f"{anon_server.url}/h2c/obj"])
    assert p.stdout.strip() == "2 200", p.stdout
    assert sha256(out.read_bytes()) == sha256(data)
    # and a PUT over h2c
    src = tmp_path / "up"
    src.write_bytes(payload(50_000, 2))
    p = run([curl, "-sS", "--http2-prior-knowledge", "-T", src, "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
             f"{anon_server.url}/h2c/up"])
    assert p.stdout.strip() == "2 200", p.stdout
    assert sha256(unsigned(anon_server, "GET", "/h2c/up").content) == sha256(src.read_bytes())


def _h2load_summary(text: str) -> dict:
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", text)
    assert m, f"no h2load summary in:\n{text}"
    keys = ["total", "started", "done", "succeeded", "failed", "errored"]
    out = dict(zip(keys, map(int, m.groups())))
    m = re.search(r"status codes: (\d+) 2xx", text)
    out["2xx"] = int(m.group(1)) if m else None
    return out


def test_h2load_16k(anon_server):
    h2load = require_tool("h2load")
    _seed(anon_server, "h2c", "16k", payload(16 * 1024, 3))
    p = run([h2load, "-n", "2000", "-c", "4", "-m", "10", f"{anon_server.url}/h2c/16k"], timeout=120)
    s = _h2load_summary(p.stdout)
    assert s["succeeded"] == 2000 and s["failed"] == 0 and s["errored"] == 0 and s["2xx"] == 2000, p.stdout


def test_tls_alpn_h2_and_h1(ferry, tmp_path):
    curl = require_tool("curl")
    srv = ferry("--memory", "--anonymous", "--tls")
    assert srv.scheme == "https" and srv.ca_file, srv.lines
    data = payload(70_000, 4)
    _seed(srv, "tls", "obj", data)
    for host in ("127.0.0.1", "localhost"):
        out = tmp_path / f"o-{host}"
        p = run([curl, "-sS", "--http2", "--cacert", srv.ca_file, "-o", out, "-w", "%{http_version}",
                 f"https://{host}:{srv.port}/tls/obj"])
        assert p.stdout.strip() == "2", f"ALPN did not pick h2 for {host}: {p.stdout}"
        assert sha256(out.read_bytes()) == sha256(data)
    p = run([curl, "-sS", "--http1.1", "--cacert", srv.ca_file, "-o", "/dev/null", "-w", "%{http_version}",
             f"https://127.0.0.1:{srv.port}/tls/obj"])
    assert p.stdout.strip() == "1.1"
    # without the CA the certificate is not trusted
    p = run([curl, "-sS", "-o", "/dev/null", f"https://127.0.0.1:{srv.port}/tls/obj"], check=False)
    assert p.returncode != 0


def test_curl_sigv4_h2c_and_virtual_host(mem_server, s3, bucket, tmp_path):
    """SigV4-signed requests from a second signer (curl --aws-sigv4), over h2c and
    virtual-host style (curl resolves *.localhost to loopback itself)."""
    curl = require_tool("curl")
    data = payload(40_000, 6)
    s3.put_object(Bucket=bucket, Key="signed/obj", Body=data)
    # S3 requires x-amz-content-sha256 on SigV4 requests; curl 7.88 does not add it itself.
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    sig = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{mem_server.access_key}:{mem_server.secret_key}",
           "-H", f"x-amz-content-sha256: {empty}"]
    cases = {
        "h1 path-style": ["--http1.1", f"{mem_server.url}/{bucket}/signed/obj"],
        "h2c path-style": ["--http2-prior-knowledge", f"{mem_server.url}/{bucket}/signed/obj"],
        "h1 virtual-host": ["--http1.1", f"http://{bucket}.localhost:{mem_server.port}/signed/obj"],
    }
    for name, args in cases.items():
        out = tmp_path / name.replace(" ", "_")
        p = run([curl, "-sS", *sig, "-o", out, "-w", "%{http_code}", *args])
        assert p.stdout == "200", f"{name}: {p.stdout} {out.read_bytes()[:300]!r}"
        assert sha256(out.read_bytes()) == sha256(data), name
    bad = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{mem_server.access_key}:wrong",
           "-H", f"x-amz-content-sha256: {empty}"]
    p = run([curl, "-sS", *bad, "--http2-prior-knowledge", "-w", "%{http_code}", "-o", tmp_path / "bad",
             f"{mem_server.url}/{bucket}/signed/obj"])
    assert p.stdout == "403" and b"SignatureDoesNotMatch" in (tmp_path / "bad").read_bytes()
