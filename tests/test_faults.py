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


# -- the fault matrix -----------------------------------------------------------------------
#
# Each cell injects one fault into one operation at a point chosen by its seed, then holds
# the promise: the operation completed and its result is byte for byte the source, or it
# failed with a clear error (one line naming the object) and left NO partial file or
# object under the final name, and running it again completes. `scripts/faults.sh
# --seeds N` runs every cell over N seeds and writes the table (docs/lab/fault-matrix.md);
# a plain `pytest tests` runs one seed (FERRY_FAULT_SEEDS). Every cell records its outcome
# (`record_property`), which faults.sh counts.

import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

from helpers import REGION, FerryServer, clean_env, ferry_binary  # noqa: E402

SEEDS = list(range(1, int(os.environ.get("FERRY_FAULT_SEEDS", "1")) + 1))
MIB = 1024 * 1024
KEYS = ("ferry-fault-ak", "ferry-fault-secret-0123456789")
OPS = ["cp-up", "cp-down", "sync-up", "sync-down"]
# One part per MiB: a few MiB give several parts, so a fault lands between parts too.
PART = ["--part-size", "1MiB"]


def _data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


class Site:
    """A `ferry serve --data DIR` that can be stopped, killed and started again on the
    same directory (and the same port when asked), with the objects a cell needs."""

    def __init__(self, tmp: Path, seed: int):
        self.tmp, self.seed = tmp, seed
        self.dir = tmp / "data"
        self.srv: FerryServer | None = None
        self.keys = KEYS
        self.big = _data(6 * MIB + 12345, seed)  # ranged download, multipart upload
        self.tree = {f"t/{i}.bin": _data(200_000 + i * 7919, seed * 100 + i) for i in range(4)}
        # Across an emulated link (LinkHold): the commands that put server and client
        # into its namespaces, and the server's address there.
        self.many: dict[str, bytes] = {}  # many small objects (the link cells)
        self.server_prefix: list = []
        self.client_prefix: list = []
        self.host = "127.0.0.1"

    def start(self, *flags, keys=None, addr=None) -> FerryServer:
        self.keys = keys or self.keys
        self.srv = FerryServer(["--data", str(self.dir), "--access-key", self.keys[0],
                                "--secret-key", self.keys[1], *flags], workdir=self.tmp,
                               prefix=self.server_prefix)
        return self.srv.start(addr=addr or f"{self.host}:0")

    def stop(self):
        if self.srv:
            self.srv.kill()

    def env(self, srv=None) -> dict:
        srv = srv or self.srv
        return clean_env(AWS_ACCESS_KEY_ID=self.keys[0], AWS_SECRET_ACCESS_KEY=self.keys[1], AWS_REGION=REGION,
                         AWS_ENDPOINT_URL=srv.url, AWS_CONFIG_FILE="/nonexistent/config",
                         AWS_SHARED_CREDENTIALS_FILE="/nonexistent/credentials")

    def ferry(self, *args, srv=None, timeout=120, **kw) -> subprocess.CompletedProcess:
        p = subprocess.run([*self.client_prefix, str(ferry_binary()), *map(str, args)], env=self.env(srv),
                           capture_output=True,
                           timeout=timeout, stdin=subprocess.DEVNULL, **kw)
        p.out, p.err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        return p

    def ok(self, *args, **kw) -> str:
        p = self.ferry(*args, **kw)
        assert p.returncode == 0, f"ferry {' '.join(map(str, args))}: exit {p.returncode}\n{p.err[-3000:]}"
        return p.out

    def seed_objects(self):
        """The bucket, the objects downloads read, and the local sources uploads send."""
        self.start()
        self.ok("mb", "s3://fault")
        src = self.tmp / "up"
        for rel, data in {"big.bin": self.big, **self.tree}.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes(data)
        self.ok("cp", *PART, src / "big.bin", "s3://fault/down/big.bin")
        self.ok("cp", "--recursive", src / "t", "s3://fault/down/t/")
        if self.many:
            for rel, data in self.many.items():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_bytes(data)
            self.ok("cp", "--recursive", src / "many", "s3://fault/down/many/")
        self.stop()

    def op(self, name: str, srv=None, extra=()) -> tuple[list, callable]:
        """The command of an operation, and the check of its result."""
        up, down = self.tmp / "up", self.tmp / "got"
        cmds = {
            "cp-up": ["cp", *PART, *extra, up / "big.bin", "s3://fault/up/big.bin"],
            "cp-down": ["cp", *PART, *extra, "s3://fault/down/big.bin", down / "big.bin"],
            "sync-up": ["sync", *PART, *extra, up / "t", "s3://fault/sync-up/"],
            "sync-down": ["sync", *PART, *extra, "s3://fault/down/t/", down / "t"],
            "cp-up-many": ["cp", "--recursive", *extra, up / "many", "s3://fault/many-up/"],
            "cp-down-many": ["cp", "--recursive", *extra, "s3://fault/down/many/", down / "many"],
        }
        return cmds[name], (lambda srv=None: self.check(name, complete=True, srv=srv))

    def check(self, name: str, complete: bool, srv=None):
        """Every output of the operation is whole (`complete`: and present)."""
        down = self.tmp / "got"
        if name == "cp-down":
            outputs = {down / "big.bin": self.big}
        elif name == "sync-down":
            outputs = {down / "t" / Path(k).name: v for k, v in self.tree.items()}
        elif name == "cp-down-many":
            outputs = {down / "many" / Path(k).name: v for k, v in self.many.items()}
        else:
            outputs = {}
        for path, want in outputs.items():
            if path.exists():
                got = path.read_bytes()
                assert got == want, f"{path} holds {len(got)} bytes that are not the object's ({len(want)})"
            else:
                assert not complete, f"{path} is missing after a completed run"
        if name == "cp-up-many":
            # One recursive download of what is there (a `cat` per object is a process each).
            self.checks = getattr(self, "checks", 0) + 1
            back = self.tmp / f"check-{self.checks}"
            p = self.ferry("cp", "--recursive", "s3://fault/many-up/", back, srv=srv)
            assert p.returncode == 0, f"reading back s3://fault/many-up/: {p.err[-2000:]}"
            for k, want in self.many.items():
                got = back / Path(k).name
                if got.exists():
                    assert got.read_bytes() == want, f"s3://fault/many-up/{got.name} is not the file's bytes"
                else:
                    assert not complete, f"s3://fault/many-up/{got.name} is missing after a completed run"
            extra = {f.name for f in back.iterdir()} - {Path(k).name for k in self.many} if back.exists() else set()
            assert not extra, f"objects that were never sent: {sorted(extra)}"
        if name in ("cp-up", "sync-up"):
            objs = ({"up/big.bin": self.big} if name == "cp-up"
                    else {f"sync-up/{Path(k).name}": v for k, v in self.tree.items()})
            for key, want in objs.items():
                p = self.ferry("cat", f"s3://fault/{key}", srv=srv)
                if p.returncode != 0:
                    assert not complete and "not found" in p.err, f"{key}: {p.err}"
                    continue
                assert p.stdout == want, f"s3://fault/{key} holds {len(p.stdout)} bytes that are not the file's"


