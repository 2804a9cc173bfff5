"""What the tests against third-party servers share (MinIO, fake-gcs-server, Azurite):
finding the server's binary, a free port for it, and waiting until it answers.

A binary is the one its environment variable names (scripts/test.sh sets FERRY_MINIO,
FERRY_FAKE_GCS, FERRY_AZURITE), else the one scripts/setup.sh built or installed and
named in a file under .ferry-run/; None when neither runs, and the caller's fixture
reports its tests skipped with that reason."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]


def binary(env_var: str, named_in: str) -> str | None:
    """The server's executable: `$env_var`, else the path in `.ferry-run/<named_in>`."""
    path = os.environ.get(env_var)
    if not path:
        named = ROOT / ".ferry-run" / named_in
        path = named.read_text().strip() if named.exists() else None
    return path if path and os.access(path, os.X_OK) else None


def free_port() -> int:
    """A loopback port nothing listens on now (other sessions' servers run beside ours)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen, what: str, seconds: float,
               poll: float = 0.2) -> None:
    """Returns once `ready()` is true; raises RuntimeError if `proc` exits first or
    `seconds` pass (with its stderr's tail when it was piped)."""
    deadline = time.monotonic() + seconds
    while not ready():
        if proc.poll() is not None:
            tail = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(f"{what} exited with status {proc.returncode} before it was ready: {tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} was not ready after {seconds:.0f} s")
        time.sleep(poll)
