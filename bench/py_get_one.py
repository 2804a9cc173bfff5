"""`Client.get` of one synthetic object, a few times in one fresh process: a fresh
`ferry serve --synthetic-bucket` (lan profile), `client.get` N times; each line gives
GB/s, CPU s/GiB (user and system) and the peak RSS. The first get of a process is the
common case (a fresh buffer, every page faulted in); later ones show a warm allocator.

    FERRY_BIN=target/release/ferry .venv/bin/python bench/py_get_one.py [1GiB|256MiB] [N]

Figures: docs/lab/python-rows.md, "get of one large object"."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))

from ferry.testing import FerryServer  # noqa: E402

SIZES = {"1GiB": 1 << 30, "256MiB": 256 << 20}


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "1GiB"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    nbytes = SIZES[size]
    with FerryServer(["--synthetic-bucket", "synthetic", "--anonymous"]) as srv:
        client = srv.client(credentials="anonymous")
        for _ in range(n):
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            buf = client.get(f"s3://synthetic/{size}/x")
            dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
            if len(buf) != nbytes:
                raise SystemExit(f"{len(buf)} bytes, expected {nbytes}")
            user, sys_ = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
            gib = nbytes / (1 << 30)
            print(f"{nbytes / dt / 1e9:.2f} GB/s  CPU {(user + sys_) / gib:.2f} s/GiB (user {user:.2f}, "
                  f"system {sys_:.2f})  peak RSS {r1.ru_maxrss / 1024:.0f} MiB", flush=True)
            del buf


if __name__ == "__main__":
    main()