def _clear_error(p, site_names=("s3://fault/", "got", "up")):
    """A failed run's stderr: error lines that each name an object, none repeating a cause."""
    lines = [line for line in p.err.splitlines() if line.startswith("ferry: error:")]
    assert lines, f"exit {p.returncode} without an error line:\n{p.err[-2000:]}"
    for line in lines:
        assert any(n in line for n in site_names), f"the error names no object: {line}"
        parts = [x.strip() for x in line.split(": ") if len(x.strip()) > 3]
        for i, x in enumerate(parts):
            assert x not in parts[i + 1:], f"{x!r} said twice: {line}"
    return lines[0]


def _settle(site, name, p, record_property, rerun_srv):
    """The cell's outcome: completed and verified, or failed cleanly and re-run to completion."""
    if p.returncode == 0:
        site.check(name, complete=True, srv=rerun_srv)
        record_property("outcome", "completed")
        return "completed"
    record_property("error", _clear_error(p))
    site.check(name, complete=False, srv=rerun_srv)
    cmd, verify = site.op(name)
    again = site.ferry(*cmd, srv=rerun_srv)
    assert again.returncode == 0, f"the re-run failed: {again.err[-2000:]}"
    verify(srv=rerun_srv)
    record_property("outcome", "failed-clean-rerun-ok")
    return "failed"


