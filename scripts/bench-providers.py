#!/usr/bin/env python3
"""`ferry cp` beside rclone and azcopy on the GCS and Azure emulators (run by
scripts/bench-providers.sh, which finds the binaries; docs/lab/providers-speed.md holds a run).

What it measures, and how:

    setup (untimed)   a local tree per set: N small files (2,000 x 16 KiB) and M large ones
                      (2 x 256 MiB), deterministic bytes, their MD5s kept; three emulators
                      started on free loopback ports, each with a bucket/container `bench`:
                        gcs-http   fake-gcs-server, plain http (HTTP/1.1: Go speaks h2 only
                                   under TLS)
                        gcs-h2     fake-gcs-server, https with a certificate made here by
                                   openssl; Go's server offers h2 by ALPN
                        azurite    Azurite (Node), http, in memory
                      and each set uploaded once by ferry to data/SET/ (the download source)
    repeat k = 1..n, per target, per set, per direction, per tool (the order of the tools
                      rotated by one each repeat, so no tool always runs first or last):
      upload          the tool copies SRC/SET/ to bench/up/TOOL-k/SET/
      download        the tool copies bench/data/SET/ into a fresh local directory
      timed           the child process only: started with Popen, reaped with wait4(2),
                      so wall time and CPU (user + system, from its rusage) are its own;
                      the emulator's CPU over the same span is read from /proc/PID/stat
      verified        downloads: every file present, none extra, each MD5 equal to the
      (untimed)       source's; uploads: every object listed (by `ferry ls`), none extra,
                      each size equal; then the copy is removed

Each tool runs with its defaults except rclone's --transfers/--checkers, raised from 4/8 to
ferry's default object concurrency (64), as in `ferry bench cli-transfer` (its module note
says why). azcopy and rclone reach Azurite through a container SAS (azcopy takes no Shared
Key); ferry through the emulator's connection string (Shared Key), as its users would.

The emulators are slow servers on the same two cores as the client: when a row is bound by
the emulator's CPU, wall time says little about the client, so the table also gives each
client's CPU per object (small sets) and per MiB (large sets), and the emulator's.

Output: a Markdown table on stdout (medians over the repeats, and each peer's median wall
time over ferry's), one JSON object per run in --json FILE.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

AZ_ACCOUNT = "devstoreaccount1"
# The emulator's well-known development key (Azure's emulator documentation).
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
AZ_SAS_VERSION = "2023-11-03"
BUCKET = "bench"
# rclone's --transfers and --checkers: ferry's default --concurrency (module note).
RCLONE_TRANSFERS = 64
TARGETS = ("gcs-http", "gcs-h2", "azurite")
TOOLS = {"gcs-http": ("ferry", "rclone"), "gcs-h2": ("ferry", "rclone"), "azurite": ("ferry", "rclone", "azcopy")}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def die(msg):
    print(f"bench-providers: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench-providers", description=__doc__.split("\n")[0])
    p.add_argument("--ferry", required=True, help="the ferry binary")
    p.add_argument("--fake-gcs", help="fake-gcs-server binary (gcs-http, gcs-h2)")
    p.add_argument("--azurite", help="azurite-blob executable (azurite)")
    p.add_argument("--rclone", default=shutil.which("rclone"), help="rclone (default: on PATH)")
    p.add_argument("--azcopy", help="azcopy binary (azurite)")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated: " + ", ".join(TARGETS))
    p.add_argument("--tools", default="ferry,rclone,azcopy", help="comma-separated tools to run")
    p.add_argument("--sets", default="small,large", help="comma-separated: small, large")
    p.add_argument("--directions", default="upload,download", help="comma-separated: upload, download")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--small", type=int, default=2000, help="files in the small set (16 KiB each)")
    p.add_argument("--large", type=int, default=2, help="files in the large set")
    p.add_argument("--large-mib", type=int, default=256, help="MiB per large file")
    p.add_argument("--quick", action="store_true", help="200 x 16 KiB, 2 x 32 MiB, one repeat")
    p.add_argument("--work", default="/tmp/ferry-bench-providers", help="work directory (a disk)")
    p.add_argument("--json", help="write one JSON object per run here")
    p.add_argument("--timeout", type=float, default=600, help="seconds before a run is killed (and failed)")
    p.add_argument("--ferry-arg", action="append", default=[], help="extra argument for every ferry command")
    p.add_argument("--table-from", metavar="JSONL", help="print the table of an earlier run's --json file and exit")
    p.add_argument("--check-args", action="store_true", help="check the arguments (not --ferry's binary) and exit")
    a = p.parse_args(argv)
    if a.quick:
        a.small, a.large, a.large_mib, a.repeats = 200, 2, 32, 1
    a.targets = [t for t in a.targets.split(",") if t]
    a.tools = [t for t in a.tools.split(",") if t]
    a.sets = [s for s in a.sets.split(",") if s]
    a.directions = [d for d in a.directions.split(",") if d]
    for t in a.targets:
        if t not in TARGETS:
            die(f"unknown target {t!r} (known: {', '.join(TARGETS)})")
    for t in a.tools:
        if t not in ("ferry", "rclone", "azcopy"):
            die(f"unknown tool {t!r} (known: ferry, rclone, azcopy)")
    for s in a.sets:
        if s not in ("small", "large"):
            die(f"unknown set {s!r} (known: small, large)")
    for d in a.directions:
        if d not in ("upload", "download"):
            die(f"unknown direction {d!r} (known: upload, download)")
    if a.repeats < 1 or a.small < 1 or a.large < 1 or a.large_mib < 1 or a.timeout < 1:
        die("--repeats, --small, --large, --large-mib and --timeout must be at least 1")
    if "ferry" not in a.tools:
        die("--tools must include ferry (the table holds each peer against it)")
    if a.table_from:
        return a
    if not a.check_args and not os.access(a.ferry, os.X_OK):
        die(f"--ferry {a.ferry}: not an executable")
    needs = {"gcs-http": ("fake_gcs", "--fake-gcs"), "gcs-h2": ("fake_gcs", "--fake-gcs"), "azurite": ("azurite", "--azurite")}
    for t in a.targets:
        attr, flag = needs[t]
        path = getattr(a, attr)
        if not path or not os.access(path, os.X_OK):
            die(f"target {t} needs {flag} (an executable; scripts/setup.sh installs it), got {path!r}")
    for tool, attr in (("rclone", "rclone"), ("azcopy", "azcopy")):
        path = getattr(a, attr)
        if tool in a.tools and (not path or not os.access(path, os.X_OK)):
            die(f"tool {tool} is not installed (--{tool} {path!r}); scripts/bench-setup.sh installs the peers, or leave it out of --tools")
    return a


# ---- data -----------------------------------------------------------------------------


class FileSet:
    def __init__(self, name, files, size):
        self.name, self.files, self.size = name, files, size
        self.names = [f"f-{i:06}.bin" for i in range(files)]
        self.md5 = {}

    def label(self):
        s = self.size
        unit = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
        return f"{self.files} x {unit}"

    def write(self, root):
        d = root / self.name
        d.mkdir(parents=True, exist_ok=True)
        for i, n in enumerate(self.names):
            # Deterministic, incompressible-looking bytes: SHAKE-256 of the set and index.
            data = hashlib.shake_256(f"{self.name}/{i}".encode()).digest(min(self.size, 1 << 20))
            reps, rest = divmod(self.size, len(data))
            path = d / n
            with open(path, "wb") as f:
                for r in range(reps):
                    # Each MiB differs from the last (its first 8 bytes carry its index).
                    f.write(r.to_bytes(8, "little") + data[8:])
                f.write(data[:rest])
            self.md5[n] = md5_file(path)


def md5_file(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ---- emulators ------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            die(f"{what} exited ({proc.returncode}) before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    die(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


class Emulator:
    """One emulator process; `url` its endpoint; `cpu()` its user + system seconds so far."""

    def __init__(self, target, proc, url, ca=None, port=None):
        self.target, self.proc, self.url, self.ca, self.port = target, proc, url, ca, port

    def cpu(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_fake_gcs(binary, work, tls):
    port = free_port()
    scheme = "https" if tls else "http"
    d = work / f"fake-gcs-{scheme}"
    d.mkdir(parents=True, exist_ok=True)
    args = [binary, "-scheme", scheme, "-host", "127.0.0.1", "-port", str(port), "-backend", "memory",
            "-log-level", "error", "-external-url", f"{scheme}://127.0.0.1:{port}"]
    ca = None
    if tls:
        ca, key = d / "cert.pem", d / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", ca, "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        # An end-entity certificate (rustls refuses a CA certificate as a server's).
                        "-addext", "basicConstraints=critical,CA:FALSE"],
                       check=True, capture_output=True)
        args += ["-cert-location", str(ca), "-private-key-location", str(key)]
    log = open(d / "server.log", "wb")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    wait_listening(port, proc, f"fake-gcs-server ({scheme})")
    return Emulator("gcs-h2" if tls else "gcs-http", proc, f"{scheme}://127.0.0.1:{port}", ca, port)


def start_azurite(binary, work):
    d = work / "azurite"
    d.mkdir(parents=True, exist_ok=True)
    # On disk, under the work directory: in memory (--inMemoryPersistence), Azurite 3.35.0
    # stopped answering after some thousands of blobs written and deleted (its connections
    # open, its CPU idle), which turned a peer's run into a hang.
    proc = subprocess.Popen([binary, "--blobHost", "127.0.0.1", "--blobPort", "0", "--location", str(d / "data"),
                             "--skipApiVersionCheck", "--disableTelemetry", "--loose"],
                            cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    found = []
    ready = threading.Event()

    def drain():
        # Its banner carries the port; the rest is read and dropped so the pipe never fills.
        for line in proc.stdout:
            line = line.decode(errors="replace")
            if not found and "successfully listens on " in line:
                found.append(line.split("successfully listens on ", 1)[1].strip().rstrip("/"))
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(60) or not found:
        proc.kill()
        die("Azurite did not listen within 60 s")
    url = found[0]
    return Emulator("azurite", proc, f"{url}/{AZ_ACCOUNT}", port=int(url.rsplit(":", 1)[1]))


def container_sas(container):
    """A container SAS (read, add, create, write, delete, list) for the dev account."""
    perms, expiry = "racwdl", "2099-01-01T00:00:00Z"
    resource = f"/blob/{AZ_ACCOUNT}/{container}"
    fields = [perms, "", expiry, resource, "", "", "", AZ_SAS_VERSION, "c", "", "", "", "", "", "", ""]
    sig = base64.b64encode(hmac.new(base64.b64decode(AZ_KEY), "\n".join(fields).encode(), hashlib.sha256).digest())
    q = urllib.parse.quote
    return f"sv={q(AZ_SAS_VERSION)}&se={q(expiry, safe='')}&sr=c&sp={perms}&sig={q(sig.decode(), safe='')}"


# ---- tools ----------------------------------------------------------------------------


class Target:
    """How each tool reaches one emulator: URLs, environment, extra arguments."""

    def __init__(self, emu, args, work):
        self.emu, self.args, self.work = emu, args, work
        self.name = emu.target
        self.gcs = self.name.startswith("gcs")
        env = dict(os.environ)
        for k in list(env):
            if k.startswith(("AWS_", "AZURE_", "GOOGLE_", "STORAGE_EMULATOR", "RCLONE_", "AZCOPY_")):
                del env[k]
        self.ferry_env = dict(env)
        self.ferry_args = []
        self.rclone_env = dict(env, RCLONE_CONFIG=str(work / "rclone.conf"))
        self.rclone_args = []
        if self.gcs:
            self.ferry_env["STORAGE_EMULATOR_HOST"] = emu.url
            if emu.ca:
                self.ferry_args += ["--ca-bundle", str(emu.ca)]
                self.rclone_args += ["--ca-cert", str(emu.ca)]
            self.rclone_env.update(RCLONE_CONFIG_R_TYPE="google cloud storage",
                                   RCLONE_CONFIG_R_ENDPOINT=f"{emu.url}/storage/v1/",
                                   RCLONE_CONFIG_R_ANONYMOUS="true", RCLONE_CONFIG_R_PROJECT_NUMBER="ferry")
        else:
            self.ferry_env["AZURE_STORAGE_CONNECTION_STRING"] = (
                f"DefaultEndpointsProtocol=http;AccountName={AZ_ACCOUNT};AccountKey={AZ_KEY};BlobEndpoint={emu.url};")
            self.sas = container_sas(BUCKET)
            self.rclone_env.update(RCLONE_CONFIG_R_TYPE="azureblob",
                                   RCLONE_CONFIG_R_SAS_URL=f"{emu.url}/{BUCKET}?{self.sas}")
            azdir = work / "azcopy"
            azdir.mkdir(parents=True, exist_ok=True)
            self.azcopy_env = dict(env, AZCOPY_LOG_LOCATION=str(azdir), AZCOPY_JOB_PLAN_LOCATION=str(azdir),
                                   AZCOPY_DISABLE_SYSLOG="true")
        self.ferry_args += args.ferry_arg

    def url(self, key):
        return f"{'gs' if self.gcs else 'az'}://{BUCKET}/{key}"

    def ferry(self, *argv):
        return [self.args.ferry, *argv, *self.ferry_args], self.ferry_env

    def command(self, tool, direction, src_dir, key, dst_dir):
        """The timed command: upload SRC_DIR/ to KEY/, or download KEY/ into DST_DIR/."""
        if tool == "ferry":
            if direction == "upload":
                return self.ferry("cp", "-r", "-q", f"{src_dir}/", self.url(key) + "/")
            return self.ferry("cp", "-r", "-q", self.url(key) + "/", f"{dst_dir}/")
        if tool == "rclone":
            base = [self.args.rclone, "copy", "-q", "--transfers", str(RCLONE_TRANSFERS),
                    "--checkers", str(RCLONE_TRANSFERS), *self.rclone_args]
            remote = f"r:{BUCKET}/{key}"
            if direction == "upload":
                return [*base, str(src_dir), remote], self.rclone_env
            return [*base, remote, str(dst_dir)], self.rclone_env
        if tool == "azcopy":
            # --from-to: azcopy does not recognise an emulator's URL as a blob one.
            base = [self.args.azcopy, "copy", "--output-level", "essential", "--log-level", "ERROR"]
            if direction == "upload":
                return [*base, "--from-to", "LocalBlob", f"{src_dir}/*", f"{self.emu.url}/{BUCKET}/{key}?{self.sas}"], self.azcopy_env
            return [*base, "--from-to", "BlobLocal", f"{self.emu.url}/{BUCKET}/{key}/*?{self.sas}", str(dst_dir)], self.azcopy_env
        raise ValueError(tool)

    def run_ferry(self, *argv):
        cmd, env = self.ferry(*argv)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
        return r.stdout

    def listing(self, key):
        """{name: size} of the objects under KEY/, by `ferry ls -r --json`."""
        out = self.run_ferry("ls", "-r", "--json", self.url(key) + "/")
        got = {}
        for line in out.splitlines():
            o = json.loads(line)
            k = o.get("key") or o.get("name") or ""
            if k.endswith("/"):
                continue
            got[k.rsplit("/", 1)[-1]] = o.get("size")
        return got

    def remove(self, key):
        self.run_ferry("rm", "-r", "-q", self.url(key) + "/")


def timed(cmd, env, log, timeout):
    """Run CMD; return (exit status, wall s, user + system s of the child, peak RSS MiB,
    whether it was killed at TIMEOUT s)."""
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(c) for c in cmd], env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        killed = not timer.is_alive() and wall >= timeout
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, killed


def verify_download(fs, dst):
    files = {p.name: p for p in Path(dst).rglob("*") if p.is_file()}
    if set(files) != set(fs.names):
        missing, extra = sorted(set(fs.names) - set(files)), sorted(set(files) - set(fs.names))
        return f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} extra (e.g. {extra[:3]})"
    for n in fs.names:
        if md5_file(files[n]) != fs.md5[n]:
            return f"{n}: bytes differ from the source"
    return None


def verify_upload(fs, target, key):
    got = target.listing(key)
    if set(got) != set(fs.names):
        missing, extra = sorted(set(fs.names) - set(got)), sorted(set(got) - set(fs.names))
        return f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} extra (e.g. {extra[:3]})"
    bad = [n for n, s in got.items() if s != fs.size]
    return f"{len(bad)} objects of the wrong size (e.g. {bad[0]}: {got[bad[0]]})" if bad else None


# ---- report ---------------------------------------------------------------------------


def rate(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.2f}"


def table(records, args, sets):
    rows = {}
    for r in records:
        rows.setdefault((r["target"], r["set"], r["direction"]), {}).setdefault(r["tool"], []).append(r)
    out = ["| target | set | direction | tool | objects/s | MB/s | client CPU s | client CPU per unit | emulator CPU s | wall vs ferry | client CPU vs ferry |",
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for target in args.targets:
        for s in args.sets:
            for d in args.directions:
                tools = rows.get((target, s, d), {})
                fs = sets[s]
                med = {}
                for tool in TOOLS[target]:
                    runs = [r for r in tools.get(tool, []) if r["ok"]]
                    if not runs:
                        if tool in tools:
                            out.append(f"| {target} | {fs.label()} | {d} | {tool} | failed: {tools[tool][-1]['error']} | | | | | | |")
                        continue
                    wall = statistics.median(r["wall_s"] for r in runs)
                    cpu = statistics.median(r["cpu_s"] for r in runs)
                    emu = statistics.median(r["emulator_cpu_s"] for r in runs)
                    med[tool] = (wall, cpu)
                    per = (f"{cpu / fs.files * 1e3:.2f} ms/object" if s == "small"
                           else f"{cpu / (fs.files * fs.size / (1 << 20)) * 1e3:.2f} ms/MiB")
                    vs = "" if tool == "ferry" or "ferry" not in med else f"{wall / med['ferry'][0]:.2f}x"
                    cvs = "" if tool == "ferry" or "ferry" not in med else f"{cpu / med['ferry'][1]:.2f}x"
                    out.append(f"| {target} | {fs.label()} | {d} | {tool} | {rate(fs.files / wall)} | "
                               f"{fs.files * fs.size / wall / 1e6:,.1f} | {cpu:.2f} | {per} | {emu:.2f} | {vs} | {cvs} |")
    return "\n".join(out)


def main(argv):
    args = parse_args(argv)
    if args.check_args:
        return 0
    if args.table_from:
        records = [json.loads(line) for line in open(args.table_from) if line.strip()]
        files = {r["set"]: (r["files"], r["bytes_each"]) for r in records}
        sets = {s: FileSet(s, *files.get(s, (1, 1))) for s in ("small", "large")}
        print(table(records, args, sets))
        return 0
    # SIGTERM unwinds like an exception, so the emulators are stopped (finally, below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    jsonf = open(args.json, "w") if args.json else None
    sets = {"small": FileSet("small", args.small, 16 << 10),
            "large": FileSet("large", args.large, args.large_mib << 20)}
    src = work / "src"
    for s in args.sets:
        print(f"bench-providers: writing {sets[s].label()} under {src}", file=sys.stderr)
        sets[s].write(src)
    emulators = []
    try:
        targets = []
        for t in args.targets:
            if t == "gcs-http":
                emu = start_fake_gcs(args.fake_gcs, work, tls=False)
            elif t == "gcs-h2":
                emu = start_fake_gcs(args.fake_gcs, work, tls=True)
            else:
                emu = start_azurite(args.azurite, work)
            emulators.append(emu)
            tg = Target(emu, args, work)
            tg.run_ferry("mb", f"{'gs' if tg.gcs else 'az'}://{BUCKET}")
            for s in args.sets:
                if "download" in args.directions:
                    tg.run_ferry("cp", "-r", "-q", f"{src / s}/", tg.url(f"data/{s}") + "/")
            targets.append(tg)
            print(f"bench-providers: {t} at {emu.url}", file=sys.stderr)
        records = []
        for k in range(1, args.repeats + 1):
            for tg in targets:
                tools = [t for t in TOOLS[tg.name] if t in args.tools]
                rot = (k - 1) % len(tools)
                tools = tools[rot:] + tools[:rot]
                for s in args.sets:
                    fs = sets[s]
                    for d in args.directions:
                        for tool in tools:
                            key = f"up/{tool}-{k}/{s}" if d == "upload" else f"data/{s}"
                            dst = work / "dst" / f"{tool}-{k}-{s}"
                            if d == "download":
                                dst.mkdir(parents=True)
                            cmd, env = tg.command(tool, d, src / s, key, dst)
                            os.sync()
                            e0 = tg.emu.cpu()
                            log = work / f"{tg.name}-{tool}-{k}-{s}-{d}.log"
                            rc, wall, cpu, rss, killed = timed(cmd, env, log, args.timeout)
                            emu_cpu = tg.emu.cpu() - e0
                            if killed:
                                err = f"killed after {args.timeout:.0f} s"
                            elif rc != 0:
                                err = f"exit {rc}: " + log.read_text(errors="replace").strip()[-300:].replace("\n", " ").replace("|", "/")
                            else:
                                err = verify_upload(fs, tg, key) if d == "upload" else verify_download(fs, dst)
                            rec = {"target": tg.name, "set": s, "files": fs.files, "bytes_each": fs.size,
                                   "direction": d, "tool": tool, "repeat": k, "ok": err is None, "error": err,
                                   "wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "max_rss_mib": round(rss, 1),
                                   "emulator_cpu_s": round(emu_cpu, 3),
                                   "objects_per_s": round(fs.files / wall, 1),
                                   "mb_per_s": round(fs.files * fs.size / wall / 1e6, 2)}
                            records.append(rec)
                            if jsonf:
                                jsonf.write(json.dumps(rec) + "\n")
                                jsonf.flush()
                            print(f"bench-providers: [{k}/{args.repeats}] {tg.name} {s} {d} {tool}: "
                                  f"{wall:.2f} s, cpu {cpu:.2f} s, emulator {emu_cpu:.2f} s"
                                  + (f" FAILED: {err}" if err else ""), file=sys.stderr)
                            # Untimed: remove the copy.
                            if d == "upload":
                                try:
                                    tg.remove(key)
                                except RuntimeError as e:
                                    print(f"bench-providers: cleanup: {e}", file=sys.stderr)
                            else:
                                shutil.rmtree(dst, ignore_errors=True)
        print(table(records, args, sets))
        return 0 if all(r["ok"] for r in records) else 1
    finally:
        for emu in emulators:
            emu.stop()
        if jsonf:
            jsonf.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
