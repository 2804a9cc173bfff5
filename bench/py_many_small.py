"""Many small objects, ferry-py's `get_many` beside obstore's idiomatic loop, outside the
bench's peer driver: one process per row, the rows alternated, against any S3 endpoint
that already holds the objects (`--put` writes them first).

    .venv/bin/python bench/py_many_small.py ferry-sizes URL N REPEATS [--put]
    .ferry-run/bench-venv/bin/python bench/py_many_small.py obstore URL N REPEATS

Rows: `obstore` (get_async per object under asyncio.Semaphore(32), body streamed, the
store built before the clock), `ferry-sizes` (get_many with each object's size, as after
a listing), `ferry-async` (get_many_async the way the peer driver calls it),
`ferry-conc` (get_many with concurrency=32, no sizes). Each ferry repeat builds a fresh
Client of 32 connections before its clock. Keys: `bench/pNN/oNNNNNN`, 16 KiB each;
credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY. Every body's length is
checked. Prints each repeat's milliseconds and the median objects/s. Figures:
docs/lab/python-rows.md, "small-objects against MinIO, outside the driver"."""

from __future__ import annotations

import asyncio
import os
import sys
import time

SIZE = 16 * 1024
CONNECTIONS = 32


def main() -> None:
    which, endpoint, n, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    keys = [f"p{i % 16:02}/o{i:06}" for i in range(n)]
    creds = dict(access_key_id=os.environ["AWS_ACCESS_KEY_ID"], secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
    times = []
    if which == "obstore":
        import obstore
        from obstore.store import S3Store

        store = S3Store("bench", endpoint=endpoint, region="us-east-1", virtual_hosted_style_request=False,
                        client_options={"allow_http": True}, **creds)

        async def run():
            sem = asyncio.Semaphore(CONNECTIONS)

            async def one(k):
                async with sem:
                    r = await obstore.get_async(store, k)
                    got = 0
                    async for c in r.stream(min_chunk_size=1 << 20):
                        got += len(memoryview(c))
                    return got

            return await asyncio.gather(*(one(k) for k in keys))

        for _ in range(reps):
            t = time.monotonic()
            got = asyncio.run(run())
            times.append(time.monotonic() - t)
            assert sum(got) == n * SIZE, "short bodies"
    else:
        import ferry

        urls = [f"s3://bench/{k}" for k in keys]
        if "--put" in sys.argv:
            c = ferry.Client(endpoint_url=endpoint, region="us-east-1", credentials=creds)
            try:
                c.create_bucket("bench")
            except ferry.Error:
                pass  # it exists
            for u in urls:
                c.put(u, b"x" * SIZE)
        for _ in range(reps):
            c = ferry.Client(endpoint_url=endpoint, region="us-east-1", credentials=creds, max_connections=CONNECTIONS)
            t = time.monotonic()
            if which == "ferry-sizes":
                got = c.get_many(urls, sizes=[SIZE] * n)
            elif which == "ferry-async":
                async def run():
                    return await asyncio.wait_for(c.get_many_async(urls, return_exceptions=True, sizes=[SIZE] * n), 60)

                got = asyncio.run(run())
            elif which == "ferry-conc":
                got = c.get_many(urls, concurrency=CONNECTIONS)
            else:
                raise SystemExit(f"unknown row {which!r}: obstore, ferry-sizes, ferry-async or ferry-conc")
            times.append(time.monotonic() - t)
            assert sum(len(g) for g in got) == n * SIZE, "short bodies"
    median = sorted(times)[len(times) // 2]
    print(which, n, " ".join(f"{x * 1000:.0f}" for x in times), f"ms; objects/s median {n / median:.0f}")


if __name__ == "__main__":
    main()
