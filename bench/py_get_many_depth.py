"""get_many's depth, side by side in one process: 96 objects of 2 KiB from `ferry serve`
answering each GET after 40 ms, a fresh `ferry.Client(max_connections=4)` per call, the
objects' sizes given; `concurrency=4` (one object per connection, what admission allowed
before small GETs shared places) against the default, alternated over 3 repeats. Prints
each call's wall time and the server's most requests in progress at once during it.

    FERRY_BIN=target/release/ferry .venv/bin/python bench/py_get_many_depth.py

Figures: docs/lab/python-rows.md, "get_many: small GETs share places". Every body's
length is checked; a wrong one stops the run."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))

from ferry.testing import FerryServer  # noqa: E402

OBJECTS, SIZE, CONNS = 96, 2048, 4


def peak(url: str) -> int:
    text = urllib.request.urlopen(f"{url}/_ferry/metrics", timeout=10).read().decode()
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("ferry_requests_in_progress_peak "))


def main() -> None:
    # One server per form, so each peak is that form's own.
    forms = {"concurrency=4": {"concurrency": CONNS}, "default": {}}
    servers = {name: FerryServer(["--ttfb-p50", "40ms", "--ttfb-p99", "40ms"]).start() for name in forms}
    try:
        urls = [f"s3://depth/o{i:03}" for i in range(OBJECTS)]
        for srv in servers.values():
            setup = srv.client()
            setup.create_bucket("depth")
            for u in urls:
                setup.put(u, b"x" * SIZE)
        for rep in range(3):
            row = []
            for name, kw in forms.items():
                srv = servers[name]
                client = srv.client(max_connections=CONNS)
                t0 = time.perf_counter()
                got = client.get_many(urls, sizes=[SIZE] * OBJECTS, **kw)
                dt = time.perf_counter() - t0
                if len(got) != OBJECTS or any(len(b) != SIZE for b in got):
                    raise SystemExit(f"{name}: wrong bodies")
                row.append(f"{name}: {dt:.3f} s, peak in progress {peak(srv.url)}")
            print(rep + 1, " | ".join(row), flush=True)
    finally:
        for srv in servers.values():
            srv.stop()


if __name__ == "__main__":
    main()
