"""get_many's start, side by side in one process: a fresh ferry.Client per call, 256
objects of 16 KiB from `ferry serve --profile s3`, each call form in turn, 3 repeats.

    .venv/bin/python bench/py_get_many_start.py

Forms: URLs only, URLs with sizes, a listing's entries (the listing inside the clock),
and 128 in flight on a 32-connection client. Figures: docs/lab/python-rows.md, "get_many's
start". Every body's length is checked; a wrong one stops the run."""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))

from ferry.testing import FerryServer  # noqa: E402

OBJECTS, SIZE = 256, 16 * 1024


def main() -> None:
    with FerryServer(["--profile", "s3"]) as srv:
        setup = srv.client()
        setup.create_bucket("bench")
        urls = [f"s3://bench/p{i % 16:02}/o{i:04}" for i in range(OBJECTS)]
        for u in urls:
            setup.put(u, b"x" * SIZE)
        sizes = [SIZE] * OBJECTS
        forms = {
            "urls, concurrency=32": lambda c: c.get_many(urls, concurrency=32),
            "sizes, concurrency=32": lambda c: c.get_many(urls, concurrency=32, sizes=sizes),
            "entries of list(), concurrency=32": lambda c: c.get_many(list(c.list("s3://bench/", recursive=True)), concurrency=32),
            "sizes, concurrency=128, max_connections=32": lambda c: c.get_many(urls, concurrency=128, sizes=sizes),
        }
        for rep in range(3):
            row = []
            for name, call in forms.items():
                client = srv.client(max_connections=32) if "max_connections" in name else srv.client()
                t0 = time.perf_counter()
                got = call(client)
                dt = time.perf_counter() - t0
                if len(got) != OBJECTS or any(len(b) != SIZE for b in got):
                    raise SystemExit(f"{name}: wrong bodies")
                row.append(f"{name}: {OBJECTS / dt:.0f}/s")
            print(rep + 1, " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
