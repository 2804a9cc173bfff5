"""scripts/bench-providers.py's argument handling (the lab run itself is not part of the
test suite: docs/lab/providers-speed.md). Each bad argument stops it before it starts an
emulator or writes a file, with exit status 2 and a message naming what is wrong.

`/bin/true` stands in for the binaries here: only their presence is checked before a run.
"""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT

SCRIPT = ROOT / "scripts" / "bench-providers.py"
OK = ["--ferry", "/bin/true", "--fake-gcs", "/bin/true", "--azurite", "/bin/true",
      "--rclone", "/bin/true", "--azcopy", "/bin/true"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_valid_arguments_pass_the_check():
    r = run(*OK, "--check-args", "--targets", "gcs-http,azurite", "--sets", "small", "--repeats", "5")
    assert r.returncode == 0, r.stderr
    r = run(*OK, "--check-args", "--quick")
    assert r.returncode == 0, r.stderr


def test_unknown_names_are_refused_with_the_known_ones():
    for flag, value, known in [("--targets", "gcs-http,s3", "gcs-http, gcs-h2, azurite"),
                               ("--tools", "ferry,s5cmd", "ferry, rclone, azcopy"),
                               ("--sets", "tiny", "small, large"),
                               ("--directions", "sideways", "upload, download")]:
        r = run(*OK, "--check-args", flag, value)
        assert r.returncode == 2, (flag, r.stderr)
        assert f"(known: {known})" in r.stderr, r.stderr


def test_a_target_without_its_emulator_names_what_installs_it():
    r = run("--ferry", "/bin/true", "--rclone", "/bin/true", "--check-args", "--targets", "azurite",
            "--tools", "ferry,rclone")
    assert r.returncode == 2
    assert "target azurite needs --azurite" in r.stderr and "scripts/setup.sh" in r.stderr, r.stderr


def test_a_missing_peer_names_bench_setup_and_ferry_is_required():
    r = run("--ferry", "/bin/true", "--azurite", "/bin/true", "--rclone", "/bin/true", "--check-args",
            "--targets", "azurite", "--azcopy", "/nonexistent/azcopy")
    assert r.returncode == 2
    assert "tool azcopy is not installed" in r.stderr and "scripts/bench-setup.sh" in r.stderr, r.stderr
    r = run(*OK, "--check-args", "--tools", "rclone")
    assert r.returncode == 2 and "must include ferry" in r.stderr, r.stderr
    r = run(*OK, "--check-args", "--repeats", "0")
    assert r.returncode == 2 and "at least 1" in r.stderr, r.stderr
