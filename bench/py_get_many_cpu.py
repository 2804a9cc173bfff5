"""Client CPU per object of ferry-py's `get_many` over many small objects, against a
`ferry serve` on the lan profile (no emulated delay), where the client's own CPU is
what bounds the rate.

    .venv/bin/python bench/py_get_many_cpu.py [--objects 4096] [--size 16384] [--repeats 4]

```text
ferry serve --memory (ferry.testing; $FERRY_BIN or `ferry` on PATH)
  ─► --objects objects of --size bytes PUT once
  ─► per repeat: Client(max_connections=32).get_many(urls, sizes=...), the first and
     a middle body compared with what was PUT
  ─► objects/s, and this process's CPU (user + system, getrusage) per object
```

The server runs in a process of its own, so the CPU figure is the client's alone: the
extension's threads and the interpreter. The allocator and signing-key figures in
docs/lab/python-rows.md and docs/lab/proto-sigv4-cost.md were measured with it. To
compare two builds, swap the installed `_ferry*.so` between runs, alternated.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import ferry
from ferry.testing import FerryServer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=4096)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    n, size = args.objects, args.size
    data = os.urandom(size)
    with FerryServer() as srv:
        writer = srv.client()
        writer.create_bucket("cpu-bench")
        urls = [f"s3://cpu-bench/o/{i:06d}" for i in range(n)]
        for url in urls:
            writer.put(url, data)
        rates, cpus = [], []
        for _ in range(args.repeats):
            client = srv.client(max_connections=32)
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            bufs = client.get_many(urls, sizes=[size] * n)
            t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            if len(bufs) != n or bytes(bufs[0]) != data or bytes(bufs[n // 2]) != data:
                raise SystemExit("get_many returned the wrong bytes")
            del bufs
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            rates.append(n / (t1 - t0))
            cpus.append(cpu / n * 1e6)
            print(f"{rates[-1]:8.0f} objects/s  {cpus[-1]:6.1f} µs CPU/object")
        print(
            f"median: {statistics.median(rates):.0f} objects/s, "
            f"{statistics.median(cpus):.1f} µs CPU/object ({ferry.__version__})"
        )


if __name__ == "__main__":
    main()
