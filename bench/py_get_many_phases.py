"""Where a fresh process's `get_many` time goes: each repeat is a new Python process
that imports ferry, builds a `Client(max_connections=32)` and calls `get_many(urls,
sizes=...)` twice on it (the first call pays the connects and auto's start; the second
runs on warm connections), against `ferry serve --profile s3` holding 16 KiB objects.

    FERRY_BIN=target/release/ferry .venv/bin/python bench/py_get_many_phases.py [--objects 256,2048] [--repeats 3]

Per repeat and object count: seconds in `import ferry`, in `Client(...)`, in the first
`get_many` and in the second, and the objects/s of each call. Figures:
docs/lab/python-rows.md, "get_many past its start"."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))
SIZE = 16 * 1024


def child(endpoint: str, n: int) -> None:
    t0 = time.perf_counter()
    import ferry

    t1 = time.perf_counter()
    client = ferry.Client(endpoint, credentials={"access_key_id": "ferry", "secret_access_key": "ferry-secret"},
                          region="us-east-1", max_connections=32)
    t2 = time.perf_counter()
    urls = [f"s3://bench/o{i:05}" for i in range(n)]
    got = client.get_many(urls, sizes=[SIZE] * n)
    t3 = time.perf_counter()
    again = client.get_many(urls, sizes=[SIZE] * n)
    t4 = time.perf_counter()
    if any(len(b) != SIZE for b in [*got, *again]):
        raise SystemExit("a body of the wrong length")
    print(json.dumps({"import_s": t1 - t0, "client_s": t2 - t1, "first_s": t3 - t2, "second_s": t4 - t3}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", default="256,2048")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.endpoint, a.child)
        return
    from ferry.testing import FerryServer

    counts = [int(x) for x in a.objects.split(",")]
    with FerryServer(["--profile", "s3"]) as srv:
        setup = srv.client()
        setup.create_bucket("bench")
        for i in range(max(counts)):
            setup.put(f"s3://bench/o{i:05}", b"x" * SIZE)
        rows: dict[int, list[dict]] = {n: [] for n in counts}
        for rep in range(a.repeats):
            for n in counts:
                out = subprocess.run([sys.executable, __file__, "--child", str(n), "--endpoint", srv.url],
                                     capture_output=True, text=True, timeout=300)
                if out.returncode:
                    raise SystemExit(out.stderr[-2000:])
                r = json.loads(out.stdout.strip().splitlines()[-1])
                rows[n].append(r)
                print(rep + 1, n, {k: round(v, 3) for k, v in r.items()}, flush=True)
    print("\n| objects | import s | Client() s | first get_many s (objects/s) | second get_many s (objects/s) |")
    print("|---|---|---|---|---|")
    for n in counts:
        med = {k: statistics.median(r[k] for r in rows[n]) for k in rows[n][0]}
        print(f"| {n} | {med['import_s']:.3f} | {med['client_s']:.4f} | {med['first_s']:.3f} ({n / med['first_s']:.0f}) | "
              f"{med['second_s']:.3f} ({n / med['second_s']:.0f}) |")


if __name__ == "__main__":
    main()
