"""Fixtures for the Python package's tests: `ferry.testing`'s server, run from this
checkout's release build (tests/conftest.py above has already cleared the AWS_*
environment, so nothing of the host's configuration leaks in)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))

# Not importorskip: scripts/setup.sh installs the package, so its absence is a failure.
import ferry  # noqa: E402,F401
from ferry.testing import FerryServer  # noqa: E402

_names = itertools.count(1)


@pytest.fixture(scope="session")
def server():
    with FerryServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def client(server):
    return server.client()


@pytest.fixture
def bucket(client):
    name = f"py-{os.getpid()}-{next(_names)}"
    client.create_bucket(name)
    return name
