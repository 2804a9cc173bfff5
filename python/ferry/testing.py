"""Test helpers: a real `ferry serve` for your tests, in memory, on a free port.

As a context manager::

    from ferry.testing import FerryServer
    with FerryServer() as srv:
        client = srv.client()
        client.create_bucket("b")

As a pytest fixture (registered by installing ferry): ``ferry_server`` starts one
server for the test session and yields it; ``srv.url`` is its endpoint,
``srv.client()`` a `ferry.Client` for it, ``srv.credentials`` its keys.

The `ferry` binary is `$FERRY_BIN`, else `ferry` on PATH. Extra flags
(``--profile s3``, ``--fault-503-rate 0.1``) go to `FerryServer(flags=[...])`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from typing import Iterator, Sequence

import pytest

#: The keys the server is started with (its development defaults).
ACCESS_KEY = "ferry"
SECRET_KEY = "ferry-secret"
_LISTENING = re.compile(r"listening on (https?://\S+)")


def ferry_binary() -> str:
    """`$FERRY_BIN`, else `ferry` on PATH."""
    path = os.environ.get("FERRY_BIN") or shutil.which("ferry")
    if not path:
        raise FileNotFoundError("the ferry binary was not found: set FERRY_BIN or put `ferry` on PATH")
    return path


class FerryServer:
    """`ferry serve --memory` on 127.0.0.1, a free port; stopped on `stop()` / exit."""

    def __init__(self, flags: Sequence[str] = (), binary: str | None = None, timeout: float = 30.0):
        self.flags = list(flags)
        self.binary = binary or ferry_binary()
        self.timeout = timeout
        self.url: str | None = None
        self.proc: subprocess.Popen | None = None
        self._lines: list[str] = []

    @property
    def credentials(self) -> dict:
        return {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY}

    def start(self) -> "FerryServer":
        args = [self.binary, "serve", "--addr", "127.0.0.1:0", "--memory",
                "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY, *self.flags]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        found = threading.Event()

        def drain():
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self._lines.append(line)
                m = _LISTENING.search(line)
                if m and self.url is None:
                    self.url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(self.timeout) or self.url is None:
            self.stop()
            raise RuntimeError(f"ferry serve did not start: {''.join(self._lines)[-2000:]}")
        return self

    def client(self, **kwargs):
        """A `ferry.Client` for this server (keyword arguments go to `Client`)."""
        import ferry

        kwargs.setdefault("credentials", self.credentials)
        kwargs.setdefault("region", "us-east-1")
        return ferry.Client(self.url, **kwargs)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def output(self) -> str:
        return "".join(self._lines)

    def __enter__(self) -> "FerryServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"FerryServer({self.url!r})"


@pytest.fixture(scope="session")
def ferry_server() -> Iterator[FerryServer]:
    """One in-memory `ferry serve` for the session."""
    with FerryServer() as srv:
        yield srv


_counter = iter(range(1, 1 << 30))


@pytest.fixture
def ferry_bucket(ferry_server) -> str:
    """A fresh bucket on `ferry_server`; its name."""
    name = f"test-{os.getpid()}-{int(time.time())}-{next(_counter)}"
    ferry_server.client().create_bucket(name)
    return name