FAULT_FLAGS = {
    "500": ["--fault-500-rate", "0.25"],
    "503": ["--fault-503-rate", "0.25"],
    "reset": ["--fault-reset-rate", "0.3"],
    "stall": ["--fault-stall-rate", "0.3", "--fault-stall", "1s"],
}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("fault", list(FAULT_FLAGS))
def test_matrix_server_fault(tmp_path, fault, op, seed, record_property):
    site = Site(tmp_path, seed)
    site.seed_objects()
    faulty = site.start(*FAULT_FLAGS[fault], "--seed", str(seed))
    cmd, _ = site.op(op)
    p = site.ferry(*cmd, srv=faulty)
    site.stop()
    clean = site.start()
    try:
        _settle(site, op, p, record_property, clean)
    finally:
        site.stop()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", OPS)
def test_matrix_kill_client(tmp_path, op, seed, record_property):
    site = Site(tmp_path, seed)
    site.seed_objects()
    # Responses paced (1 MB/s per connection) so a download is still running when the
    # kill lands; uploads are not paced and get a larger file's time instead.
    srv = site.start(*(["--rate-per-conn", "1000000"] if op.endswith("down") else []))
    if op in ("cp-up",):
        (tmp_path / "up" / "big.bin").write_bytes(site.big * 4)
        site.big = site.big * 4
    if op.startswith("sync"):
        # Enough files, one or two at a time, that the kill lands mid-sync: 48 files of
        # ~300 KB up one at a time, or 16 down two at a time at 1 MB/s each (~2.4 s).
        n = 48 if op == "sync-up" else 16
        site.tree = {f"t/{i:02}.bin": _data(300_000 + i, seed * 1000 + i) for i in range(n)}
        for rel, data in site.tree.items():
            (tmp_path / "up" / rel).write_bytes(data)
        site.ok("cp", "--recursive", tmp_path / "up" / "t", "s3://fault/down/t/", srv=srv)
    extra = ["-c", "1"] if op == "sync-up" else ["-c", "2"] if op == "sync-down" else []
    cmd, _ = site.op(op, extra=extra)
    span = {"sync-down": 2.0, "sync-up": 0.3}.get(op, 0.6)
    delay = random.Random(seed * 31 + OPS.index(op)).uniform(0.05, span)
    proc = subprocess.Popen([str(ferry_binary()), *map(str, cmd)], env=site.env(srv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    time.sleep(delay)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    try:
        site.check(op, complete=not killed and proc.returncode == 0, srv=srv)
        again = site.ferry(*cmd, srv=srv)
        assert again.returncode == 0, f"the re-run after kill -9 failed: {again.err[-2000:]}"
        site.check(op, complete=True, srv=srv)
        record_property("outcome", "killed-rerun-ok" if killed else "completed")
    finally:
        site.stop()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("what", ["put", "multipart"])
def test_matrix_kill_server(tmp_path, what, seed, record_property):
    """kill -9 of `ferry serve --data DIR` while it takes a PUT or a multipart upload (up to
    its CompleteMultipartUpload), then a restart on the same DIR: the object is absent or
    whole, never partial, and the re-run completes."""
    site = Site(tmp_path, seed)
    site.seed_objects()
    site.big = _data(16 * MIB + 7, seed)
    (tmp_path / "up" / "big.bin").write_bytes(site.big)
    srv = site.start()
    part = ["--part-size", "64MiB"] if what == "put" else ["--part-size", "1MiB"]
    cmd = ["cp", *part, tmp_path / "up" / "big.bin", "s3://fault/up/big.bin"]
    proc = subprocess.Popen([str(ferry_binary()), *map(str, cmd)], env=site.env(srv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    time.sleep(random.Random(seed * 17 + (what == "put")).uniform(0.02, 0.5))
    server_killed = srv.proc.poll() is None and proc.poll() is None
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    proc.wait(120)
    srv2 = site.start()
    try:
        site.check("cp-up", complete=False, srv=srv2)
        again = site.ferry(*cmd, srv=srv2)
        assert again.returncode == 0, f"the re-run after the restart failed: {again.err[-2000:]}"
        site.check("cp-up", complete=True, srv=srv2)
        record_property("outcome", "killed-rerun-ok" if server_killed else "completed")
    finally:
        site.stop()


def _small_disk(tmp_path: Path, size: int):
    """A directory that holds `size` bytes: a tmpfs where mounting is allowed (root), else
    None (the caller then limits file size with RLIMIT_FSIZE instead)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() == 0 and shutil.which("mount"):
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
        if p.returncode == 0:
            return mnt
    return None


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["cp-down", "sync-down"])
def test_matrix_disk_full(tmp_path, op, seed, record_property):
    """A download onto a disk too small for it: a clear error, nothing under the final
    name, and the re-run onto a disk with room completes. A 512 KiB tmpfs when root can
    mount one, else a 512 KiB RLIMIT_FSIZE (which fails a write with EFBIG instead)."""
    site = Site(tmp_path, seed)
    site.seed_objects()
    srv = site.start()
    mnt = _small_disk(tmp_path, 512 * 1024)
    how = "tmpfs" if mnt else "rlimit-fsize"
    target = mnt if mnt else tmp_path / "limited"
    target.mkdir(exist_ok=True)
    cmd, _ = site.op(op)
    cmd = [str(target / "got" / Path(c).name) if str(c).startswith(str(tmp_path / "got")) else c for c in cmd]

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512 * 1024, 512 * 1024))

    try:
        p = site.ferry(*cmd, srv=srv, preexec_fn=None if mnt else limit)
        assert p.returncode != 0, f"a {op} larger than the disk succeeded"
        line = _clear_error(p, site_names=("s3://fault/", str(target)))
        record_property("error", line)
        assert ("No space left" in line) or ("File too large" in line), line
        outputs = ({target / "got" / "big.bin": site.big} if op == "cp-down"
                   else {target / "got" / "t" / Path(k).name: v for k, v in site.tree.items()})
        for path, want in outputs.items():
            assert not path.exists() or path.read_bytes() == want, f"{path} is partial after a full disk"
        left = [f.name for f in target.rglob("*") if f.name.endswith((".ferry-part", ".ferry-state"))]
        site.check(op, complete=False, srv=srv)
        cmd, verify = site.op(op)
        again = site.ferry(*cmd, srv=srv)
        assert again.returncode == 0, again.err
        verify(srv=srv)
        record_property("outcome", f"failed-clean-rerun-ok ({how}; temp files left: {len(left)})")
    finally:
        site.stop()
        if mnt:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_matrix_credentials_changed(tmp_path, seed, record_property):
    """The server restarts mid-sync on the same port and DIR with other keys: the sync
    fails with an authorisation error per object left, no object is partial, and the
    re-run with the new keys completes."""
    site = Site(tmp_path, seed)
    site.seed_objects()
    site.tree = {f"t/{i}.bin": _data(300_000 + i, seed * 1000 + i) for i in range(24)}
    for rel, data in site.tree.items():
        (tmp_path / "up" / rel).write_bytes(data)
    srv = site.start()
    port = srv.port
    cmd, _ = site.op("sync-up", extra=["-c", "2"])
    proc = subprocess.Popen([str(ferry_binary()), *map(str, cmd)], env=site.env(srv), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    time.sleep(random.Random(seed).uniform(0.05, 0.4))
    site.stop()
    new_keys = ("ferry-fault-ak2", "ferry-fault-other-secret-987")
    # The same port, so the running sync meets the new keys; until the old sockets are
    # gone (or while another process's connection holds the port) the bind may fail.
    for attempt in range(40):
        try:
            srv2 = site.start(keys=new_keys, addr=f"127.0.0.1:{port}")
            break
        except pytest.fail.Exception:
            if attempt == 39:
                raise
            time.sleep(0.25)
    _, err = proc.communicate(timeout=120)
    err = err.decode("utf-8", "replace")
    try:
        if proc.returncode != 0:
            lines = [line for line in err.splitlines() if line.startswith("ferry: error:")]
            assert lines, err
            assert any("not authorised" in line or "cannot connect" in line for line in lines), err
            record_property("error", lines[0])
        site.check("sync-up", complete=False, srv=srv2)
        again = site.ferry(*cmd, srv=srv2)
        assert again.returncode == 0, again.err
        site.check("sync-up", complete=True, srv=srv2)
        record_property("outcome", "failed-clean-rerun-ok" if proc.returncode else "completed")
    finally:
        site.stop()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("source", ["profile", "env"])
def test_matrix_expired_token(tmp_path, source, seed, record_property):
    """Temporary credentials expire mid-sync (`ferry serve --fault-expire-token-after N`
    answers 400 ExpiredToken to the Nth+1 request carrying a session token). From the
    shared credentials file, which the test rewrites with a new token after the start,
    ferry reads its credentials again once and carries on; from the environment, which
    cannot change under a running process, it fails with one line per object naming
    ExpiredToken. Either way nothing is partial and the re-run (new token) completes."""
    site = Site(tmp_path, seed)
    site.tree = {f"t/{i}.bin": _data(20_000 + i, seed * 1000 + i) for i in range(16)}
    (tmp_path / "up" / "t").mkdir(parents=True, exist_ok=True)
    for rel, data in site.tree.items():
        (tmp_path / "up" / rel).write_bytes(data)
    creds = tmp_path / "credentials"

    def token_env(token: str) -> dict:
        env = site.env(srv)
        if source == "profile":
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                env.pop(k)
            creds.write_text(f"[default]\naws_access_key_id = {site.keys[0]}\n"
                             f"aws_secret_access_key = {site.keys[1]}\naws_session_token = {token}\n")
            env["AWS_SHARED_CREDENTIALS_FILE"] = str(creds)
        else:
            env["AWS_SESSION_TOKEN"] = token
        return env

    # Each request waits ~60 ms, so the first token expires ~0.6 s in, well after the
    # rewrite; the second one lasts for the rest (17 requests: a listing, 16 PUTs).
    srv = site.start("--fault-expire-token-after", "10", "--ttfb-p50", "60ms", "--ttfb-p99", "60ms")
    try:
        site.ok("mb", "s3://fault")
        cmd, _ = site.op("sync-up", extra=["-c", "1", "-v"])
        proc = subprocess.Popen([str(ferry_binary()), *map(str, cmd)], env=token_env(f"tok-1-{seed}"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        time.sleep(0.2)
        token_env(f"tok-2-{seed}")  # rewrites the file (profile)
        _, err = proc.communicate(timeout=120)
        err = err.decode("utf-8", "replace")
        renewed = "credentials read again after ExpiredToken" in err
        record_property("renewed", str(renewed))
        if proc.returncode != 0:
            lines = [line for line in err.splitlines() if line.startswith("ferry: error:")]
            assert lines, err[-2000:]
            assert all("ExpiredToken" in line for line in lines), lines
            record_property("error", lines[0])
            assert not renewed, f"renewed, yet failed:\n{err[-2000:]}"
        if source == "env":
            assert proc.returncode != 0 and not renewed, "keys from the environment cannot be renewed"
        site.stop()
        srv = site.start()  # the re-run meets no expiring tokens
        fresh = token_env(f"tok-2-{seed}")
        site.check("sync-up", complete=False, srv=srv)
        again = subprocess.run([str(ferry_binary()), *map(str, cmd)], env=fresh, capture_output=True,
                               stdin=subprocess.DEVNULL, timeout=120)
        assert again.returncode == 0, again.stderr.decode("utf-8", "replace")[-2000:]
        site.check("sync-up", complete=True, srv=srv)
        record_property("outcome", "failed-clean-rerun-ok" if proc.returncode else
                        ("completed, credentials read again" if renewed else "completed"))
    finally:
        site.stop()


class BadBodyPeer:
    """A scripted HTTP/1.1 peer on a real socket in front of `ferry serve`: it forwards
    each request as it came (so signatures hold) and answers GETs with a 200/206 whose
    body is cut short with a matching Content-Length ("truncated"), or has one byte
    flipped ("corrupt"). Sequential keep-alive requests; nothing else is changed."""

    def __init__(self, upstream: tuple[str, int], kind: str, seed: int):
        self.upstream, self.kind, self.rng = upstream, kind, random.Random(seed)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.mutated = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_message(sock, buf: bytes, head_only_body: bool):
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                return None, buf
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
        n = 0 if head_only_body else int(headers.get("content-length", "0"))
        while len(buf) < n:
            chunk = sock.recv(65536)
            if not chunk:
                return None, buf
            buf += chunk
        return (lines, headers, head, buf[:n]), buf[n:]

    def _serve(self, conn):
        try:
            self._serve_conn(conn)
        except ConnectionError:
            # The client gave up on the connection (it closes one whose body failed its
            # check, unread bytes and all, so the kernel resets it): nothing to serve.
            pass

    def _serve_conn(self, conn):
        buf = b""
        with conn:
            while True:
                msg, buf = self._read_message(conn, buf, False)
                if msg is None:
                    return
                lines, headers, head, body = msg
                method = lines[0].split(" ")[0]
                with socket.create_connection(self.upstream) as up:
                    up.sendall(head + b"\r\n\r\n" + body)
                    rmsg, _ = self._read_message(up, b"", method == "HEAD")
                if rmsg is None:
                    return
                rlines, rheaders, rhead, rbody = rmsg
                status = int(rlines[0].split(" ")[1])
                if method == "GET" and status in (200, 206) and len(rbody) > 1:
                    self.mutated += 1
                    if self.kind == "corrupt":
                        i = self.rng.randrange(len(rbody))
                        rbody = rbody[:i] + bytes([rbody[i] ^ 0x5A]) + rbody[i + 1:]
                    else:
                        rbody = rbody[: self.rng.randrange(1, len(rbody))]
                        rhead = b"\r\n".join(
                            (b"content-length: %d" % len(rbody)) if x.lower().startswith(b"content-length:") else x
                            for x in rhead.split(b"\r\n"))
                try:
                    conn.sendall(rhead + b"\r\n\r\n" + rbody)
                except OSError:  # the client gave up on this connection: its choice
                    return


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", ["cp-down", "cp-down-small", "cat"])
@pytest.mark.parametrize("kind", ["truncated", "corrupt"])
def test_matrix_bad_body(tmp_path, kind, op, seed, record_property):
    """A server that answers 200 with a body cut short (Content-Length to match) or with a
    flipped byte: the download fails as an integrity error naming the object, nothing
    lands under the final name, and the re-run against the honest server completes."""
    site = Site(tmp_path, seed)
    site.seed_objects()
    srv = site.start()
    peer = BadBodyPeer(srv.addr, kind, seed)

    class Via:  # the peer's address, as a server for Site.ferry
        url = peer.url

    dest = tmp_path / "got" / "x.bin"
    key, want = ("down/big.bin", site.big) if op == "cp-down" else ("down/t/0.bin", site.tree["t/0.bin"])
    cmd = (["cp", *PART, "--transport", "h1-pool", f"s3://fault/{key}", dest] if op != "cat"
           else ["cat", "--transport", "h1-pool", f"s3://fault/{key}"])
    try:
        p = site.ferry(*cmd, srv=Via, timeout=120)
        assert peer.mutated > 0, "the peer changed no response"
        assert p.returncode != 0, f"a {kind} body was accepted:\n{p.err[-2000:]}"
        line = _clear_error(p, site_names=(f"s3://fault/{key}",))
        record_property("error", line)
        assert any(w in line for w in ("integrity", "cut short", "checksum", "length", "disagrees")), line
        assert not dest.exists(), f"{dest} exists after a {kind} body"
        again = site.ferry(*cmd, srv=srv)
        assert again.returncode == 0, again.err
        got = dest.read_bytes() if op != "cat" else again.stdout
        assert got == want
        record_property("outcome", "failed-clean-rerun-ok")
    finally:
        peer.close()
        site.stop()


# -- the emulated link's faults --------------------------------------------------------------
#
# `ferry serve` and `ferry cp` on the two sides of the lab's emulated link (crates/link), held
# by `ferry bench link-hold` with a fault of the path: 1% of packets lost, packets
# reordered (up to 4 ms of jitter on a 1 ms link), or the link cut for 3 s mid-transfer.
# Kernel TCP on both sides meets the fault as on a real path. Root only (namespaces, TUN
# devices): scripts/test.sh runs the suite as root in CI.

import queue  # noqa: E402


def _need_link():
    if os.geteuid() != 0:
        pytest.skip("the emulated link needs root (network namespaces, TUN devices); scripts/test.sh runs "
                    "these cells as root")
    require_tool("ip")


class LinkHold:
    """`ferry bench link-hold FLAGS`: the emulated link, up until `close()` (which returns
    the delay line's counters per direction); `cut()` cuts it (SIGUSR1)."""

    def __init__(self, *flags, timeout=60.0):
        self.cmd = [str(ferry_binary()), "bench", "link-hold", "--lifetime", "600s", *map(str, flags)]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        self.ns, self.ip = {}, {}
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._q.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                line = None
            if line is None:
                self.proc.kill()
                _, err = self.proc.communicate(timeout=30)
                pytest.fail(f"`{' '.join(self.cmd)}` did not bring the link up:\n" + "\n".join(self.lines)
                            + "\n" + err.decode("utf-8", "replace")[-3000:])
            parts = line.split()
            if len(parts) == 4 and parts[1] == "namespace":
                self.ns[parts[0]], self.ip[parts[0]] = parts[2], parts[3]
            if line == "ready":
                break
        self.counters: dict | None = None

    def _drain(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            self._q.put(line)
        self._q.put(None)

    def exec_in(self, side: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[side]]

    def cut(self):
        self.proc.send_signal(signal.SIGUSR1)

    def close(self) -> dict:
        """Tears the link down; {"c2s": {"packets": .., "lost": .., "reordered": .., "cut": ..}, "s2c": ..}."""
        if self.counters is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            time.sleep(0.05)  # the drain thread's last lines
            self.counters = {}
            for line in self.lines:
                parts = line.split()
                if parts and parts[0] in ("c2s", "s2c"):
                    self.counters[parts[0]] = {k: int(v) for k, v in zip(parts[1::2], parts[2::2])}
            assert self.proc.returncode == 0, f"link-hold exited {self.proc.returncode}: {self.lines}"
        return self.counters


# The link's shape and fault per cell. The cut's link is capped at 40 Mbit/s so that the
# transfers last past the seeded moment of the cut (6 MiB: ~1.3 s).
LINK_FAULTS = {
    "lossy": ["--faults", "lossy"],
    "reorder": ["--faults", "reorder"],
    "cut": ["--faults", "cut", "--rate", "40M"],
}
LINK_OPS = ["cp-up", "cp-down", "cp-up-many", "cp-down-many"]


def _link_site(tmp_path: Path, seed: int, link: LinkHold) -> Site:
    site = Site(tmp_path, seed)
    # Many small objects: 48 of 4-20 KiB.
    site.many = {f"many/{i:02}.bin": _data(4096 + (i * 337) % 16384, seed * 10_000 + i) for i in range(48)}
    site.server_prefix, site.client_prefix = link.exec_in("server"), link.exec_in("client")
    site.host = link.ip["server"]
    return site


class _Run:
    def __init__(self, proc: subprocess.Popen, err: bytes):
        self.returncode, self.err = proc.returncode, err.decode("utf-8", "replace")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", LINK_OPS)
@pytest.mark.parametrize("fault", list(LINK_FAULTS))
def test_matrix_link(tmp_path, fault, op, seed, record_property):
    """`ferry cp` up and down, one 6 MiB object or 48 small ones, across the emulated link
    with 1% loss, with reordering, or cut for 3 s a seeded moment into the transfer: it
    completes and verifies, or fails cleanly and its re-run completes."""
    _need_link()
    link = LinkHold(*LINK_FAULTS[fault], "--seed", seed)
    site = _link_site(tmp_path, seed, link)
    try:
        site.seed_objects()
        srv = site.start()
        cmd, _ = site.op(op)
        proc = subprocess.Popen([*site.client_prefix, str(ferry_binary()), *map(str, cmd)], env=site.env(srv),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        landed = None
        if fault == "cut":
            # 48 small objects take ~0.2 s at 40 Mbit/s, the 6 MiB one ~1.3 s.
            span = (0.02, 0.1) if op.endswith("many") else (0.05, 0.3)
            time.sleep(random.Random(seed * 53 + LINK_OPS.index(op)).uniform(*span))
            landed = proc.poll() is None
            link.cut()
        _, err = proc.communicate(timeout=120)
        outcome = _settle(site, op, _Run(proc, err), record_property, srv)
        site.stop()
        counters = link.close()
        both = {k: counters["c2s"][k] + counters["s2c"][k] for k in counters["c2s"]}
        record_property("link", " ".join(f"{k}={v}" for k, v in both.items()))
        # The fault was there: the delay line's own counters.
        if fault == "lossy":
            assert both["lost"] > 0, f"no packet lost at 1%: {counters}"
        elif fault == "reorder":
            assert both["reordered"] > 0, f"no packet overtaken: {counters}"
        elif landed:
            assert both["cut"] > 0, f"the cut dropped nothing: {counters}"
        if fault == "cut":
            record_property("outcome", f"{outcome}, cut {'mid-transfer' if landed else 'after the end'}")
    finally:
        site.stop()
        link.close()


# How soon `ferry cp` gives up on a link cut for good: no progress for 3 s ends an attempt,
# a connection not up in 2 s fails, 3 attempts. One request then gives up within about
# 3 x (2 + 3) s plus its backoff (under 1 s); a command makes a few in a row (a listing or
# CreateMultipartUpload, the transfers, an abort), so it ends well within GIVE_UP_WITHIN.
# FERRY_FAULT_CUT_DEFAULTS=1 runs the cells with ferry's default time-outs and attempts
# instead (60 s, 10 s, 5), within the 480 s the cells allowed before the fix.
GIVE_UP_FAST = ["--timeout", "3", "--connect-timeout", "2", "--retries", "3"]
GIVE_UP_WITHIN = 90
if os.environ.get("FERRY_FAULT_CUT_DEFAULTS") == "1":
    GIVE_UP_FAST, GIVE_UP_WITHIN = [], 480

# About 10-17 s a cell: the one that used to hang longest (48 small uploads) runs in
# `pytest tests`; the rest are `long` (scripts/faults.sh), to keep the suite's time.
CUT_LONG_OPS = [op if op == "cp-up-many" else pytest.param(op, marks=pytest.mark.long) for op in LINK_OPS]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", CUT_LONG_OPS)
def test_matrix_link_cut_long(tmp_path, op, seed, record_property):
    """The link cut a seeded moment into the transfer and not restored while the client
    retries, with short time-outs (GIVE_UP_FAST): the run fails with a clear error within
    GIVE_UP_WITHIN seconds, nothing partial under a final name, and its re-run (default
    settings) across a link that works completes."""
    _need_link()
    link = LinkHold("--faults", "cut", "--cut-for", "600s", "--rate", "40M", "--seed", seed)
    site = _link_site(tmp_path, seed, link)
    try:
        site.seed_objects()
        srv = site.start()
        cmd, _ = site.op(op, extra=GIVE_UP_FAST)
        proc = subprocess.Popen([*site.client_prefix, str(ferry_binary()), *map(str, cmd)], env=site.env(srv),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        span = (0.02, 0.1) if op.endswith("many") else (0.05, 0.3)
        time.sleep(random.Random(seed * 59 + LINK_OPS.index(op)).uniform(*span))
        landed = proc.poll() is None
        link.cut()
        t0 = time.monotonic()
        try:
            _, err = proc.communicate(timeout=GIVE_UP_WITHIN)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=30)
            pytest.fail(f"`ferry {' '.join(map(str, cmd))}` neither completed nor failed within {GIVE_UP_WITHIN} s "
                        "of the link being cut for good")
        gave_up = time.monotonic() - t0
        run = _Run(proc, err)
        site.stop()
        counters = link.close()
        if landed:
            assert run.returncode != 0, f"completed across a link cut for good:\n{run.err[-2000:]}"
        # A link that works again: a fresh one, the server restarted on the same DIR.
        link2 = LinkHold("--seed", seed)
        try:
            site.server_prefix, site.client_prefix = link2.exec_in("server"), link2.exec_in("client")
            site.host = link2.ip["server"]
            srv2 = site.start()
            outcome = _settle(site, op, run, record_property, srv2)
        finally:
            site.stop()
            link2.close()
        record_property("outcome", f"{outcome} (gave up {gave_up:.0f} s into the cut)" if landed else outcome)
        record_property("link", f"cut={counters['c2s']['cut'] + counters['s2c']['cut']}")
    finally:
        site.stop()
        link.close()
