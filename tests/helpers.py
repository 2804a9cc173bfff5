"""Shared helpers for the pytest suite: the ferry server process, clients, raw HTTP.

Everything here talks to a real `ferry serve` process over real sockets; nothing is
mocked. A server is started with `--addr 127.0.0.1:0` and the suite reads the port
from the `listening on http(s)://HOST:PORT` line it prints on stdout.
"""

from __future__ import annotations

import base64
import hashlib
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"

# Credentials the suite gives the server (so the host's AWS_* variables never matter).
ACCESS_KEY = "ferry-test-ak"
SECRET_KEY = "ferry-test-secret-0123456789"
REGION = "us-east-1"

LISTEN_RE = re.compile(r"listening on (https?)://([0-9.]+|\[[0-9a-f:]+\]|[A-Za-z0-9.-]+):(\d+)")
STARTUP_TIMEOUT_S = 30.0


def ferry_binary() -> Path:
    """The binary under test: $FERRY_BIN, else target/release/ferry."""
    path = Path(os.environ.get("FERRY_BIN", ROOT / "target" / "release" / "ferry"))
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"ferry binary not found at {path}: run scripts/setup.sh (cargo build --release)")
    return path


def require_tool(name: str) -> str:
    """Path of a tool the suite needs. scripts/setup.sh installs them all, so a missing
    tool is a broken setup and fails the test (never a silent skip)."""
    venv_path = VENV_BIN / name
    if venv_path.is_file() and os.access(venv_path, os.X_OK):
        return str(venv_path)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"required tool '{name}' is not installed: run scripts/setup.sh")
    return found


