"""Where a fresh process's `get_many` time goes: each repeat is a new Python process
that imports ferry, builds a `Client(max_connections=32)` and calls `get_many(urls,
sizes=...)` twice on it (the first call pays the connects and auto's start; the second
runs on warm connections), against `ferry serve --profile s3` holding 16 KiB objects.

    FERRY_BIN=target/release/ferry .venv/bin/python bench/py_get_many_phases.py [--objects 256,2048] [--repeats 3] \
        [--obstore-python .ferry-run/bench-venv/bin/python]

With `--obstore-python`, obstore's row runs beside it in the same repeats, in that
Python, as the lab's driver runs it: `asyncio.gather` of `obstore.get_async(...).bytes_async()`,
32 in flight, a fresh `S3Store` per process, the same two calls.

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


def child_obstore(endpoint: str, n: int) -> None:
    import asyncio

    t0 = time.perf_counter()
    import obstore
    from obstore.store import S3Store

    t1 = time.perf_counter()
    store = S3Store("bench", endpoint=endpoint, region="us-east-1", access_key_id="ferry",
                    secret_access_key="ferry-secret", client_options={"allow_http": True})
    t2 = time.perf_counter()
    keys = [f"o{i:05}" for i in range(n)]

    async def batch():
        sem = asyncio.Semaphore(32)

        async def one(k):
            async with sem:
                r = await obstore.get_async(store, k)
                return len(memoryview(await r.bytes_async()))

        return await asyncio.gather(*(one(k) for k in keys))

    got = asyncio.run(batch())
    t3 = time.perf_counter()
    again = asyncio.run(batch())
    t4 = time.perf_counter()
    if any(x != SIZE for x in [*got, *again]):
        raise SystemExit("a body of the wrong length")
    print(json.dumps({"import_s": t1 - t0, "client_s": t2 - t1, "first_s": t3 - t2, "second_s": t4 - t3}))


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
    ap.add_argument("--obstore-python", help="run obstore's row too, in this Python")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--peer", default="ferry", help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        (child_obstore if a.peer == "obstore" else child)(a.endpoint, a.child)
        return
    from ferry.testing import FerryServer

    counts = [int(x) for x in a.objects.split(",")]
    with FerryServer(["--profile", "s3"]) as srv:
        setup = srv.client()
        setup.create_bucket("bench")
        for i in range(max(counts)):
            setup.put(f"s3://bench/o{i:05}", b"x" * SIZE)
        peers = {"ferry": sys.executable}
        if a.obstore_python:
            peers["obstore"] = a.obstore_python
        rows: dict[tuple[str, int], list[dict]] = {(p, n): [] for p in peers for n in counts}
        for rep in range(a.repeats):
            for n in counts:
                for peer, py in peers.items():
                    out = subprocess.run([py, __file__, "--child", str(n), "--peer", peer, "--endpoint", srv.url],
                                         capture_output=True, text=True, timeout=300)
                    if out.returncode:
                        raise SystemExit(out.stderr[-2000:])
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    rows[(peer, n)].append(r)
                    print(rep + 1, peer, n, {k: round(v, 3) for k, v in r.items()}, flush=True)
    print("\n| reader | objects | import s | client s | first call s (objects/s) | second call s (objects/s) |")
    print("|---|---|---|---|---|---|")
    for (peer, n), got in rows.items():
        med = {k: statistics.median(r[k] for r in got) for k in got[0]}
        print(f"| {peer} | {n} | {med['import_s']:.3f} | {med['client_s']:.4f} | {med['first_s']:.3f} "
              f"({n / med['first_s']:.0f}) | {med['second_s']:.3f} ({n / med['second_s']:.0f}) |")


if __name__ == "__main__":
    main()
