"""Where `ferry.arrow.read_table`'s time and memory go at parquet-scan's sizes: one
`ferry serve --memory --profile s3`, the bench's Parquet files PUT into it, then
`read_table` of 3 of 20 columns once per window size (`max_bytes_in_flight`), each in
a fresh process so its peak RSS is its own (docs/lab/python-rows.md, parquet-scan).

    .venv/bin/python bench/parquet_window.py                 # full: 24 files of 40-80 MB
    .venv/bin/python bench/parquet_window.py --quick         # 6 files of 8-16 MB
    .venv/bin/python bench/parquet_window.py --windows 32,64,128 --repeats 3

```text
parquet_data.py (the bench's generator; its cache directory reused) ─► PUT each file
per window, per repeat (interleaved): a child process ─► read_table(urls, columns,
    max_bytes_in_flight) ─► wall s, fetch wait s (the caller waiting for bytes), decode
    s (pyarrow), peak bytes in flight, the child's peak RSS ─► one line of JSON
medians per window ─► a Markdown table on stdout
```

"all" as a window sets no byte bound: the fetches ahead are bounded only by the fetcher
threads (ferry.arrow.FETCHERS units), nearest to the old one-call-for-everything read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["c03", "c11", "c17"]

CHILD = r"""
import json, resource, sys, time
import pyarrow  # imported before the clock, as the bench's driver does
import ferry, ferry.arrow
url, manifest, window = sys.argv[1], sys.argv[2], int(sys.argv[3])
man = json.load(open(manifest))
client = ferry.Client(endpoint_url=url, region="us-east-1",
                      credentials={"access_key_id": "ferry", "secret_access_key": "ferry-secret"})
urls = [f"s3://parquet/{f['key']}" for f in man["files"]]
st = ferry.arrow.ReadStats()
t0 = time.perf_counter()
table = ferry.arrow.read_table(urls, columns=json.loads(sys.argv[4]), client=client, stats=st,
                               max_bytes_in_flight=window)
wall = time.perf_counter() - t0
assert table.num_rows == man["expect"]["rows"], (table.num_rows, man["expect"]["rows"])
print(json.dumps({"wall_s": wall, "fetch_wait_s": st.fetch_wait_s, "decode_s": st.decode_s,
                  "peak_in_flight": st.peak_bytes_in_flight, "units": st.units,
                  "requested": st.bytes_requested,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--windows", default="16,32,64,128,all", help="MiB, comma-separated; 'all': everything at once")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    files, lo, hi = (6, 8, 16) if a.quick else (24, 40, 80)
    prefix = f"scan/{files}x{lo}-{hi}MB-seed5/"
    cache = Path(os.environ.get("TMPDIR", "/tmp")) / f"ferry-bench-parquet-{files}x{lo}-{hi}MB-seed5"
    subprocess.run([sys.executable, str(ROOT / "bench" / "peers" / "parquet_data.py"), "--out", str(cache),
                    "--prefix", prefix, "--files", str(files), "--min-mb", str(lo), "--max-mb", str(hi),
                    "--seed", "5", "--columns", ",".join(COLUMNS)], check=True)
    manifest = cache / "manifest.json"
    man = json.loads(manifest.read_text())
    os.environ.setdefault("FERRY_BIN", str(ROOT / "target" / "release" / "ferry"))
    from ferry.testing import FerryServer

    windows = [w.strip() for w in a.windows.split(",") if w.strip()]
    size = lambda w: (1 << 62) if w == "all" else int(w) << 20  # noqa: E731
    runs: dict[str, list[dict]] = {w: [] for w in windows}
    with FerryServer(flags=["--profile", "s3"]) as srv:
        c = srv.client()
        c.create_bucket("parquet")
        for f in man["files"]:
            c.put(f"s3://parquet/{f['key']}", (cache / f["file"]).read_bytes())
        for _ in range(a.repeats):
            for w in windows:
                p = subprocess.run([sys.executable, "-c", CHILD, srv.url, str(manifest), str(size(w)),
                                    json.dumps(COLUMNS)], capture_output=True, text=True, timeout=600)
                if p.returncode != 0:
                    sys.exit(f"window {w}: {p.stderr[-2000:]}")
                r = json.loads(p.stdout.strip().splitlines()[-1])
                runs[w].append(r)
                print(json.dumps({"window": w, **r}), file=sys.stderr, flush=True)
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    print(f"read_table, {files} files of {lo}-{hi} MB, columns {', '.join(COLUMNS)}, s3 profile, "
          f"medians of {a.repeats}\n")
    print("| window MiB | wall s | fetch wait s | decode s | units | peak in flight MB | peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for w in windows:
        rs = runs[w]
        print(f"| {w} | {med(rs, 'wall_s'):.2f} ({min(r['wall_s'] for r in rs):.2f}-{max(r['wall_s'] for r in rs):.2f}) "
              f"| {med(rs, 'fetch_wait_s'):.2f} | {med(rs, 'decode_s'):.2f} | {rs[0]['units']} "
              f"| {med(rs, 'peak_in_flight') / 1e6:.0f} | {med(rs, 'rss') / 1e6:.0f} |")


if __name__ == "__main__":
    main()