def clean_env(**extra: str) -> dict:
    """The environment with every AWS_* / RCLONE_* variable removed, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_"))}
    env.update(extra)
    return env


class FerryServer:
    """One `ferry serve` subprocess.

    stdout is drained by a thread (lines kept in `self.lines`); stderr goes to a file so a
    failed start can show it.
    """

    def __init__(self, flags=(), env=None, workdir: Path | None = None, prefix=()):
        self.flags = list(flags)
        # A command the server runs under, e.g. `ip netns exec NS` (it must exec it).
        self.prefix = list(prefix)
        self.env = env if env is not None else clean_env()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="ferry-srv-"))
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.scheme = self.host = None
        self.port = None
        self.access_key = self.secret_key = None
        self.ca_file = None
        self.profile = None
        self._starts = 0

    # -- lifecycle --------------------------------------------------------------------
    def start(self, timeout: float = STARTUP_TIMEOUT_S, addr: str = "127.0.0.1:0") -> "FerryServer":
        self._starts += 1
        self.lines = []
        self.stderr_path = self.workdir / f"stderr-{self._starts}.log"
        cmd = [*self.prefix, str(ferry_binary()), "serve", "--addr", addr, *self.flags]
        self.cmd = cmd
        stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr,
                                     stdin=subprocess.DEVNULL, env=self.env, cwd=self.workdir)
        stderr.close()
        q: queue.Queue = queue.Queue()

        def drain(stream, lines):
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                lines.append(line)
                q.put(line)
            q.put(None)

        threading.Thread(target=drain, args=(self.proc.stdout, self.lines), daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = q.get(timeout=max(left, 0.01)) if left > 0 else None
            except queue.Empty:
                line = None
            if line is None:
                why = "exited" if self.proc.poll() is not None else f"printed no 'listening on' line within {timeout:.0f}s"
                self.kill()
                pytest.fail(f"ferry serve {why} ({' '.join(cmd)})\n--- stdout ---\n"
                            + "\n".join(self.lines) + "\n--- stderr ---\n" + self.stderr())
            m = LISTEN_RE.search(line)
            if m:
                self.scheme, self.host, self.port = m.group(1), m.group(2).strip("[]"), int(m.group(3))
                break
        # The credential/profile/CA lines follow the listening line; give them a moment.
        end = time.monotonic() + 2.0
        while time.monotonic() < end and not self._have_info():
            time.sleep(0.02)
        self._parse_info()
        return self

    def _have_info(self) -> bool:
        text = "\n".join(self.lines)
        want = ["profile:"]
        if "--anonymous" not in self.flags:
            want += ["access key:", "secret key:"]
        if "--tls" in self.flags:
            want.append("ca file:")
        return all(w in text for w in want)

    def _parse_info(self):
        for line in self.lines:
            for key, attr in (("access key:", "access_key"), ("secret key:", "secret_key"),
                              ("ca file:", "ca_file"), ("profile:", "profile")):
                idx = line.find(key)
                if idx >= 0:
                    value = line[idx + len(key):].strip()
                    if attr == "secret_key":
                        # Printed only when it is the built-in one: "ferry-secret (the
                        # built-in default)"; a chosen one reads "not printed (...)".
                        value = None if value.startswith("not printed") else value.split(" ")[0]
                    setattr(self, attr, value)
        if self.ca_file:
            ca = Path(self.ca_file)
            if not ca.is_absolute():
                ca = self.workdir / ca
            self.ca_file = str(ca)
        # Fall back to what we passed if the server did not print it.
        if self.access_key is None and "--access-key" in self.flags:
            self.access_key = self.flags[self.flags.index("--access-key") + 1]
        if self.secret_key is None and "--secret-key" in self.flags:
            self.secret_key = self.flags[self.flags.index("--secret-key") + 1]

    def stop(self, sig=signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Send `sig` and wait; escalate to SIGKILL after `timeout`. Returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr(self) -> str:
        try:
            return Path(self.stderr_path).read_text(errors="replace")[-8000:]
        except OSError:
            return ""

    # -- addresses ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)

    def __repr__(self):
        return f"<FerryServer {self.url} {' '.join(self.flags)}>"


# -- clients --------------------------------------------------------------------------
def s3_client(server: FerryServer, *, access_key=None, secret_key=None, retries: int = 1,
              addressing_style: str = "path", **config_kw):
    """A boto3 S3 client pointed at `server` (path-style, no retries by default)."""
    import boto3
    from botocore.config import Config

    # s3v4 explicitly: botocore still presigns URLs with SigV2 unless told otherwise.
    cfg = Config(signature_version="s3v4", s3={"addressing_style": addressing_style},
                 retries={"total_max_attempts": retries, "mode": "standard"},
                 connect_timeout=10, read_timeout=60, **config_kw)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=server.url,
        aws_access_key_id=access_key or server.access_key or ACCESS_KEY,
        aws_secret_access_key=secret_key or server.secret_key or SECRET_KEY,
        region_name=REGION,
        config=cfg,
        verify=server.ca_file if server.scheme == "https" else None,
    )


def client_error_code(exc) -> tuple[int, str]:
    """(HTTP status, S3 error code) from a botocore ClientError."""
    resp = exc.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp.get("Error", {}).get("Code", "")


# -- data -------------------------------------------------------------------------------
def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-random bytes."""
    return random.Random(f"{seed}:{size}").randbytes(size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def make_tree(root: Path, spec: dict[str, int], seed: int = 1) -> dict[str, str]:
    """Write files {relative path: size}; return {relative path: sha256}."""
    out = {}
    for i, (rel, size) in enumerate(sorted(spec.items())):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = payload(size, seed * 1000 + i)
        p.write_bytes(data)
        out[rel] = sha256(data)
    return out


def tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


# -- checksums the stdlib lacks -----------------------------------------------------------
def _crc32c_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


# -- raw HTTP/1.1 -------------------------------------------------------------------------
class RawResponse:
    def __init__(self, version, status, reason, headers, body):
        self.version, self.status, self.reason = version, status, reason
        self.headers = headers  # list of (lower-case name, value)
        self.body = body

    def header(self, name: str, default=None):
        name = name.lower()
        for k, v in self.headers:
            if k == name:
                return v
        return default

    def __repr__(self):
        return f"<RawResponse {self.status} {self.reason} {len(self.body)} bytes>"


class RawConn:
    """A bare TCP connection for byte-exact HTTP/1.1 scripts (pipelining, bad input)."""

    def __init__(self, server_or_addr, timeout: float = 20.0):
        addr = server_or_addr.addr if isinstance(server_or_addr, FerryServer) else server_or_addr
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def _read_until(self, sep: bytes) -> bytes:
        while sep not in self.buf:
            if not self._fill():
                raise EOFError(f"connection closed before {sep!r} ({len(self.buf)} bytes buffered)")
        head, self.buf = self.buf.split(sep, 1)
        return head

    def _read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError(f"connection closed after {len(self.buf)} of {n} body bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, method: str = "GET") -> RawResponse:
        head = self._read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers.append((k.strip().lower(), v.strip()))
        resp = RawResponse(version, status, reason, headers, b"")
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return resp
        te = (resp.header("transfer-encoding") or "").lower()
        if "chunked" in te:
            body = b""
            while True:
                size = int(self._read_until(b"\r\n").split(b";")[0], 16)
                if size == 0:
                    self._read_until(b"\r\n")  # (no trailers expected)
                    break
                body += self._read_exact(size)
                self._read_exact(2)
            resp.body = body
        elif resp.header("content-length") is not None:
            resp.body = self._read_exact(int(resp.header("content-length")))
        else:
            while self._fill():
                pass
            resp.body, self.buf = self.buf, b""
        return resp

    def at_eof(self, timeout: float = 5.0) -> bool:
        """True when the peer closes the connection (no more bytes) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            if self.buf:
                return False
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False


def raw_request(method: str, path: str, host: str = "127.0.0.1", headers: dict | None = None,
                body: bytes = b"") -> bytes:
    hdrs = {"Host": host}
    if body or method in ("PUT", "POST"):
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    return head.encode("utf-8") + body


def assert_s3_error(resp_body: bytes, code: str | None = None):
    text = resp_body.decode("utf-8", "replace")
    assert "<Error>" in text and "<Code>" in text, f"expected an S3 XML <Error> body, got: {text[:300]!r}"
    if code is not None:
        assert f"<Code>{code}</Code>" in text, f"expected error code {code}, got: {text[:300]!r}"


def unsigned(server: FerryServer, method: str, path: str, data: bytes = b"", **kw):
    """A plain HTTP request (for --anonymous servers and non-S3 paths)."""
    import requests

    verify = server.ca_file if server.scheme == "https" else True
    return requests.request(method, server.url + path, data=data, timeout=60, verify=verify, **kw)


def run(cmd, env=None, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a client command; on failure show its output."""
    cmd = [str(c) for c in cmd]
    p = subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, **kw)
    if check and p.returncode != 0:
        pytest.fail(f"command failed ({p.returncode}): {' '.join(cmd)}\n--- stdout ---\n{p.stdout[-4000:]}"
                    f"\n--- stderr ---\n{p.stderr[-4000:]}")
    return p
