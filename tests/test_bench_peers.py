"""The lab's peers and plots: scripts/bench-setup.sh's peers.json, bench/peers/driver.py
against a real `ferry serve` for every installed peer, bench/plot.py on synthetic records,
and one `ferry bench small-objects` run with a peer row.

scripts/test.sh runs scripts/bench-setup.sh first. A peer that setup could not install is
reported absent in peers.json; its tests say so and are skipped (loudly, with the reason).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import ROOT, clean_env, ferry_binary, s3_client

RUN = ROOT / ".ferry-run"
PEERS_JSON = RUN / "peers.json"
DRIVER = ROOT / "bench" / "peers" / "driver.py"
PLOT = ROOT / "bench" / "plot.py"
PEERS = ["boto3", "boto3-tuned", "awscrt", "obstore", "s5cmd", "rclone", "s3fs", "ferry-py", "pyarrow"]
# The peers of the five base ops (pyarrow reads Parquet only).
BASE_PEERS = [p for p in PEERS if p != "pyarrow"]
LIBRARY_PEERS = {"boto3", "boto3-tuned", "awscrt", "obstore", "s3fs"}  # per-op latencies


@pytest.fixture(scope="module")
def peers_doc() -> dict:
    if not PEERS_JSON.is_file():
        pytest.fail(f"{PEERS_JSON} is missing: run scripts/bench-setup.sh (scripts/test.sh does)")
    return json.loads(PEERS_JSON.read_text())


def installed(peers_doc, peer) -> dict:
    entry = peers_doc["peers"][peer]
    if entry["status"] != "ok":
        pytest.skip(f"peer {peer} is absent: {entry['reason']}")
    return entry


def drive(entry: dict, peer: str, spec: dict, timeout: float = 120) -> tuple[int, dict, str]:
    p = subprocess.run([entry["python"], str(DRIVER), "--peer", peer], input=json.dumps(spec), capture_output=True,
                       text=True, timeout=timeout, env=clean_env())
    out = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}
    return p.returncode, out, p.stderr


def endpoint(server) -> dict:
    return {"endpoint": server.url, "region": "us-east-1", "access_key": server.access_key, "secret_key": server.secret_key}


# --- peers.json ----------------------------------------------------------------------------
def test_peers_json_lists_every_peer_with_version_or_reason(peers_doc):
    assert peers_doc["schema"] == 1
    assert set(peers_doc["peers"]) == set(PEERS), "every peer is listed, installed or not"
    assert os.path.samefile(peers_doc["driver"], DRIVER)
    assert peers_doc["tools"]["matplotlib"]["status"] in ("ok", "absent")
    for name, e in peers_doc["peers"].items():
        if e["status"] == "ok":
            assert e["version"] and e["version"] != "unknown", name
            assert os.path.exists(e["path"]), (name, e["path"])
            assert os.access(e["python"], os.X_OK), (name, e["python"])
        else:
            assert e["status"] == "absent" and e["reason"].strip(), (name, e)


def test_peers_json_versions_match_what_is_installed(peers_doc):
    checked = 0
    for name, module in [("boto3", "boto3"), ("awscrt", "awscrt"), ("obstore", "obstore"), ("s3fs", "s3fs")]:
        e = peers_doc["peers"][name]
        if e["status"] != "ok":
            continue
        v = subprocess.run([e["python"], "-c", f"import importlib.metadata as m; print(m.version({module!r}))"],
                           capture_output=True, text=True, check=True).stdout.strip()
        assert v == e["version"], name
        checked += 1
    for name, args in [("s5cmd", ["version"]), ("rclone", ["version"])]:
        e = peers_doc["peers"][name]
        if e["status"] != "ok":
            continue
        out = subprocess.run([e["path"], *args], capture_output=True, text=True, check=True, env=clean_env()).stdout
        assert e["version"] in out, (name, out[:200])
        checked += 1
    if checked == 0:
        pytest.skip("no peer is installed: nothing to cross-check")


def test_bench_setup_is_idempotent_and_quiet():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "bench-setup.sh")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    # Quiet on success: at most the lines naming absent peers.
    noisy = [ln for ln in p.stdout.splitlines() if "is absent" not in ln]
    assert noisy == [], p.stdout
    assert json.loads(PEERS_JSON.read_text())["schema"] == 1


# --- the driver against ferry serve --------------------------------------------------------
@pytest.mark.parametrize("peer", BASE_PEERS)
def test_driver_put_get_list_delete(peer, peers_doc, mem_server, bucket):
    entry = installed(peers_doc, peer)
    s3 = s3_client(mem_server)
    # Keys with a space, a star and non-ASCII: no peer may treat them as globs or mangle them.
    keys = [f"{peer}/d/k{i:03d}" for i in range(17)] + [f"{peer}/d/with space", f"{peer}/d/star*x", f"{peer}/d/été"]
    base = {**endpoint(mem_server), "bucket": bucket, "concurrency": 4, "timeout_s": 60}

    rc, r, err = drive(entry, peer, {**base, "op": "put_many", "keys": keys, "object_size": 1000})
    assert rc == 0, err
    assert (r["ops"], r["bytes"], r["errors"]) == (20, 20_000, 0), r
    assert (r["peer"], r["version"]) == (peer, entry["version"])
    stored = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{peer}/")["Contents"]}
    assert stored == {k: 1000 for k in keys}, "the peer really wrote every object"

    rc, r, err = drive(entry, peer, {**base, "op": "get_many", "keys": keys})
    assert rc == 0, err
    assert (r["ops"], r["bytes"], r["errors"], r["error_samples"]) == (20, 20_000, 0, []), r
    assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_rss_bytes"] > 0
    if peer in LIBRARY_PEERS:
        assert len(r["latencies_s"]) == 20 and all(0 < x <= r["wall_s"] for x in r["latencies_s"])
    else:
        assert "latencies_s" not in r, "binaries and get_many do not expose per-object latency: absent, not invented"

    rc, r, err = drive(entry, peer, {**base, "op": "list", "prefix": f"{peer}/"})
    assert rc == 0, err
    assert (r["ops"], r["errors"]) == (20, 0), r
    s3.put_object(Bucket=bucket, Key=f"{peer}-other/x", Body=b"x")  # beside the prefix, not under it
    rc, r, err = drive(entry, peer, {**base, "op": "list", "prefix": ""})
    assert rc == 0, err
    assert (r["ops"], r["errors"]) == (21, 0), r

    rc, r, err = drive(entry, peer, {**base, "op": "delete_many", "keys": keys})
    assert rc == 0, err
    assert (r["ops"], r["errors"]) == (20, 0), r
    assert s3.list_objects_v2(Bucket=bucket, Prefix=f"{peer}/").get("KeyCount") == 0


@pytest.mark.parametrize("peer", BASE_PEERS)
def test_driver_fork_server_runs_each_spec_line(peer, peers_doc, mem_server, bucket):
    """`driver.py --serve` (what the bench uses): one spec per line, each run in a forked
    child with its own result line, then the server's `served` line; a bad line fails
    alone and the server goes on."""
    entry = installed(peers_doc, peer)
    keys = [f"serve-{peer}/k{i}" for i in range(5)]
    base = {**endpoint(mem_server), "bucket": bucket, "concurrency": 2, "timeout_s": 60}
    lines = [json.dumps({**base, "op": "put_many", "keys": keys, "object_size": 500}), "not json",
             json.dumps({**base, "op": "get_many", "keys": keys})]
    p = subprocess.run([entry["python"], str(DRIVER), "--peer", peer, "--serve"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=180, env=clean_env())
    assert p.returncode == 0, p.stderr
    out = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    served = [o for o in out if "served" in o]
    results = [o for o in out if "served" not in o]
    assert [s["served"] for s in served] == [1, 2, 3]
    assert [s["exit"] for s in served] == [0, 2, 0], p.stderr
    assert [r.get("op") for r in results] == ["put_many", None, "get_many"]
    assert "failed" in results[1]
    put, get = results[0], results[2]
    assert (put["ops"], put["bytes"], put["errors"]) == (5, 2_500, 0), put
    assert (get["ops"], get["bytes"], get["errors"]) == (5, 2_500, 0), get
    # Each run measures itself from nothing: its own CPU, not the server's imports.
    assert 0 < get["cpu_s"] < 30 and get["peak_rss_bytes"] > 0
    # Nor an import of its own inside the clock: the fork server preloaded what the op
    # needs.
    assert "imported_in_clock" not in get, get["imported_in_clock"]


@pytest.mark.parametrize("peer", BASE_PEERS)
def test_driver_reports_errors_for_a_missing_bucket(peer, peers_doc, mem_server):
    entry = installed(peers_doc, peer)
    spec = {**endpoint(mem_server), "op": "get_many", "bucket": "no-such-bucket-here", "keys": ["a", "b", "c"],
            "concurrency": 2, "timeout_s": 60}
    rc, r, err = drive(entry, peer, spec)
    assert rc == 0, err
    assert r["ops"] == 0 and r["bytes"] == 0
    assert r["errors"] == 3, r
    assert r["error_samples"], "a failure comes with its message"


@pytest.mark.parametrize("peer", BASE_PEERS)
def test_driver_get_one_unsigned(peer, peers_doc, anon_server):
    entry = installed(peers_doc, peer)
    spec = {"endpoint": anon_server.url, "op": "get_one", "bucket": "synthetic", "key": "8MiB/x", "timeout_s": 60}
    rc, r, err = drive(entry, peer, spec)
    assert rc == 0, err
    assert (r["ops"], r["bytes"], r["errors"]) == (1, 8 << 20, 0), r


@pytest.mark.parametrize("peer", BASE_PEERS)
def test_driver_stops_at_its_time_out(peer, peers_doc, ferry):
    entry = installed(peers_doc, peer)
    slow = ferry("--memory", "--anonymous", "--synthetic-bucket", "synthetic", "--ttfb-p50", "3s", creds=False)
    spec = {"endpoint": slow.url, "op": "get_many", "bucket": "synthetic", "keys": ["1KiB/a", "1KiB/b", "1KiB/c"],
            "concurrency": 1, "timeout_s": 1.0}
    rc, r, err = drive(entry, peer, spec, timeout=60)
    assert rc == 0, err
    assert r["timed_out"] is True, r
    assert r["ops"] + r["errors"] == 3 and r["errors"] >= 1, r
    assert r["wall_s"] < 10, "the driver gave up near its time-out, not after the server answered everything"


# The ops beyond the five, per peer that drives them (driver.py's ONLY).
NEWER_OPS = {"first_byte": {"boto3", "boto3-tuned", "awscrt", "obstore"},
             "read_in_order": {"boto3", "boto3-tuned", "obstore", "s3fs", "ferry-py"},
             "get_ranges": {"boto3", "boto3-tuned", "obstore", "s3fs", "ferry-py"},
             "rewrite_many": {"boto3", "boto3-tuned", "obstore"},
             "mixed_hol": {"boto3", "boto3-tuned", "awscrt", "obstore"}}


@pytest.mark.parametrize("peer", PEERS)
def test_driver_newer_ops(peer, peers_doc, mem_server, bucket):
    entry = installed(peers_doc, peer)
    s3 = s3_client(mem_server)
    keys = [f"{peer}/n/k{i}" for i in range(3)]
    for i, k in enumerate(keys):
        s3.put_object(Bucket=bucket, Key=k, Body=bytes([i]) * 5000)
    base = {**endpoint(mem_server), "bucket": bucket, "concurrency": 2, "timeout_s": 60}
    specs = {
        "first_byte": {"key": keys[0], "count": 3},
        "read_in_order": {"keys": keys},
        "get_ranges": {"key": "8MiB/x", "bucket": "synthetic", "ranges": [[0, 99], [1000, 4999], [5_000_000, 5_000_099]]},
        "rewrite_many": {"keys": keys},
        "mixed_hol": {"smalls": [[k, 5000] for k in keys], "small_rate": 50, "large_bucket": "synthetic",
                      "larges": ["8MiB/x"], "parts": [[0, 0, (4 << 20) - 1], [0, 4 << 20, (8 << 20) - 1]],
                      "large_in_flight": 2, "loaded": True, "load_warmup_s": 0.5},
    }
    for op, extra in specs.items():
        rc, r, err = drive(entry, peer, {**base, "op": op, **extra})
        if peer not in NEWER_OPS[op]:
            assert rc == 1 and f"has no {op} op" in r["failed"], (op, r)
            continue
        assert rc == 0, (op, err)
        assert r["errors"] == 0, (op, r)
        want = {"first_byte": (3, 15000), "read_in_order": (3, 15000), "get_ranges": (3, 100 + 4000 + 100),
                "rewrite_many": (3, 2 * 15000), "mixed_hol": (3, 15000)}[op]
        assert (r["ops"], r["bytes"]) == want, (op, r)
        if op in ("first_byte", "mixed_hol"):
            assert len(r["first_bytes_s"]) == 3 and all(0 < f <= x for f, x in zip(sorted(r["first_bytes_s"]), sorted(r["latencies_s"]))), (op, r)
        if op == "mixed_hol":
            assert r["figures"]["large_parts_done"] >= 1 and r["figures"]["smalls_done_s"] > 0, r
        if op == "rewrite_many":
            for i, k in enumerate(keys):
                body = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
                assert len(body) == 5000 and body != bytes([i]) * 5000, "the PUT sent modified bytes"


# parquet_scan: (peer, via) of each parquet-scan row (crates/bench/src/parquet_scan.rs).
SCAN_ROWS = [("ferry-py", "arrow"), ("ferry-py", "fsspec"), ("s3fs", "fsspec"), ("obstore", "fsspec"), ("pyarrow", "native")]


@pytest.fixture(scope="module")
def scan_table(peers_doc, tmp_path_factory):
    """Two small Parquet files written by bench/peers/parquet_data.py (with a Python that
    has pyarrow: ferry-py's or pyarrow's), and their manifest."""
    entry = next((peers_doc["peers"][p] for p in ("ferry-py", "pyarrow") if peers_doc["peers"][p]["status"] == "ok"), None)
    if entry is None:
        pytest.skip("neither ferry-py nor pyarrow is installed: no pyarrow to write Parquet with")
    out = tmp_path_factory.mktemp("scan") / "table"
    subprocess.run([entry["python"], str(DRIVER.with_name("parquet_data.py")), "--out", str(out), "--prefix", "scan/t/",
                    "--files", "2", "--min-mb", "0.5", "--max-mb", "1", "--seed", "3", "--columns", "c01,c04,c19"],
                   check=True, timeout=120)
    return out


@pytest.mark.parametrize("peer,via", SCAN_ROWS)
def test_driver_parquet_scan_reads_and_checks_the_table(peer, via, peers_doc, scan_table, mem_server, bucket, tmp_path):
    entry = installed(peers_doc, peer)
    manifest = json.loads((scan_table / "manifest.json").read_text())
    s3 = s3_client(mem_server)
    for f in manifest["files"]:
        s3.put_object(Bucket=bucket, Key=f["key"], Body=(scan_table / f["file"]).read_bytes())
    spec = {**endpoint(mem_server), "op": "parquet_scan", "bucket": bucket, "prefix": "scan/t/",
            "manifest": str(scan_table / "manifest.json"), "columns": ["c01", "c04", "c19"], "via": via, "timeout_s": 60}
    rc, r, err = drive(entry, peer, spec)
    assert rc == 0, err
    assert (r["ops"], r["errors"], r["error_samples"]) == (2, 0, []), r
    assert r["bytes"] >= manifest["expect"]["rows"] * 3 * 8, "the three columns' values, decoded"
    # A table that does not match the manifest is an error, not a result.
    bad = json.loads((scan_table / "manifest.json").read_text())
    bad["expect"]["checksums"]["c04"] = (bad["expect"]["checksums"]["c04"] + 1) % 2**64
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    rc, r, err = drive(entry, peer, {**spec, "manifest": str(tmp_path / "bad.json")})
    assert rc == 0, err
    assert r["errors"] == 1 and "c04 checksum" in r["error_samples"][0], r


def test_driver_pyarrow_drives_parquet_scan_only(peers_doc, mem_server):
    entry = installed(peers_doc, "pyarrow")
    rc, r, _ = drive(entry, "pyarrow", {**endpoint(mem_server), "op": "get_many", "bucket": "b", "keys": ["a"]})
    assert rc == 1 and "pyarrow has no get_many op" in r["failed"], r


@pytest.mark.parametrize("peer", sorted(NEWER_OPS["mixed_hol"]))
def test_driver_mixed_hol_counts_parts_that_straddle_the_window(peer, peers_doc, ferry):
    """The load's goodput is the bytes received while the smalls ran, whichever part they
    belong to. Here no part lies inside the window: 4 MiB parts at 1.4 MB/s per connection
    take ~3 s, the first ones begin before the window (1 s of warm-up) and end inside it
    (at ~2 s), the next ones begin inside and end after it (at ~5 s; the smalls arrive at
    0, 1.5 and 3 s): a second of margin either side for a busy machine.
    Counting only whole parts begun inside the window read 0 here, as it did for
    boto3-tuned's loaded quick row (0 MB/s beside 529 parts done: its parts outlasted the
    1.5 s window). The CRT hands a ranged GET's body over when the part is done, so it
    counts at the first parts' ends; the others count chunk by chunk."""
    entry = installed(peers_doc, peer)
    server = ferry("--memory", "--rate-per-conn", "1400000")
    s3 = s3_client(server)
    s3.create_bucket(Bucket="hol")
    keys = [f"{peer}/small{i}" for i in range(3)]
    for k in keys:
        s3.put_object(Bucket="hol", Key=k, Body=b"s" * 5000)
    part = 4 << 20
    spec = {**endpoint(server), "op": "mixed_hol", "bucket": "hol", "concurrency": 4, "timeout_s": 60,
            "smalls": [[k, 5000] for k in keys], "small_rate": 2 / 3, "large_bucket": "synthetic",
            "larges": ["8MiB/x"], "parts": [[0, 0, part - 1], [0, part, 2 * part - 1]],
            "large_in_flight": 2, "loaded": True, "load_warmup_s": 1.0, "load_alone_s": 0.5}
    rc, r, err = drive(entry, peer, spec)
    assert rc == 0, err
    assert r["errors"] == 0 and r["ops"] == 3, r
    f = r["figures"]
    window_bytes = f["large_bytes_per_s"] * f["smalls_done_s"]
    assert window_bytes > 0, f"no large bytes counted in the window: {f}"
    # Never more than the parts done plus those still in flight at the window's end.
    assert window_bytes <= (f["large_parts_done"] + spec["large_in_flight"]) * part, f
    # The reference of "large objects done": the load alone over the warm-up's last 0.5 s
    # (0 for the CRT, whose bodies arrive whole at a part's end, ~2 s in).
    assert f["large_alone_bytes_per_s"] >= 0, f
    assert f["large_done_s"] > 0, f
    # The warm-up's samples (the ramp mixed_hol.rs's warm-ups are chosen from): from 0,
    # time and bytes growing, covering the warm-up, never more than the parts could carry.
    pts = r["series"]["large_warmup_bytes"]
    assert pts[0][0] == 0 and len(pts) >= 10, pts
    assert all(b[0] > a[0] and b[1] >= a[1] for a, b in zip(pts, pts[1:])), pts
    assert pts[-1][0] >= spec["load_warmup_s"], pts
    assert pts[-1][1] <= len(spec["parts"]) * part * 2, pts
    if peer.startswith("boto3"):
        # Where a late start goes: the threads' start, then the warm-up sleep, then the window.
        assert f["load_warmup_slept_s"] >= spec["load_warmup_s"], f
        assert f["smalls_window_opened_s"] >= f["load_threads_started_s"] + f["load_warmup_slept_s"], f


