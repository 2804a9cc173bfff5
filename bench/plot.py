"""PNG plots from `ferry bench` JSON lines (crates/bench/src/record.rs has the schema).

    .ferry-run/bench-venv/bin/python bench/plot.py bench-results.jsonl [--out DIR] [--all-runs]
    .ferry-run/bench-venv/bin/python bench/plot.py --perfdiag perfdiag.json --out DIR

One figure per question, each from the records of one workload:

    ttfb-percentiles.png        ttfb-throughput: first-byte time percentile curves (series
                                "ttfb_s": x = percentile 0-100, y = seconds), log y axis,
                                one curve per client and profile, like PerfKitBenchmarker's
                                object_storage_service figure
    throughput-percentiles.png  ttfb-throughput: throughput percentile curves (series
                                "throughput_Bps", x = percentile, y = bytes/s), one panel per
                                op (params.op), one curve per object size (params.object_size)
                                and client, log y axis
    mixed-hol-cdf.png           mixed-hol: small-object latency CDF per client (series
                                "small_latency_s": x = seconds, y = cumulative fraction), log x
    bulk-wan-throughput.png     bulk-wan: aggregate bytes/s vs params.concurrency per client
                                (median over repeats), iperf3 (mode "iperf3") as a dashed line,
                                in two panels never mixed: the counted window after the
                                warm-up (ferry's rows and iperf3: figures.bytes_per_s of
                                records with figures.omit_s) and the peers' pull, which has
                                no counted window (figures.bytes_per_s_with_ramp of the peers
                                and of ferry h1-pool on the same pull)
    small-objects-ops.png       small-objects: objects/s per row, median bar with min-max

With --perfdiag, the document of `ferry perfdiag --json` (crates/bench/src/perfdiag) instead,
which `ferry perfdiag --plots DIR` writes and plots through this script:

    perfdiag-latency.png        per-request time percentile curves (x = percentile, y = ms,
                                log y), one panel per operation (HEAD, small GET, small PUT),
                                one curve per transport
    perfdiag-throughput.png     per-request MB/s percentile curves, one panel per operation
                                and stream count, one curve per transport and object size

Only the latest run (run_id) of each workload in the file is plotted: figures from
different runs are never drawn side by side (--all-runs overrides). Records that are not
"ok" or "errors" (absent peers, failed runs) are left out. A plot whose data is missing
is skipped with a message on stdout; the script fails only on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

USABLE = {"ok", "errors"}


def load(path: Path) -> list[dict]:
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                print(f"plot: {path}:{n}: not JSON ({e}); line ignored")
                continue
            if isinstance(rec, dict) and "workload" in rec:
                out.append(rec)
            else:
                print(f"plot: {path}:{n}: not a bench record; line ignored")
    return out


def latest_run(records: list[dict], workload: str, all_runs: bool) -> list[dict]:
    rs = [r for r in records if r.get("workload") == workload and r.get("status") in USABLE]
    if all_runs or not rs:
        return rs
    last = max(rs, key=lambda r: r.get("time_unix", 0)).get("run_id")
    return [r for r in rs if r.get("run_id") == last]


def label(r: dict) -> str:
    return r.get("variant") or r.get("mode") or "?"


def series(r: dict, name: str):
    s = (r.get("series") or {}).get(name)
    if not s:
        return None
    pts = [(float(x), float(y)) for x, y in s if y is not None]
    return pts or None


def human_bytes(n) -> str:
    try:
        n = float(n)
    except (TypeError, ValueError):
        return str(n)
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Plotter:
    def __init__(self, records: list[dict], out: Path, all_runs: bool):
        self.records, self.out, self.all_runs = records, out, all_runs
        self.written: list[Path] = []
        self.skipped: list[str] = []

    def skip(self, name: str, why: str):
        self.skipped.append(name)
        print(f"plot: skipped {name}: {why}")

    def save(self, fig, name: str):
        path = self.out / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        self.written.append(path)
        print(f"plot: wrote {path}")

    @staticmethod
    def _finish(ax, xlabel: str, ylabel: str, title: str, legend_size: int = 8):
        """The end of every line plot: axis labels, title, a grid on major and minor ticks
        (log axes need the minor ones), the legend."""
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=legend_size)

    def _curves(self, ax, items):
        """items: (key for colour, label, points); the first curve of a key gets the label."""
        n = len({i[0] for i in items})
        # More keys than tab10's colours (the peers' rows): tab20, so none repeats up to 20.
        cmap, ncol = (plt.get_cmap("tab10"), 10) if n <= 10 else (plt.get_cmap("tab20"), 20)
        keys: list = []
        for key, lab, pts in items:
            legend = None if key in keys else lab
            if key not in keys:
                keys.append(key)
            xs, ys = zip(*sorted(pts))
            ax.plot(xs, ys, color=cmap(keys.index(key) % ncol), label=legend, linewidth=1.4)

    def _curve_plot(self, name: str, workload: str, series_name: str, key, positive: int):
        """A figure with one curve per record of `workload`'s latest run that has series
        `series_name`, named and coloured by `key(record)`; points whose coordinate
        `positive` (0: x, 1: y) is not above 0 are dropped (log axis). (fig, ax), or None
        after saying why it is skipped."""
        items = []
        for r in latest_run(self.records, workload, self.all_runs):
            pts = [(x, y) for x, y in (series(r, series_name) or []) if (x, y)[positive] > 0]
            if pts:
                items.append((key(r), key(r), pts))
        if not items:
            self.skip(name, f"no {workload} record with a series '{series_name}'")
            return None
        fig, ax = plt.subplots(figsize=(8, 5))
        self._curves(ax, items)
        return fig, ax

    def ttfb(self):
        name = "ttfb-percentiles.png"
        drawn = self._curve_plot(name, "ttfb-throughput", "ttfb_s", lambda r: f"{label(r)} ({r.get('profile') or '-'})", 1)
        if drawn is None:
            return
        fig, ax = drawn
        ax.set_yscale("log")
        ax.set_xlim(0, 100)
        self._finish(ax, "percentile", "time to first byte (s, log scale)", "ttfb-throughput: first-byte time percentiles")
        self.save(fig, name)

    def throughput(self):
        name = "throughput-percentiles.png"
        rs = latest_run(self.records, "ttfb-throughput", self.all_runs)
        by_op: dict[str, list] = defaultdict(list)
        for r in rs:
            pts = series(r, "throughput_Bps")
            if not pts:
                continue
            p = r.get("params") or {}
            op = str(p.get("op", "?"))
            size = p.get("object_size", p.get("size"))
            k = f"{label(r)} ({r.get('profile') or '-'}), {human_bytes(size)}"
            by_op[op].append(((size, label(r)), k, [(x, y) for x, y in pts if y > 0]))
        by_op = {op: [i for i in items if i[2]] for op, items in by_op.items()}
        by_op = {op: items for op, items in by_op.items() if items}
        if not by_op:
            return self.skip(name, "no ttfb-throughput record with a series 'throughput_Bps'")
        ops = sorted(by_op)
        fig, axes = plt.subplots(1, len(ops), figsize=(7 * len(ops), 5), squeeze=False)
        cmap = plt.get_cmap("tab10")
        styles = ["-", "--", ":", "-."]

        def size_key(s):
            try:
                return float(s)
            except (TypeError, ValueError):
                return math.inf

        for ax, op in zip(axes[0], ops):
            # Colour per object size, line style per client.
            sizes = sorted({i[0][0] for i in by_op[op]}, key=size_key)
            clients = sorted({i[0][1] for i in by_op[op]})
            # One legend entry per row: its repeats are drawn alike, labelled once.
            labelled: set = set()
            for (size, client), lab, pts in sorted(by_op[op], key=lambda i: (size_key(i[0][0]), i[0][1])):
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, color=cmap(sizes.index(size) % 10), linestyle=styles[clients.index(client) % len(styles)],
                        label=None if lab in labelled else lab, linewidth=1.4)
                labelled.add(lab)
            ax.set_yscale("log")
            ax.set_xlim(0, 100)
            self._finish(ax, "percentile", "throughput (bytes/s, log scale)", f"ttfb-throughput: {op} throughput percentiles per object size", 7)
        self.save(fig, name)

    def mixed_hol(self):
        name = "mixed-hol-cdf.png"
        drawn = self._curve_plot(name, "mixed-hol", "small_latency_s", label, 0)
        if drawn is None:
            return
        fig, ax = drawn
        # Unloaded rows dashed, so the loaded ones stand out.
        for line in ax.get_lines():
            if line.get_label().endswith("unloaded"):
                line.set_linestyle("--")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.0)
        self._finish(ax, "small-object latency (s, log scale)", "fraction of small objects", "mixed-hol: small-object latency CDF, large transfers running")
        self.save(fig, name)

    def bulk_wan(self):
        name = "bulk-wan-throughput.png"
        panels = bulk_wan_points(latest_run(self.records, "bulk-wan", self.all_runs))
        shown = [(key, title) for key, title in BULK_WAN_PANELS if panels[key]["clients"]]
        if not shown:
            return self.skip(name, "no bulk-wan record with params.concurrency and figures.bytes_per_s")
        fig, axes = plt.subplots(1, len(shown), figsize=(8 * len(shown), 5), squeeze=False)
        cmap = plt.get_cmap("tab10")
        # One colour per client across both panels.
        names = sorted({lab for key, _ in shown for lab in panels[key]["clients"]})
        for ax, (key, title) in zip(axes[0], shown):
            clients, ceiling = panels[key]["clients"], panels[key]["ceiling"]
            for lab, pts in sorted(clients.items()):
                xs = sorted(pts)
                ax.plot(xs, [statistics.median(pts[x]) * 8 / 1e9 for x in xs], marker="o", color=cmap(names.index(lab) % 10), label=lab)
            if ceiling:
                xs = sorted(ceiling)
                ax.plot(xs, [statistics.median(ceiling[x]) * 8 / 1e9 for x in xs], "k--", marker="x", label="iperf3 -P N")
            elif key == "steady":
                print(f"plot: {name}: no iperf3 record, drawn without the ceiling line")
            ax.set_xscale("log", base=2)
            ticks = sorted({x for pts in clients.values() for x in pts} | set(ceiling))
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{x:g}" for x in ticks])
            ax.set_ylim(bottom=0)
            self._finish(ax, "concurrent transfers", "aggregate throughput (Gbit/s)", title)
        self.save(fig, name)

    def small_objects(self):
        name = "small-objects-ops.png"
        rs = latest_run(self.records, "small-objects", self.all_runs)
        rows: dict[str, list[float]] = {}
        for r in rs:
            v = (r.get("figures") or {}).get("objects_per_s")
            if v is not None:
                rows.setdefault(label(r), []).append(float(v))
        if not rows:
            return self.skip(name, "no small-objects record with figures.objects_per_s")
        labels = list(rows)
        med = [statistics.median(rows[k]) for k in labels]
        lo = [m - min(rows[k]) for m, k in zip(med, labels)]
        hi = [max(rows[k]) - m for m, k in zip(med, labels)]
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels) + 2), 5))
        ferry = [not (rs_mode_is_peer(self.records, k)) for k in labels]
        colors = ["tab:blue" if f else "tab:gray" for f in ferry]
        ax.bar(range(len(labels)), med, yerr=[lo, hi], capsize=4, color=colors)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("objects/s (median, min-max over repeats)")
        ax.set_title("small-objects: GETs per second (blue: ferry, grey: peers)")
        ax.grid(True, axis="y", alpha=0.3)
        self.save(fig, name)

    def all(self):
        for f in (self.ttfb, self.throughput, self.mixed_hol, self.bulk_wan, self.small_objects):
            f()


# bulk-wan's two measures, never drawn on one axis: a ferry row's and iperf3's counted
# window after their warm-up (figures.omit_s says a record has one), and the peers' pull
# (records without a counted window: each peer and ferry h1-pool on the same pull, whole
# objects timed from the first request, figures.bytes_per_s_with_ramp). A peer's
# bytes_per_s is its whole run, handshakes and slow start inside: beside a steady state it
# would read as a slower client. The cold rows' and iperf3's own "with ramp" figures span
# other durations (iperf3's is its whole -t): they stay in the table, not in this panel.
BULK_WAN_PANELS = [
    ("steady", "bulk-wan: counted window after the warm-up (median of repeats)"),
    ("whole", "bulk-wan: the peers' pull, whole run from the first request (ferry h1-pool on the same pull)"),
]


def bulk_wan_points(rs: list[dict]) -> dict:
    """{"steady" | "whole": {"clients": {label: {concurrency: [bytes/s, ...]}},
    "ceiling": {concurrency: [bytes/s, ...]}}}: each record's figure for each measure it
    has, iperf3's (mode "iperf3") as the ceiling; records without params.concurrency are
    left out."""
    out = {key: {"clients": defaultdict(lambda: defaultdict(list)), "ceiling": defaultdict(list)} for key, _ in BULK_WAN_PANELS}
    for r in rs:
        f = r.get("figures") or {}
        conc = (r.get("params") or {}).get("concurrency")
        if conc is None:
            continue
        measures = {"steady": f.get("bytes_per_s")} if "omit_s" in f else {"whole": f.get("bytes_per_s_with_ramp")}
        for key, v in measures.items():
            if v is None:
                continue
            if r.get("mode") == "iperf3":
                out[key]["ceiling"][float(conc)].append(float(v))
            else:
                out[key]["clients"][label(r)][float(conc)].append(float(v))
    return out


def rs_mode_is_peer(records: list[dict], variant: str) -> bool:
    """A row is a peer's when its client block names a peer (peers.rs writes client.peer)."""
    return any(label(r) == variant and isinstance(r.get("client"), dict) and "peer" in r["client"] for r in records)


