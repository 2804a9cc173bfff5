"""One large object into memory, ferry-py beside boto3 and obstore, each reader in a
fresh process per repeat, the rows interleaved, against one `ferry serve
--synthetic-bucket` (default profile, loopback).

    FERRY_BIN=target/release/ferry .venv/bin/python bench/py_get_whole.py \
        [--size 1GiB] [--gets 2] [--repeats 3] [--rows ferry-get,boto3-read,...] \
        [--peers-json .ferry-run/peers.json] [--profile s3] [--baseline DIR]

`--baseline DIR`: a directory holding another build of the `ferry` package (a copy of a
venv's site-packages/ferry); every ferry row also runs with it first on PYTHONPATH, as
`ROW@baseline`, interleaved with the rest, so a change is measured before/after in one
run. `--profile`: the server's emulation profile (default lan; s3 caps each connection
at 90 MB/s behind a 30 ms first byte).

Every row holds the whole object in memory at its end, as `Client.get` does, except the
two `-stream` rows, which read in 1 MiB chunks and drop them (what `ferry bench
bulk-get`'s boto3 and obstore rows measure):

    ferry-get          Client.get(url) -> Buffer (each dropped before the next get, so
                       the second lands in the first's memory: the buffer pool)
    ferry-get-nopool   the same with ferry.set_buffer_pool(0): every get in fresh memory
    ferry-get_into     Client.get_into(url, buf), one bytearray reused by every get of
                       the process (allocated and touched before the first clock starts)
    boto3-read         get_object(...)["Body"].read() -> bytes
    boto3-stream       get_object(...)["Body"].iter_chunks(1 MiB), dropped
    obstore-bytes      obstore.get(store, key).bytes() -> Bytes
    obstore-stream     obstore.get(store, key) streamed in 1 MiB chunks, dropped

Each process does `--gets` gets in a row; each line of the table is one get: GB/s and
CPU s/GiB (user + system, getrusage of the process around the call), and the process's
peak RSS. The boto3 and obstore rows run in the peers' Python (`.ferry-run/peers.json`,
written by scripts/bench-setup.sh); a row whose library is absent is reported absent.
Figures: docs/lab/python-rows.md, "get of one large object: beside the peers"."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))

SIZES = {"1GiB": 1 << 30, "256MiB": 256 << 20}
ROWS = ["ferry-get", "ferry-get-nopool", "ferry-get_into", "boto3-read", "boto3-stream", "obstore-bytes", "obstore-stream"]
CHUNK = 1 << 20


def child(row: str, endpoint: str, size: str, gets: int) -> None:
    """One reader's gets in this process; one JSON line per get."""
    nbytes, key = SIZES[size], f"{size}/x"
    if row.startswith("ferry"):
        import ferry

        client = ferry.Client(endpoint, credentials="anonymous", region="us-east-1")
        if row == "ferry-get-nopool":
            ferry.set_buffer_pool(0)
        if row in ("ferry-get", "ferry-get-nopool"):
            def get():
                return len(client.get(f"s3://synthetic/{key}"))
        else:
            target = bytearray(nbytes)  # zero-filled: every page touched before the clock

            def get():
                return client.get_into(f"s3://synthetic/{key}", target)
    elif row.startswith("boto3"):
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          config=Config(signature_version=UNSIGNED))
        if row == "boto3-read":
            def get():
                return len(s3.get_object(Bucket="synthetic", Key=key)["Body"].read())
        else:
            def get():
                body = s3.get_object(Bucket="synthetic", Key=key)["Body"]
                return sum(len(c) for c in body.iter_chunks(CHUNK))
    else:
        import obstore
        from obstore.store import S3Store

        store = S3Store("synthetic", endpoint=endpoint, region="us-east-1", skip_signature=True,
                        client_options={"allow_http": True})
        if row == "obstore-bytes":
            def get():
                return len(memoryview(obstore.get(store, key).bytes()))
        else:
            def get():
                return sum(len(memoryview(c)) for c in obstore.get(store, key).stream(min_chunk_size=CHUNK))
    for _ in range(gets):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        n = get()
        dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        if n != nbytes:
            raise SystemExit(f"{row}: {n} bytes, expected {nbytes}")
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        print(json.dumps({"gbps": nbytes / dt / 1e9, "cpu_per_gib": cpu / (nbytes / (1 << 30)),
                          "sys_per_gib": (r1.ru_stime - r0.ru_stime) / (nbytes / (1 << 30)),
                          "peak_rss_mib": r1.ru_maxrss / 1024}), flush=True)


def peer_python(peers_json: Path, lib: str) -> str | None:
    try:
        peers = json.loads(peers_json.read_text())["peers"]
    except (OSError, ValueError, KeyError):
        return None
    p = peers.get(lib, {})
    return p.get("python") if p.get("status") == "ok" else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1GiB", choices=sorted(SIZES))
    ap.add_argument("--gets", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--peers-json", type=Path, default=ROOT / ".ferry-run" / "peers.json")
    ap.add_argument("--profile", default="lan")
    ap.add_argument("--baseline", type=Path, help="a directory holding another build of the ferry package")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child.split("@")[0], a.endpoint, a.size, a.gets)
        return

    from ferry.testing import FerryServer

    rows = [r for r in a.rows.split(",") if r]
    if a.baseline:
        rows = [x for r in rows for x in ([f"{r}@baseline", r] if r.startswith("ferry") and "nopool" not in r else [r])]
    pythons = {r: sys.executable if r.startswith("ferry") else peer_python(a.peers_json, r.split("-")[0]) for r in rows}
    got: dict[str, list[list[dict]]] = {r: [] for r in rows}
    with FerryServer(["--synthetic-bucket", "synthetic", "--anonymous", "--profile", a.profile]) as srv:
        for rep in range(a.repeats):
            for r in rows:
                if pythons[r] is None:
                    continue
                env = dict(os.environ)
                if r.endswith("@baseline"):
                    env["PYTHONPATH"] = str(a.baseline)
                out = subprocess.run([pythons[r], __file__, "--child", r, "--endpoint", srv.url, "--size", a.size,
                                      "--gets", str(a.gets)], capture_output=True, text=True, timeout=600, env=env)
                if out.returncode != 0:
                    raise SystemExit(f"{r}: {out.stderr[-2000:]}")
                gets = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
                got[r].append(gets)
                print(rep + 1, r, " | ".join(f"{g['gbps']:.2f} GB/s {g['cpu_per_gib']:.2f} CPU s/GiB" for g in gets),
                      f"peak {gets[-1]['peak_rss_mib']:.0f} MiB", flush=True)
    print(f"\n| row | get | GB/s, median (min-max) | CPU s/GiB | of which system | peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if not got[r]:
            print(f"| {r} | absent | | | | |")
            continue
        for i in range(a.gets):
            g = [run[i] for run in got[r]]
            rate = [x["gbps"] for x in g]
            print(f"| {r} | {i + 1} | {statistics.median(rate):.2f} ({min(rate):.2f}-{max(rate):.2f}) | "
                  f"{statistics.median(x['cpu_per_gib'] for x in g):.2f} | "
                  f"{statistics.median(x['sys_per_gib'] for x in g):.2f} | "
                  f"{statistics.median(run[-1]['peak_rss_mib'] for run in got[r]):.0f} |")


if __name__ == "__main__":
    main()