def test_driver_s5cmd_deletes_a_prefix_by_wildcard(peers_doc, mem_server, bucket):
    entry = installed(peers_doc, "s5cmd")
    s3 = s3_client(mem_server)
    keys = [f"wild/p{i % 2}/k{i}" for i in range(5)]
    for k in [*keys, "wild-beside/x"]:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    spec = {**endpoint(mem_server), "op": "delete_many", "bucket": bucket, "keys": keys, "prefix": "wild/", "concurrency": 2,
            "timeout_s": 60}
    rc, r, err = drive(entry, "s5cmd", spec)
    assert rc == 0, err
    assert (r["ops"], r["errors"]) == (5, 0), r
    assert s3.list_objects_v2(Bucket=bucket, Prefix="wild/").get("KeyCount") == 0
    assert s3.list_objects_v2(Bucket=bucket, Prefix="wild-beside/").get("KeyCount") == 1, "only the prefix"


def test_driver_rejects_a_bad_spec(peers_doc):
    entry = installed(peers_doc, "boto3")
    rc, r, err = drive(entry, "boto3", {"op": "get_many", "endpoint": "http://127.0.0.1:9"})
    assert rc == 1 and "needs bucket, keys" in r["failed"], (r, err)
    rc, r, err = drive(entry, "boto3", {"op": "list", "endpoint": "http://127.0.0.1:9", "bucket": "b", "prefix": "half"})
    assert rc == 1 and "must be empty or end with '/'" in r["failed"], (r, err)
    p = subprocess.run([entry["python"], str(DRIVER), "--peer", "boto3"], input="not json", capture_output=True, text=True)
    assert p.returncode == 2 and "not JSON" in p.stderr


