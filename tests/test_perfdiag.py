"""`ferry perfdiag --plots DIR` end to end: the release binary against `ferry serve
--profile s3`, its JSON document written into DIR and drawn by bench/plot.py with the
bench's virtualenv's matplotlib (scripts/bench-setup.sh installs it), as a user runs it.

The measurement itself is tested in crates/cli/tests/perfdiag.rs; this file checks the
plots: both PNGs written, real PNG files, the document beside them.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers import ROOT, clean_env, ferry_binary

RUN = ROOT / ".ferry-run"
PEERS_JSON = RUN / "peers.json"


def test_perfdiag_plots_write_both_pngs_and_the_document(ferry, tmp_path):
    if not PEERS_JSON.is_file():
        pytest.fail(f"{PEERS_JSON} is missing: run scripts/bench-setup.sh (scripts/test.sh does)")
    tools = json.loads(PEERS_JSON.read_text())["tools"]
    if tools["matplotlib"]["status"] != "ok":
        pytest.fail(f"matplotlib is absent from the bench venv: {tools['matplotlib'].get('reason')}")
    srv = ferry("--memory", "--profile", "s3")
    env = clean_env(AWS_ENDPOINT_URL=srv.url, AWS_ACCESS_KEY_ID=srv.access_key, AWS_SECRET_ACCESS_KEY=srv.secret_key,
                    AWS_REGION="us-east-1", FERRY_PLOT_PYTHON=str(RUN / "bench-venv" / "bin" / "python"))
    binary = str(ferry_binary())
    subprocess.run([binary, "mb", "s3://plots"], env=env, check=True, capture_output=True, timeout=30)
    out = tmp_path / "plots"
    p = subprocess.run([binary, "perfdiag", "--quick", "--repeats", "1", "--transports", "h1-pool,auto", "--plots", str(out),
                        "s3://plots/"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"plots: {out}" in p.stdout
    for name in ["perfdiag-latency.png", "perfdiag-throughput.png"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    doc = json.loads((out / "perfdiag.json").read_text())
    assert doc["schema"] == "ferry-perfdiag/1" and doc["transports"] == ["h1-pool", "auto"]
    assert doc["cleanup"]["removed"] is True
