"""Bounded memory: `iter_get` over 1 GiB of synthetic objects stays far below the total.

The lab's figure over 10 GiB (iter_get and get_many) is bench/py_rss_check.py's; this is
its cheap form. Run in a child process so ru_maxrss is the download's alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ferry.testing import FerryServer

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "py_rss_check.py"

# 16 objects of 64 MiB. The open-ahead reader holds a bounded read-ahead (its window of
# open objects, each body read no further ahead than its buffer allows), so the peak is a
# few objects' worth; measured here: 160-230 MB, against 1,074 MB of data (21 MB once the
# client is built). The bound fails any reader that keeps what it has handed out (1 GiB)
# or reads the whole window of 32 objects ahead (2 GiB, capped at the 1 GiB total).
BOUND_BYTES = 768 << 20
# Beside a busy test run the peak has burst, rarely, past the bound, and not in a run of
# its own (docs/lab/ci.md). A reader with either fault above is over the bound
# every time, so the download is tried up to three times and one run under the bound
# passes; a failure lists every run's peak.
TRIES = 3


def test_iter_get_over_1gib_stays_bounded():
    peaks = []
    with FerryServer(flags=["--synthetic-bucket", "synthetic"]) as srv:
        for _ in range(TRIES):
            p = subprocess.run(
                [sys.executable, str(SCRIPT), "--child", "iter_get", "--url", srv.url, "--total", "1GiB",
                 "--object", "64MiB"],
                capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stderr
            r = json.loads(p.stdout.strip().splitlines()[-1])
            assert r["bytes"] == 1 << 30
            peaks.append(r["peak_rss_bytes"])
            if r["peak_rss_bytes"] < BOUND_BYTES:
                break
    assert min(peaks) < BOUND_BYTES, \
        f"peak RSS over 1 GiB of iter_get, MB, each try: {[round(p / 1e6) for p in peaks]}"