# --- plot.py on synthetic records -------------------------------------------------------------
def _record(workload, variant, mode, figures=None, params=None, series=None, repeat=1, run_id="r1", status="ok", client=None):
    r = {"schema": 1, "bench": workload, "workload": workload, "size": "quick", "mode": mode, "variant": variant,
         "repeat": repeat, "repeats": 2, "run_id": run_id, "time_unix": 1000.0 + repeat, "status": status,
         "git_sha": None, "git_dirty": None, "machine": {"nproc": 2, "kernel": "x"}, "profile": "s3", "server": None,
         "client": client, "params": params or {}, "figures": figures or {}, "error_samples": [], "note": None}
    if series:
        r["series"] = series
    return r


def synthetic_records() -> list[dict]:
    recs = []
    pct = [0, 10, 25, 50, 75, 90, 99, 100]
    for k, client in enumerate(["h1-pool", "boto3"]):
        recs.append(_record("ttfb-throughput", client, client, series={"ttfb_s": [[p, 0.02 * (1 + k) * math.exp(p / 40)] for p in pct]}))
        for op in ["GET", "PUT"]:
            for size in [16 << 10, 1 << 20, 32 << 20]:
                recs.append(_record("ttfb-throughput", client, client, params={"op": op, "object_size": size},
                                    series={"throughput_Bps": [[p, size / (0.03 * (1 + k) + p / 1000)] for p in pct]}))
    for k, client in enumerate(["h1-pool", "h2", "boto3"]):
        lat = [0.001 * 2 ** i * (1 + k) for i in range(12)]
        recs.append(_record("mixed-hol", client, client, series={"small_latency_s": [[x, (i + 1) / 12] for i, x in enumerate(lat)]}))
    recs.extend(bulk_wan_records())
    for rep in (1, 2):
        for v, ops in [("h1-pool", 500), ("h1-pipeline", 650), ("boto3", 300)]:
            recs.append(_record("small-objects", v, v, {"objects_per_s": ops + 10 * rep}, repeat=rep,
                                client={"peer": "boto3"} if v == "boto3" else None))
    # An older run and an absent peer: neither may show up.
    recs.append(_record("small-objects", "stale", "h1-pool", {"objects_per_s": 9999}, run_id="r0"))
    recs[-1]["time_unix"] = 1.0
    recs.append(_record("small-objects", "rclone", "rclone", status="absent"))
    return recs


