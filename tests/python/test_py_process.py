"""The client across processes and threads: pickling, fork, the GIL, settings, errors."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import socket
import threading
import time

import pytest

import ferry
from ferry.testing import FerryServer


def test_pickle_round_trip(client, bucket):
    client.put(f"s3://{bucket}/p", b"pickled")
    again = pickle.loads(pickle.dumps(client))
    assert isinstance(again, ferry.Client) and again is not client
    assert again.endpoint_url == client.endpoint_url
    assert bytes(again.get(f"s3://{bucket}/p")) == b"pickled"


def _child_reads(blob_client, url, q):
    q.put(bytes(blob_client.get(url)))


def test_spawned_process_gets_a_pickled_client(client, bucket):
    client.put(f"s3://{bucket}/spawned", b"from the parent")
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child_reads, args=(client, f"s3://{bucket}/spawned", q))
    p.start()
    try:
        assert q.get(timeout=60) == b"from the parent"
    finally:
        p.join(30)
    assert p.exitcode == 0


def test_fork_child_uses_the_client(client, bucket):
    url = f"s3://{bucket}/forked"
    client.put(url, b"before fork")
    # The parent's runtime and connections are live when it forks.
    assert bytes(client.get(url)) == b"before fork"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: must not touch pytest; report through the pipe
        code = 1
        try:
            os.close(r)
            client.put(url + "-child", b"written by the child")
            os.write(w, bytes(client.get(url)))
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert got == b"before fork"
    assert bytes(client.get(url + "-child")) == b"written by the child"
    # And the parent's client still works after its child used its own.
    assert bytes(client.get(url)) == b"before fork"


def _fork_and_wait(child, timeout: float = 30.0) -> str:
    """Runs `child()` in a forked process; its outcome: "ok", "exit N", "signal N" or "hung"."""
    pid = os.fork()
    if pid == 0:  # the child: must not touch pytest
        code = 1
        try:
            code = 0 if child() else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.01)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    code = os.waitstatus_to_exitcode(status)
    return "ok" if code == 0 else f"exit {code}"


def test_children_forked_while_other_threads_transfer_use_the_client(client, bucket):
    # The parent's runtime is busy (two threads keep get_many going) at every fork, so
    # its worker threads are parking, unparking and holding locks at that moment; each
    # child must still build its own runtime and engines and finish its calls.
    url = f"s3://{bucket}/busy-fork"
    client.put(url, b"b" * 50_000)
    stop = threading.Event()
    failures: list[BaseException] = []

    def busy():
        try:
            while not stop.is_set():
                assert all(len(bytes(b)) == 50_000 for b in client.get_many([url] * 8))
        except BaseException as e:  # reported below, not lost in the thread
            failures.append(e)

    threads = [threading.Thread(target=busy) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        def child():
            client.put(url + "-child", b"c")
            return bytes(client.get(url)) == b"b" * 50_000

        outcomes = [_fork_and_wait(child) for _ in range(12)]
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not failures
    assert outcomes == ["ok"] * 12


def test_the_runtime_has_no_process_wide_parking_table():
    # parking_lot (a tokio feature) parks threads in one process-wide table whose bucket
    # locks a forked child inherits held by threads it does not have; the workspace's
    # tokio leaves it out (Cargo.toml). Cargo.lock shows whether anything pulled it back.
    lock = os.path.join(os.path.dirname(__file__), "..", "..", "Cargo.lock")
    with open(lock) as f:
        names = {line.split('"')[1] for line in f if line.startswith("name = ")}
    assert "tokio" in names
    assert "parking_lot" not in names and "parking_lot_core" not in names


# The child reads its own THP_enabled (/proc/self/status) before ferry is imported and
# after a transfer; the file is read with nothing but builtins, so the first reading is
# taken before anything of ferry's is loaded.
_THP_CHILD = """
import sys
def thp():
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("THP_enabled:"))
before = thp()
import ferry
url, access, secret, obj = sys.argv[1:5]
c = ferry.Client(url, credentials={"access_key_id": access, "secret_access_key": secret}, region="us-east-1")
c.put(obj, b"x" * (8 << 20))
assert len(c.get(obj)) == 8 << 20
print(before, thp())
"""


def _reports_thp() -> bool:
    try:
        with open("/proc/self/status") as f:
            return any(line.startswith("THP_enabled:") for line in f)
    except OSError:
        return False


@pytest.mark.skipif(not _reports_thp(), reason="needs Linux 5.0+'s THP_enabled in /proc/self/status")
def test_the_allocator_leaves_the_process_huge_page_setting_alone(server, bucket):
    # The extension's allocator (mimalloc, alloc.rs) turns huge pages off for its own
    # heaps only: the host process keeps its THP setting through import, a client and a
    # transfer (mimalloc's environment option would have disabled it process-wide).
    import subprocess
    import sys

    creds = server.credentials
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    args = [server.url, creds["access_key_id"], creds["secret_access_key"], f"s3://{bucket}/thp"]
    out = subprocess.run([sys.executable, "-c", _THP_CHILD, *args], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split()
    assert after == before, f"THP_enabled went from {before} to {after}"


def test_get_many_releases_the_gil(server, bucket):
    # Every first byte takes ~300 ms: get_many of 4 objects, one at a time, blocks the caller that long.
    with FerryServer(flags=["--ttfb-p50", "300ms"]) as slow:
        c = slow.client()
        c.create_bucket(bucket)
        urls = [f"s3://{bucket}/gil/{i}" for i in range(4)]
        for u in urls:
            c.put(u, b"x" * 1000)
        counts = {"n": 0}
        stop = threading.Event()

        def count():
            while not stop.is_set():
                counts["n"] += 1

        t = threading.Thread(target=count)
        t.start()
        try:
            time.sleep(0.05)
            before = counts["n"]
            started = time.monotonic()
            got = c.get_many(urls, concurrency=1)
            took = time.monotonic() - started
            during = counts["n"] - before
        finally:
            stop.set()
            t.join()
        assert [bytes(g) for g in got] == [b"x" * 1000] * 4
        assert took > 0.5, took
        # A thread spinning in pure Python counts millions of times a second when it has
        # the GIL; with the GIL held by get_many it would count (almost) nothing.
        assert during > 100_000, (during, took)


def test_missing_key_is_not_found(client, bucket):
    with pytest.raises(ferry.NotFound) as e:
        client.get(f"s3://{bucket}/no-such-key")
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ferry.Error)
    assert e.value.code == "NoSuchKey" and e.value.status == 404 and e.value.request_id
    with pytest.raises(FileNotFoundError):
        client.head(f"s3://{bucket}/no-such-key")
    with pytest.raises(ferry.NotFound):
        client.get("s3://no-such-bucket-here/k")


def test_wrong_secret_is_auth(server, bucket):
    bad = server.client(credentials={"access_key_id": "ferry", "secret_access_key": "wrong"})
    with pytest.raises(ferry.Auth) as e:
        bad.get(f"s3://{bucket}/k")
    assert isinstance(e.value, PermissionError)
    assert e.value.code == "SignatureDoesNotMatch" and e.value.status == 403 and e.value.request_id
    with pytest.raises(PermissionError):
        bad.put(f"s3://{bucket}/k", b"x")


@pytest.mark.parametrize("url", ["bucket/key", "/local/path", "ftp://h/x", "s3://", "s3://bad bucket/k", "s3://b*/k", ""])
def test_bad_urls_are_value_errors(client, url):
    with pytest.raises(ValueError):
        client.get(url)


def test_a_bucket_url_is_not_an_object(client, bucket):
    with pytest.raises(ValueError):
        client.get(f"s3://{bucket}")


def test_connection_refused_is_transport():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = ferry.Client(f"http://127.0.0.1:{port}", credentials=("a", "b"), region="us-east-1")
    with pytest.raises(ferry.Transport) as e:
        c.get("s3://b/k")
    assert isinstance(e.value, ConnectionError)


def test_bad_settings():
    with pytest.raises(ValueError):
        ferry.Client("http://127.0.0.1:1", transport="carrier-pigeon")
    with pytest.raises(ferry.ConfigError):
        ferry.Client("not a url")
    with pytest.raises(ValueError):
        ferry.Client("http://127.0.0.1:1", credentials={"access_key_id": "only"})


def test_endpoint_from_the_environment(server, bucket, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", server.credentials["access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", server.credentials["secret_access_key"])
    c = ferry.Client()
    assert c.endpoint_url == server.url
    c.put(f"s3://{bucket}/env", b"env")
    assert bytes(c.get(f"s3://{bucket}/env")) == b"env"


def test_endpoint_from_a_profile(server, bucket, tmp_path, monkeypatch):
    config, creds = tmp_path / "config", tmp_path / "credentials"
    config.write_text(f"[profile lab]\nendpoint_url = {server.url}\nregion = us-east-1\n")
    creds.write_text("[lab]\naws_access_key_id = ferry\naws_secret_access_key = ferry-secret\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    c = ferry.Client(profile="lab")
    assert c.endpoint_url == server.url
    c.put(f"s3://{bucket}/prof", b"prof")
    assert bytes(c.get(f"s3://{bucket}/prof")) == b"prof"


def test_throttled_after_retries():
    with FerryServer(flags=["--fault-503-rate", "1.0"]) as srv:
        c = srv.client()
        with pytest.raises(ferry.Throttled) as e:
            c.get("s3://bucket/k")
        assert e.value.status == 503


def test_transports(server, bucket):
    for transport in ("auto", "h1-pool", "h1-pipeline", "h2"):
        c = server.client(transport=transport)
        c.put(f"s3://{bucket}/t-{transport}", transport.encode() * 1000)
        assert bytes(c.get(f"s3://{bucket}/t-{transport}")) == transport.encode() * 1000


def test_ctrl_c_interrupts_a_blocked_call():
    import signal

    # Every first byte takes 30 s, so the GET (of the server's synthetic bucket: no
    # request before it pays the delay) is still waiting whenever SIGINT arrives; the
    # call must end soon after the signal is sent.
    with FerryServer(flags=["--ttfb-p50", "30s", "--ttfb-p99", "30s"]) as slow:
        c = slow.client()
        main = threading.main_thread().ident
        sent = []

        def interrupt():
            sent.append(time.monotonic())
            signal.pthread_kill(main, signal.SIGINT)

        # Python's own handler, whatever this process inherited: a shell without job
        # control starts a background job with SIGINT ignored, and Python then keeps
        # ignoring it.
        before = signal.signal(signal.SIGINT, signal.default_int_handler)
        timer = threading.Timer(0.5, interrupt)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                c.get("s3://synthetic/1KiB/x")
            ended = time.monotonic()
        finally:
            timer.join()
            signal.signal(signal.SIGINT, before)
        assert sent, "the timer never sent SIGINT"
        assert ended - sent[0] < 2.0, ended - sent[0]


def test_threads_share_a_client(client, bucket):
    from concurrent.futures import ThreadPoolExecutor

    blobs = {f"s3://{bucket}/thr/{i}": os.urandom(1000 + i) for i in range(64)}

    def roundtrip(item):
        url, data = item
        client.put(url, data)
        return bytes(client.get(url)) == data

    with ThreadPoolExecutor(16) as ex:
        assert all(ex.map(roundtrip, blobs.items()))


def test_iterators_do_not_cross_fork(client, bucket):
    client.put(f"s3://{bucket}/it/a", b"a")
    it = client.list(f"s3://{bucket}/it/", recursive=True)
    gets = client.iter_get([f"s3://{bucket}/it/a"])
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            answers = []
            for iterator in (it, gets):
                try:
                    next(iterator)
                    answers.append(b"N")
                except RuntimeError:
                    answers.append(b"R")
            os.write(w, b"".join(answers))
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    os.waitpid(pid, 0)
    assert got == b"RR"
    # In the parent they still work.
    assert next(it).key == "it/a"
    assert bytes(next(gets)) == b"a"
