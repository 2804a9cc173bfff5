"""The `ferry` command that `pip install` puts beside the interpreter (the console
script `ferry._cli:main`, running the command line in-process), run as a user would
run it, against a real `ferry serve`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ferry
from ferry.testing import FerryServer

# Not shutil.which: the script of *this* environment, where the package is installed.
FERRY = Path(sys.executable).parent / "ferry"
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(FERRY), *args], capture_output=True, text=True, env=env, timeout=timeout)


def env_for(server) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    e.update(
        AWS_ENDPOINT_URL=server.url,
        AWS_ACCESS_KEY_ID=server.credentials["access_key_id"],
        AWS_SECRET_ACCESS_KEY=server.credentials["secret_access_key"],
        AWS_REGION="us-east-1",
    )
    return e


def test_the_script_is_the_packages_entry_point():
    text = FERRY.read_text()
    assert text.startswith("#!") and "python" in text.splitlines()[0]
    assert "ferry._cli" in text


def test_version_matches_the_package_and_the_binary():
    r = run("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"ferry {ferry.__version__}"
    binary = subprocess.run([os.environ["FERRY_BIN"], "--version"], capture_output=True, text=True)
    assert r.stdout == binary.stdout


def test_ls_cp_cat_against_a_server(server, client, bucket, tmp_path):
    client.put(f"s3://{bucket}/dir/a.txt", b"alpha")
    client.put(f"s3://{bucket}/dir/b.txt", b"bravo!")
    env = env_for(server)
    r = run("ls", f"s3://{bucket}/dir/", env=env)
    assert r.returncode == 0, r.stderr
    assert "a.txt" in r.stdout and "b.txt" in r.stdout

    local = tmp_path / "up.bin"
    local.write_bytes(b"x" * 5000)
    r = run("cp", str(local), f"s3://{bucket}/up/", env=env)
    assert r.returncode == 0, r.stderr
    assert client.get(f"s3://{bucket}/up/up.bin") == b"x" * 5000

    r = run("cat", f"s3://{bucket}/dir/b.txt", env=env)
    assert (r.returncode, r.stdout) == (0, "bravo!")


def test_exit_codes(server, bucket):
    env = env_for(server)
    r = run("cat", f"s3://{bucket}/missing", env=env)
    assert r.returncode == 1 and "missing" in r.stderr
    r = run("ls", "--no-such-flag", env=env)
    assert r.returncode == 2 and "--no-such-flag" in r.stderr
    r = run("--help")
    assert r.returncode == 0 and "Usage" in r.stdout


def test_serve_from_the_script(bucket):
    # The script runs `ferry serve` in-process; a client talks to it, and SIGINT (its
    # own handler: a graceful stop) ends it.
    with FerryServer(binary=str(FERRY)) as srv:
        c = srv.client()
        c.create_bucket(bucket)
        c.put(f"s3://{bucket}/k", b"served by the console script")
        assert c.get(f"s3://{bucket}/k") == b"served by the console script"
        srv.proc.send_signal(signal.SIGINT)
        assert srv.proc.wait(10) == 0


def test_ctrl_c_stops_a_blocked_command(bucket):
    # First bytes take 6 s; SIGINT after 1 s ends `ferry cat` at once, as it ends the
    # binary, instead of becoming a KeyboardInterrupt no Python code sees until the
    # command has finished.
    with FerryServer(flags=["--ttfb-p50", "6s", "--ttfb-p99", "6s"]) as slow:
        c = slow.client()
        c.create_bucket(bucket)
        c.put(f"s3://{bucket}/slow", b"x")
        p = subprocess.Popen([str(FERRY), "cat", f"s3://{bucket}/slow"], env=env_for(slow),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc = p.wait(10)
        assert time.monotonic() - t0 < 3.0
        assert rc == -signal.SIGINT
        assert p.stdout.read() == b""


def test_main_in_process_returns_the_exit_code(capfd):
    from ferry._cli import main

    assert main(["ferry", "--version"]) == 0
    assert capfd.readouterr().out.strip() == f"ferry {ferry.__version__}"
    assert main(["ferry", "no-such-verb"]) == 2


@pytest.mark.parametrize("verb", ["cp", "sync", "ls", "rm", "serve", "bench"])
def test_every_verb_is_there(verb):
    r = run(verb, "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage: ferry " + verb in r.stdout