def bulk_wan_records() -> list[dict]:
    """bulk-wan as it writes its records: ferry rows and iperf3 with a counted window
    (omit_s) and, cold, a figure from the first byte; a peer and ferry on the peers' pull
    with a whole-run figure only (a peer's bytes_per_s is its whole run)."""
    recs = []
    for rep in (1, 2):
        for conc in [1, 4, 16, 64]:
            ramp = {"bytes_per_s_with_ramp": 5e7 * conc ** 0.5} if rep == 1 else {}
            recs.append(_record("bulk-wan", "h1-pool", "h1-pool", {"bytes_per_s": 1e8 * conc ** 0.7 + rep, "omit_s": 2.0, **ramp}, {"concurrency": conc}, repeat=rep))
            recs.append(_record("bulk-wan", "h2", "h2", {"bytes_per_s": 2e8 * conc ** 0.5 + rep, "omit_s": 0.3}, {"concurrency": conc}, repeat=rep))
            recs.append(_record("bulk-wan", "iperf3 -P N", "iperf3", {"bytes_per_s": 1.2e9, "bytes_per_s_with_ramp": 7e8, "omit_s": 1.5}, {"concurrency": conc}, repeat=rep))
    for conc in [1, 4, 16, 64]:
        recs.append(_record("bulk-wan", "boto3", "boto3", {"bytes_per_s": 3e7 * conc, "bytes_per_s_with_ramp": 3e7 * conc}, {"concurrency": conc}, client={"peer": "boto3"}))
        recs.append(_record("bulk-wan", "h1-pool · peers' pull", "h1-pool", {"bytes_per_s_with_ramp": 4e7 * conc}, {"concurrency": conc}))
    return recs


