"""Peak memory of ferry's Python client over a download far larger than memory should
need: `iter_get` and `get_many` over ~10 GiB of synthetic objects from `ferry serve`.

    .venv/bin/python bench/py_rss_check.py [--total 10GiB] [--object 64MiB] [--batch 4] [--json]

```text
ferry serve --memory --synthetic-bucket synthetic (lan profile; ferry.testing starts it,
    $FERRY_BIN or `ferry` on PATH) ─► objects synthetic/rss/size=N/obj-i, never stored
each mode in a child process of its own (its ru_maxrss starts from the imports):
    iter_get   every object in order, each buffer's length checked and dropped
    get_many   batches of --batch objects, each batch dropped before the next
─► per mode: GiB, seconds, MB/s, RSS after the client was built, peak RSS (ru_maxrss)
```

The promise (README, Python): `iter_get` holds a bounded read-ahead whatever the total;
`get_many` returns its batch whole, so its peak is about one batch, never the total. A
figure of the run goes into docs/lab/python-rows.md; the test suite checks a 1 GiB
`iter_get` against a bound (tests/python/test_py_rss.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(s: str) -> int:
    for u, m in UNITS.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)


def rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(mode: str, url: str, object_bytes: int, count: int, batch: int) -> dict:
    """One mode in this (fresh) process."""
    import ferry

    client = ferry.Client(url, credentials={"access_key_id": "ferry", "secret_access_key": "ferry-secret"})
    urls = [f"s3://synthetic/rss/size={object_bytes}/obj-{i}" for i in range(count)]
    client.head(urls[0])  # runtime and first connection up before the baseline
    base = rss_now()
    t0 = time.monotonic()
    total = 0
    if mode == "iter_get":
        for buf in client.iter_get(urls):
            if len(buf) != object_bytes:
                raise SystemExit(f"an object of {len(buf)} bytes, expected {object_bytes}")
            total += len(buf)
            del buf
    else:
        for i in range(0, count, batch):
            bufs = client.get_many(urls[i:i + batch])
            total += sum(len(b) for b in bufs)
            del bufs
    wall = time.monotonic() - t0
    if total != object_bytes * count:
        raise SystemExit(f"{total} bytes, expected {object_bytes * count}")
    return {"mode": mode, "bytes": total, "wall_s": wall, "rss_after_client_bytes": base,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "objects": count, "object_bytes": object_bytes, "batch": batch if mode == "get_many" else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", default="10GiB")
    ap.add_argument("--object", default="64MiB")
    ap.add_argument("--batch", type=int, default=4, help="get_many: objects per call")
    ap.add_argument("--modes", default="iter_get,get_many")
    ap.add_argument("--json", action="store_true", help="one JSON line per mode instead of a table")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    a = ap.parse_args()
    object_bytes = parse_size(a.object)
    count = max(1, parse_size(a.total) // object_bytes)
    if a.child:
        print(json.dumps(child(a.child, a.url, object_bytes, count, a.batch)))
        return 0
    from ferry.testing import FerryServer

    rows = []
    with FerryServer(flags=["--synthetic-bucket", "synthetic"]) as srv:
        for mode in a.modes.split(","):
            p = subprocess.run([sys.executable, __file__, "--child", mode, "--url", srv.url, "--total", a.total,
                                "--object", a.object, "--batch", str(a.batch)], capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr, file=sys.stderr)
                raise SystemExit(f"py_rss_check: {mode} failed (exit {p.returncode})")
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
    if a.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(f"{count} objects of {object_bytes >> 20} MiB ({count * object_bytes / (1 << 30):.1f} GiB), ferry serve --synthetic-bucket, lan profile\n")
    print("| mode | GiB | s | MB/s | RSS after client MB | peak RSS MB |\n|---|---|---|---|---|---|")
    for r in rows:
        label = r["mode"] + (f" (batches of {r['batch']})" if r["batch"] else "")
        print(f"| {label} | {r['bytes'] / (1 << 30):.1f} | {r['wall_s']:.1f} | {r['bytes'] / r['wall_s'] / 1e6:.0f} | "
              f"{r['rss_after_client_bytes'] / 1e6:.0f} | {r['peak_rss_bytes'] / 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