def percentile_points(samples: list[float]) -> list[tuple[float, float]]:
    """A sorted sample as (percentile, value) by nearest rank, as crates/bench's measure.rs draws it."""
    n = len(samples)
    return [(100.0 * (i + 1) / n, v) for i, v in enumerate(sorted(samples))]


def perfdiag_plots(doc: dict, out: Path) -> int:
    """The two perfdiag figures; returns how many were written."""
    written = 0
    lat = [r for r in doc.get("latency", []) if r.get("samples_s")]
    ops = [op for op in ("head", "get_small", "put_small") if any(r["op"] == op for r in lat)]
    if ops:
        fig, axes = plt.subplots(1, len(ops), figsize=(5 * len(ops), 4), squeeze=False)
        for ax, op in zip(axes[0], ops):
            for r in (r for r in lat if r["op"] == op):
                pts = percentile_points([s * 1e3 for s in r["samples_s"]])
                ax.plot([p for p, _ in pts], [v for _, v in pts], marker=".", label=r["transport"])
            ax.set_yscale("log")
            ax.set_xlabel("percentile")
            ax.set_ylabel("ms per request")
            ax.set_title(op)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"ferry perfdiag {doc.get('url', '')}: latency")
        fig.tight_layout()
        fig.savefig(out / "perfdiag-latency.png", dpi=110)
        plt.close(fig)
        print(f"plot: wrote {out / 'perfdiag-latency.png'}")
        written += 1
    else:
        print("plot: skipped perfdiag-latency.png: no latency samples")
    tp = [r for r in doc.get("throughput", []) if r.get("samples_s")]
    panels = sorted({(r["op"], r["streams"]) for r in tp})
    if panels:
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
        for ax, (op, streams) in zip(axes[0], panels):
            for r in (r for r in tp if r["op"] == op and r["streams"] == streams):
                size = r["object_bytes"]
                pts = percentile_points([size / s / 1e6 for s in r["samples_s"] if s > 0])
                ax.plot([p for p, _ in pts], [v for _, v in pts], marker=".", label=f"{r['transport']} {human_bytes(size)}")
            ax.set_yscale("log")
            ax.set_xlabel("percentile")
            ax.set_ylabel("MB/s per request")
            ax.set_title(f"{op} x{streams}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"ferry perfdiag {doc.get('url', '')}: per-request throughput")
        fig.tight_layout()
        fig.savefig(out / "perfdiag-throughput.png", dpi=110)
        plt.close(fig)
        print(f"plot: wrote {out / 'perfdiag-throughput.png'}")
        written += 1
    else:
        print("plot: skipped perfdiag-throughput.png: no throughput samples")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="PNG plots from ferry bench JSON lines.")
    ap.add_argument("results", type=Path, nargs="?", help="a JSON-lines file written by ferry bench --out")
    ap.add_argument("--perfdiag", type=Path, default=None, help="a document of ferry perfdiag --json instead")
    ap.add_argument("--out", type=Path, default=None, help="directory for the PNGs (default: beside the results, <name>-plots/)")
    ap.add_argument("--all-runs", action="store_true", help="plot every run in the file, not only the latest of each workload")
    a = ap.parse_args(argv)
    if a.perfdiag is not None:
        try:
            doc = json.loads(a.perfdiag.read_text())
        except (OSError, ValueError) as e:
            print(f"plot: {a.perfdiag}: {e}", file=sys.stderr)
            return 2
        out = a.out or a.perfdiag.parent
        out.mkdir(parents=True, exist_ok=True)
        n = perfdiag_plots(doc, out)
        print(f"plot: {n} plot(s) written to {out}")
        return 0 if n else 1
    if a.results is None:
        ap.error("a results file, or --perfdiag FILE")
    if not a.results.is_file():
        print(f"plot: {a.results}: no such file", file=sys.stderr)
        return 2
    out = a.out or a.results.with_name(a.results.stem + "-plots")
    out.mkdir(parents=True, exist_ok=True)
    p = Plotter(load(a.results), out, a.all_runs)
    p.all()
    print(f"plot: {len(p.written)} plot(s) written to {out}, {len(p.skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