def test_plot_bulk_wan_never_draws_a_whole_run_beside_a_steady_state(peers_doc):
    """The peers' whole-run MB/s and ferry's counted-window MB/s go to separate panels."""
    if peers_doc["tools"]["matplotlib"]["status"] != "ok":
        pytest.skip(f"matplotlib is absent: {peers_doc['tools']['matplotlib']['reason']}")
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import plot; "
            "p = plot.bulk_wan_points(json.load(sys.stdin)); "
            "print(json.dumps({k: {'clients': {c: dict(v) for c, v in p[k]['clients'].items()}, 'ceiling': dict(p[k]['ceiling'])} for k in p}))")
    py = RUN / "bench-venv" / "bin" / "python"
    r = subprocess.run([str(py), "-c", code, str(PLOT.parent)], input=json.dumps(bulk_wan_records()), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    steady, whole = p["steady"], p["whole"]
    assert sorted(steady["clients"]) == ["h1-pool", "h2"], "no peer and no peers' pull in the steady state"
    assert sorted(whole["clients"]) == ["boto3", "h1-pool · peers' pull"], "the peers' pull only, ferry's beside it"
    # Each panel its own figure: h1-pool at 16 streams windowed in repeats 1 and 2 (its
    # repeat-1 figure with ramp is not a pull's); boto3's whole pull.
    assert sorted(steady["clients"]["h1-pool"]["16.0"]) == [1e8 * 16 ** 0.7 + 1, 1e8 * 16 ** 0.7 + 2]
    assert whole["clients"]["boto3"]["16.0"] == [3e7 * 16]
    assert whole["clients"]["h1-pool · peers' pull"]["16.0"] == [4e7 * 16]
    assert steady["ceiling"]["16.0"] == [1.2e9, 1.2e9] and whole["ceiling"] == {}, "iperf3 once, on the steady side"


def run_plot(results, out, *extra):
    py = RUN / "bench-venv" / "bin" / "python"
    if not py.exists():
        pytest.fail("the bench venv is missing: run scripts/bench-setup.sh")
    return subprocess.run([str(py), str(PLOT), str(results), "--out", str(out), *extra], capture_output=True, text=True, timeout=120)


PNGS = ["ttfb-percentiles.png", "throughput-percentiles.png", "mixed-hol-cdf.png", "bulk-wan-throughput.png", "small-objects-ops.png"]


def test_plot_writes_every_png_from_fixtures(tmp_path, peers_doc):
    if peers_doc["tools"]["matplotlib"]["status"] != "ok":
        pytest.skip(f"matplotlib is absent: {peers_doc['tools']['matplotlib']['reason']}")
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records()))
    p = run_plot(results, tmp_path / "plots")
    assert p.returncode == 0, p.stdout + p.stderr
    for name in PNGS:
        f = tmp_path / "plots" / name
        assert f.is_file(), (name, p.stdout)
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "5 plot(s) written" in p.stdout and "0 skipped" in p.stdout


