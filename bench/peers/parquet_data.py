"""The tables of the `parquet-scan` workload (crates/bench/src/parquet_scan.rs): Parquet
files of 20 numeric columns, written once into a local directory that the bench then PUTs
into the server, with a manifest of what a scan of some of their columns must return.

    parquet_data.py --out DIR --prefix P/ --files N --min-mb A --max-mb B --seed S --columns c03,c11,c17

```text
seed ─► per file: a size drawn uniformly from [A, B] MB ─► rows = size / 160 B
     ─► 20 columns (even: int64, odd: float64; random, so they do not compress and the
        file is about the drawn size) ─► DIR/part-NNNN.parquet (pyarrow's defaults:
        snappy, one row group up to 1 Mi rows, as pandas.to_parquet writes them)
     ─► per read column: the sum of its values' 64-bit patterns mod 2^64, and the rows
     ─► DIR/manifest.json {files: [{key, bytes}], columns, expect: {rows, checksums}}
```

The same arguments write the same bytes (numpy's seeded generator), so a directory whose
manifest exists is reused. It is written beside DIR first and renamed into place, so a
killed run never leaves a DIR without every file. The sum is order-free: a reader that
concatenates the files in another order (a directory listing) checks the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

COLUMNS = 20
# Bytes a row takes in the file: 20 columns of 8 bytes that do not compress.
ROW_BYTES = COLUMNS * 8


def column_name(i: int) -> str:
    return f"c{i:02d}"


def checksum(values) -> int:
    import numpy as np

    return int(np.ascontiguousarray(values).view(np.uint64).sum(dtype=np.uint64))


def write(out: Path, prefix: str, files: int, min_mb: float, max_mb: float, seed: int, read: list[str]) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    unknown = [c for c in read if c not in {column_name(i) for i in range(COLUMNS)}]
    if unknown:
        raise SystemExit(f"parquet_data: no such columns {unknown} (c00..c{COLUMNS - 1:02d})")
    rng = np.random.default_rng(seed)
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    sums = {c: 0 for c in read}
    rows_total, listed = 0, []
    for f in range(files):
        rows = int(rng.uniform(min_mb, max_mb) * 1e6) // ROW_BYTES
        cols = {}
        for i in range(COLUMNS):
            name = column_name(i)
            cols[name] = rng.integers(-(2**62), 2**62, size=rows) if i % 2 == 0 else rng.standard_normal(rows)
            if name in sums:
                sums[name] = (sums[name] + checksum(cols[name])) % 2**64
        name = f"part-{f:04d}.parquet"
        pq.write_table(pa.table(cols), tmp / name)
        rows_total += rows
        listed.append({"key": f"{prefix}{name}", "file": name, "bytes": (tmp / name).stat().st_size})
    manifest = {
        "files": listed,
        "columns": read,
        "expect": {"rows": rows_total, "checksums": sums},
        "params": {"files": files, "min_mb": min_mb, "max_mb": max_mb, "seed": seed, "row_bytes": ROW_BYTES},
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return manifest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--prefix", required=True, help="the keys' prefix in the bucket, ending in '/'")
    ap.add_argument("--files", required=True, type=int)
    ap.add_argument("--min-mb", required=True, type=float)
    ap.add_argument("--max-mb", required=True, type=float)
    ap.add_argument("--seed", required=True, type=int)
    ap.add_argument("--columns", required=True, help="the columns a scan reads, comma-separated")
    a = ap.parse_args()
    if a.files < 1 or not 0 < a.min_mb <= a.max_mb or not a.prefix.endswith("/"):
        raise SystemExit("parquet_data: --files >= 1, 0 < --min-mb <= --max-mb, --prefix ending in '/'")
    if (a.out / "manifest.json").is_file():
        return 0
    write(a.out, a.prefix, a.files, a.min_mb, a.max_mb, a.seed, a.columns.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
