"""A process that reads through ferry:// and then exits, with reads still going: it must
end, at once and cleanly (exit status, no fatal error or C++ `terminate` on stderr).

pyarrow reads a `ferry://` file from its I/O threads, each blocked in a ferry call with
the GIL released; at exit pyarrow joins those threads, and a thread that tried to take
the GIL back once the interpreter was finalizing could never return (the process hung,
or with other pyo3 and CPython versions died in "terminate called without an active
exception"). ferry's atexit handler refuses calls, waits until pyarrow's thread pools are
idle and until no ferry call is blocked (ferry/_exit.py, crates/py/src/runtime.rs).
Each case is a child Python process against a server with S3's latency and per-connection
rate (`--profile s3`), so reads are in flight when it exits.

A pyarrow scan left half-read (`to_batches()` not drained) is the case that needs the
pools' drain: its read-ahead goes on calling into the file from pyarrow's threads after
a quiet time alone had ended. The loop that counts its clean exits over many runs is
this file run as a script: `.venv/bin/python tests/python/test_py_exit.py --loop 100`
(docs/lab/python-rows.md has its figures)."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ferry.testing import FerryServer

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

PREAMBLE = """
import sys, threading, time
import pandas
url, bucket = sys.argv[1], sys.argv[2]
opts = dict(endpoint_url=url, region="us-east-1",
            credentials={"access_key_id": "ferry", "secret_access_key": "ferry-secret"})
def read():
    return pandas.read_parquet(f"ferry://{bucket}/t", columns=["a", "c"], storage_options=opts)
"""

CASES = {
    # A thread still reading when the main thread ends: the exit waits for it, and its
    # listing calls are made while concurrent.futures refuses new work.
    "thread_still_reading": """
        threading.Thread(target=read).start()
        print("exiting", flush=True)
    """,
    # A daemon thread reading in a loop: the exit does not wait for it.
    "daemon_thread_reading": """
        def loop():
            try:
                while True:
                    read()
            except RuntimeError as e:  # ferry refuses calls once the exit began
                print(e, file=sys.stderr)
        threading.Thread(target=loop, daemon=True).start()
        time.sleep(0.5)
        print("exiting", flush=True)
    """,
    # A dataset scan read to its first batch and left: pyarrow's read-ahead is still
    # reading the files from its I/O threads when the interpreter exits.
    "scan_left_half_read": """
        import fsspec, ferry.fsspec, pyarrow.dataset as ds
        fs = fsspec.filesystem("ferry", **opts)
        batches = ds.dataset(f"{bucket}/t", filesystem=fs, format="parquet").to_batches(columns=["a", "c"])
        next(batches)
        print("exiting", flush=True)
    """,
    # The same, leaving by SystemExit with a status of its own.
    "scan_left_half_read_exit_3": """
        import fsspec, ferry.fsspec, pyarrow.dataset as ds
        fs = fsspec.filesystem("ferry", **opts)
        batches = ds.dataset(f"{bucket}/t", filesystem=fs, format="parquet").to_batches(columns=["a", "c"])
        next(batches)
        print("exiting", flush=True)
        raise SystemExit(3)
    """,
}
EXIT_STATUS = {"scan_left_half_read_exit_3": 3}


def _put_table(srv: FerryServer) -> None:
    c = srv.client()
    c.create_bucket("exits")
    table = pa.table({name: pa.array(range(200_000)) for name in "abcd"})
    for i in range(4):
        out = io.BytesIO()
        pq.write_table(table, out, row_group_size=10_000)  # many row groups: many reads
        c.put(f"s3://exits/t/part-{i}.parquet", out.getvalue())


@pytest.fixture(scope="module")
def slow():
    with FerryServer(flags=["--profile", "s3"]) as srv:
        _put_table(srv)
        yield srv


def _run(url: str, case: str, timeout: float = 60) -> str | None:
    """Runs one case as a child process: None when it exited as it should, else why not."""
    script = PREAMBLE + textwrap.dedent(CASES[case])
    try:
        p = subprocess.run([sys.executable, "-c", script, url, "exits"], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{case}: the process did not exit within {timeout:.0f} s"
    if "exiting" not in p.stdout:
        return f"{case}: never got to its exit: {p.stderr[-3000:]}"
    if p.returncode != EXIT_STATUS.get(case, 0):
        return f"{case}: exit status {p.returncode}: {p.stderr[-3000:]}"
    for bad in ("terminate called", "Fatal Python error", "Traceback"):
        if bad in p.stderr:
            return f"{case}: {bad!r} on stderr: {p.stderr[-3000:]}"
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_exit_with_reads_in_flight(slow, case):
    why = _run(slow.url, case)
    assert why is None, why


def test_exit_drain_reaches_pyarrows_pools():
    # The barrier the half-read case relies on is in force with this pyarrow: its pools
    # are found (a pyarrow whose libarrow no longer exports them fails here rather than
    # silently falling back to the quiet time), and an idle pair drains at once.
    import ferry._exit

    assert ferry._exit.pyarrow_pools() is not None
    t0 = time.monotonic()
    assert ferry._exit.drain_pyarrow(timeout=10)
    assert time.monotonic() - t0 < 5


if __name__ == "__main__":
    # The loop behind the lab's figure: each case N times against one server.
    ap = argparse.ArgumentParser(description="count clean exits of the exit cases over N runs each")
    ap.add_argument("--loop", type=int, default=20)
    ap.add_argument("--case", action="append", help="a case (default: every case)")
    args = ap.parse_args()
    os.environ.setdefault("FERRY_BIN", str(Path(__file__).resolve().parents[2] / "target" / "release" / "ferry"))
    with FerryServer(flags=["--profile", "s3"]) as srv:
        _put_table(srv)
        for case in args.case or sorted(CASES):
            bad = []
            for _ in range(args.loop):
                why = _run(srv.url, case, timeout=30)
                if why:
                    bad.append(why)
            print(f"{case}: {args.loop - len(bad)} of {args.loop} exited cleanly", flush=True)
            for why in bad[:3]:
                print("   ", why.splitlines()[0][:300], flush=True)