def test_plot_skips_missing_data_without_crashing(tmp_path, peers_doc):
    if peers_doc["tools"]["matplotlib"]["status"] != "ok":
        pytest.skip(f"matplotlib is absent: {peers_doc['tools']['matplotlib']['reason']}")
    only_small = [r for r in synthetic_records() if r["workload"] == "small-objects"]
    # A ttfb record without its series, a bulk-wan record without a concurrency, a bad line.
    only_small.append(_record("ttfb-throughput", "h1-pool", "h1-pool", {"first_byte_ms": 30}))
    only_small.append(_record("bulk-wan", "h2", "h2", {"bytes_per_s": 1e9}))
    results = tmp_path / "partial.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in only_small) + "{truncated\n")
    p = run_plot(results, tmp_path / "plots")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "plots" / "small-objects-ops.png").is_file()
    for name in PNGS[:4]:
        assert not (tmp_path / "plots" / name).exists()
        assert f"skipped {name}" in p.stdout, p.stdout
    assert "not JSON" in p.stdout
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = run_plot(empty, tmp_path / "none")
    assert p.returncode == 0 and "0 plot(s) written" in p.stdout, p.stdout + p.stderr


# --- ferry bench with a peer row ---------------------------------------------------------------
def _bench(tmp_path, *args, env=None):
    out = tmp_path / "results.jsonl"
    p = subprocess.run([str(ferry_binary()), "bench", "small-objects", "--quick", "--objects", "50", "--repeats", "1",
                        "--no-progress", "--no-auto-ranged", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env or clean_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_ferry_bench_small_objects_with_boto3(tmp_path, peers_doc):
    installed(peers_doc, "boto3")
    stdout, recs = _bench(tmp_path, "--peers", "boto3")
    peer = [r for r in recs if r["mode"] == "boto3"]
    assert len(peer) == 1, [r["mode"] for r in recs]
    r = peer[0]
    assert r["status"] == "ok", r
    assert r["variant"] == "boto3" and r["workload"] == "small-objects"
    assert r["figures"]["objects"] == 50 and r["figures"]["errors"] == 0
    assert r["figures"]["bytes"] == 50 * 16 * 1024
    assert r["client"]["peer"] == "boto3" and r["client"]["concurrency"] == 32
    # What the server counted during the peer's run.
    assert r["figures"]["requests_GetObject"] == 50 and r["figures"]["requests_sent"] >= 50
    assert 1 <= r["figures"]["connections_opened"] <= 50
    assert {"h1-pool", "h1-pipeline"} <= {x["mode"] for x in recs}, "ferry's rows ran beside the peer"
    assert "| boto3 |" in stdout


@pytest.mark.slow
def test_ferry_bench_reports_an_absent_peer(tmp_path):
    fake = tmp_path / "peers.json"
    fake.write_text(json.dumps({"schema": 1, "driver": str(DRIVER),
                                "peers": {"rclone": {"status": "absent", "reason": "rclone not found on PATH (test)"}}}))
    stdout, recs = _bench(tmp_path, "--peers", "rclone", env=clean_env(FERRY_PEERS_JSON=str(fake)))
    r = [r for r in recs if r["variant"] == "rclone"]
    assert len(r) == 1 and r[0]["status"] == "absent", recs
    assert "rclone not found on PATH (test)" in r[0]["note"]
    assert "absent: rclone not found on PATH (test)" in stdout, "the absent peer is named in the report, not dropped"


def test_ferry_bench_prints_a_progress_line_per_run(tmp_path):
    """The live progress line: which workload, which client, repeat k of n, for
    every run, interleaved across clients. Off a terminal it is one line per run on stderr;
    --no-progress silences it. Each ferry row also has its requests by type, as the server
    answered them."""
    out = tmp_path / "results.jsonl"
    cmd = [str(ferry_binary()), "bench", "small-objects", "--quick", "--objects", "20", "--repeats", "2",
           "--peers", "none", "--no-auto-ranged", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=clean_env())
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    lines = [line for line in p.stderr.splitlines() if " · repeat " in line]
    want = [f"small-objects · {r['variant']} · repeat {r['repeat']} of 2" for r in recs]
    assert lines == want, (lines, want)
    assert [r["repeat"] for r in recs] == sorted(r["repeat"] for r in recs), "repeat 1 of every client before repeat 2"
    # Requests sent by type: what the server answered during each ferry row, by operation,
    # adds up to what the client counted sending (the ceiling rows have no ferry client),
    # less the copies the server may not have answered yet when the row ended: hedged
    # copies (a copy whose original answered first is dropped), and on auto the probe's
    # copy of a small GET, whose answer is read after the caller has its own. One probe
    # runs at a time (wire's auto/probe.rs), so at most one such copy is outstanding.
    ferry_rows = [r for r in recs if "requests_sent" in r["figures"]]
    assert len(ferry_rows) >= 4, [r["variant"] for r in recs]
    for r in ferry_rows:
        f = r["figures"]
        by_type = {k: v for k, v in f.items() if k.startswith("requests_") and k[len("requests_"):][:1].isupper()}
        answered, sent = sum(by_type.values()), f["requests_sent"]
        assert f.get("requests_GetObject", 0) >= 20, (r["variant"], f)
        probe_copy = 1 if r["mode"] == "auto" else 0
        assert sent - f.get("hedges_sent", 0) - probe_copy <= answered <= sent, (r["variant"], f)
    q = subprocess.run(cmd + ["--no-progress"], capture_output=True, text=True, timeout=300, cwd=ROOT, env=clean_env())
    assert q.returncode == 0 and " · repeat " not in q.stderr, q.stderr[-2000:]


def test_ferry_bench_without_root_falls_back_to_no_link_loudly():
    """Issue 4: without root a requested link cannot be made (namespaces, TUN devices);
    the bench says so loudly, runs over loopback, and every record says `link: none`.
    Run as uid/gid 65534 (nobody) through setpriv, so it needs root to start."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another user (setpriv)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) not found")
    work = Path(tempfile.mkdtemp(prefix="ferry-nonroot-"))
    try:
        work.chmod(0o777)
        out = work / "results.jsonl"
        # A copy nobody can reach: the checkout may sit in a 0700 directory (mktemp -d),
        # and the bench starts `ferry serve` from its own path.
        exe = work / "ferry"
        shutil.copy2(ferry_binary(), exe)
        cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
               str(exe), "bench", "vectored", "--quick", "--repeats", "1", "--peers", "none",
               "--no-progress", "--link", "transatlantic", "--out", str(out)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=work,
                           env=clean_env(HOME=str(work)))
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        assert "needs root" in p.stderr and "FALLING BACK TO --link none" in p.stderr, p.stderr[-3000:]
        recs = [json.loads(line) for line in out.read_text().splitlines()]
        assert recs, "the fallback still runs the workload"
        assert all(r["params"]["link"] == "none" for r in recs), [r["params"].get("link") for r in recs]
        assert all(r["status"] == "ok" for r in recs), [(r["variant"], r["status"]) for r in recs]
    finally:
        shutil.rmtree(work, ignore_errors=True)
