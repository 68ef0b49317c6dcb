#!/usr/bin/env python3
"""bench/eval/report.py: evaluation.md and its plots, from an evaluation's raw JSON.

    report.py --raw DIR --out DIR

reads DIR/*.json as bench/eval/run.sh names them (README.md lists the names)
and writes OUT/evaluation.md and OUT/eval/*.png. Every number and every
sentence about the numbers is computed here from the raw files: the report
is regenerated, never edited. Sections whose raw files are absent are
reported as not run.

Three ideas run through it:
  * A case is REPEAT runs; it is shown as the median with the smallest and
    largest run beside it (Spread), never as one number.
  * A ratio is taken run by run, each result over the ceiling that the same
    run (or the same repeat of the evaluation) measured, and then the median
    of those ratios is shown, so a slow moment hits result and ceiling alike.
  * Where a result falls short of its ceiling by more than SHORT_MARGIN, the
    text says so and names a likely cause from CAUSES, a table keyed by layer,
    transport and workload; the table is the only prose written ahead.
"""
import argparse
import glob
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

GIB = 2 ** 30
MIB = 2 ** 20
RWS = ["read", "write", "randread", "randwrite"]
# A bandwidth result under this fraction of its ceiling is a shortfall.
SHORT_MARGIN = 0.5
LAYER_LABEL = {"lib": "liblodefs", "fuse": "lode-fuse (FUSE mount)",
               "preload": "preload library", "medium": "fio on the medium"}
TP_LABEL = {"tcp": "tcp", "shm": "shm", "rdma": "rdma"}
BACKING_LABEL = {"ram": "RAM", "disk": "disk"}

# Known causes, keyed by what fell short: (short name, explanation). Stated
# as "likely cause": the run measures the symptom, these name the mechanism
# we know to be there. The text names a cause by its short name; the report
# ends with the explanation of each one it named.
CAUSES = {
    "tcp-bulk": ("tcp has no one-sided RMA",
                 "over tcp UCX emulates RMA, so large values move as rendezvous messages "
                 "through the socket and every byte is copied by the kernel and by the CPU "
                 "on both sides (docs/decisions/0004); rdma would place them in registered "
                 "memory with no host copy, shm with one"),
    "tcp-small": ("tcp is host-mediated per I/O",
                  "each 4 KiB request over tcp is a socket send and receive, with kernel "
                  "crossings, on each side of every I/O; rdma's one-sided reads skip the "
                  "server's CPU and the kernel"),
    "shm-bulk": ("one copy and one target thread",
                 "over shm the bytes are still copied once through shared memory (the "
                 "memcpy ceiling's work) and each request is handled by one target thread"),
    "shm-small": ("per-request work in the target thread",
                  "each 4 KiB request is an Active Message handled by one target thread; "
                  "per-request work, not bytes, bounds it"),
    "fuse": ("FUSE's kernel crossings",
             "every I/O through the FUSE mount goes into the kernel, out to lode-fuse's "
             "daemon and back, with a copy each way, before liblodefs sees it"),
    "sync": ("one I/O in flight per job",
             "liblodefs and fio's psync jobs (also under the preload library) block on "
             "each call, so 4 KiB IOPS are bounded by jobs / round-trip latency of a "
             "request through the client, the transport and loded, where fio on the "
             "medium pays only a memory copy or a device I/O"),
    "disk-write": ("durable commits on disk",
                   "disk-backed targets make every update durable (group commit over "
                   "io_uring, flushed to the disk) before acknowledging it; fio on the "
                   "medium waits for no flush"),
    "disk-read": ("engine reads and checksums on disk",
                  "disk-backed targets read their extent files through io_uring and check "
                  "the CRC32C of every block read, on top of the request path"),
    "cores": ("{nproc} cores shared by client, server and fio",
              "this machine has {nproc} cores, shared by the client threads, the targets' "
              "threads (which busy-poll) and fio; past {nproc} busy threads everything "
              "time-shares the same cores, and other people's work takes its share too"),
    "device-depth": ("depth-1 device latency",
                     "at depth 1 each job waits out the device's latency; small-block IOPS "
                     "grow only with concurrency"),
}


# ---- loading -----------------------------------------------------------------

class Spread:
    """Median and range of a case's runs."""

    def __init__(self, vals):
        self.vals = sorted(vals)
        self.n = len(vals)
        self.med = statistics.median(vals) if vals else None
        self.lo = min(vals) if vals else None
        self.hi = max(vals) if vals else None

    def __bool__(self):
        return self.n > 0


def unit_of(bs):
    return "GiB/s" if bs == "1m" else "K IOPS"


def fmt(v, bs):
    if v is None:
        return "—"
    return "%.2f" % v if bs == "1m" else "%.1f" % v


def fmt_spread(s, bs, unit=True):
    if not s:
        return "—"
    u = " " + unit_of(bs) if unit else ""
    if s.n == 1:
        return fmt(s.med, bs) + u
    return "%s (%s–%s)%s" % (fmt(s.med, bs), fmt(s.lo, bs), fmt(s.hi, bs), u)


def fmt_ratio(r, kind):
    if r is None:
        return "—"
    return pct(r) + "%" if kind == "bw" else "%.2f×" % r


def pct(r):
    """A ratio as a percentage: whole numbers, one decimal below 10%."""
    return "%.1f" % (100 * r) if r < 0.0995 else "%.0f" % (100 * r)


def fmt_ratio_spread(s, kind):
    """A Spread of ratios: '86% (74–98%)', '5.59× (5.1–6.0×)'."""
    if not s:
        return "—"
    if s.n == 1:
        return fmt_ratio(s.med, kind)
    if kind == "bw":
        return "%s%% (%s–%s%%)" % (pct(s.med), pct(s.lo), pct(s.hi))
    return "%.2f× (%.2f–%.2f×)" % (s.med, s.lo, s.hi)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def fio_value(d, bs):
    """GiB/s (1m) or K IOPS (4k) of a fio JSON, reads or writes, whichever moved."""
    job = d["jobs"][0]
    side = job["read"] if job["read"]["io_bytes"] else job["write"]
    return side["bw_bytes"] / GIB if bs == "1m" else side["iops"] / 1e3


def bench_value(d, bs):
    r = d["result"]
    return r["bw_mib_s"] / 1024 if bs == "1m" else r["iops"] / 1e3


def bench_ceiling(d, bs, tp):
    """The ceiling a `lode bench` run is read against: (label, value, kind).

    1 MiB over shm or rdma: memcpy (moving the bytes once); 1 MiB over tcp:
    the loopback TCP stream; 4 KiB: loopback TCP round trips with as many in
    flight as the run kept (depth D; depth 1 in runs made before it was).
    Values in the result's unit (GiB/s or K/s).
    """
    c = d.get("ceilings") or {}
    if bs == "1m" and tp != "tcp":
        m = c.get("memcpy")
        return ("memcpy, 1 thread", m["bw_mib_s"] / 1024, "bw") if m else None
    t = c.get("tcp")
    if not t:
        return None
    if t["kind"] == "stream":
        return ("loopback TCP stream, 1 thread", t["bw_mib_s"] / 1024, "bw")
    return ("loopback TCP 4 KiB round trips at the same depth" if t.get("depth", 1) > 1 else
            "loopback TCP 4 KiB round trips, depth 1", t["round_trips_s"] / 1e3, "rt")


class Raw:
    """Every raw file of one evaluation, grouped by case."""

    def __init__(self, raw):
        self.dir = raw
        mp = os.path.join(raw, "meta.json")
        self.meta = load_json(mp) if os.path.exists(mp) else {}
        self.device = {}    # (rw, bs, jobs) -> [value]
        self.net = {}       # (tp, targets, rw, bs, threads) -> [(value, ceiling)]
        self.e2e = {}       # (backing, where, wl) -> {rep: value}
        self.e2e_ceil = {}  # (backing, tp, wl) -> {rep: ceiling tuple} from lib runs
        self.warnings = []
        for path in sorted(glob.glob(os.path.join(raw, "*.json"))):
            name = os.path.basename(path)[:-5]
            parts = name.split(".")
            try:
                self._add(parts, path)
            except (KeyError, IndexError, ValueError, TypeError) as e:
                self.warnings.append("%s could not be read (%s)" % (name, e))

    def _add(self, parts, path):
        sec = parts[0]
        if sec == "device":
            _, rw, bs, jobs, rep = parts
            d = load_json(path)
            self.device.setdefault((rw, bs, int(jobs[1:])), []).append(fio_value(d, bs))
        elif sec == "net":
            _, tp, t, rw, bs, j, rep = parts
            d = load_json(path)
            self._check_bench(d, tp, ".".join(parts))
            self.net.setdefault((tp, int(t[1:]), rw, bs, int(j[1:])), []).append(
                (bench_value(d, bs), bench_ceiling(d, bs, tp)))
        elif sec == "e2e":
            _, backing, where, wl, rep = parts
            bs = wl.split("-")[1]
            d = load_json(path)
            if "jobs" in d:
                v = fio_value(d, bs)
            else:
                tp = where.split("-")[0]
                self._check_bench(d, tp, ".".join(parts))
                v = bench_value(d, bs)
                self.e2e_ceil.setdefault((backing, tp, wl), {})[rep] = d.get("ceilings") or {}
            self.e2e.setdefault((backing, where, wl), {})[rep] = v

    def _check_bench(self, d, tp, name):
        if not d.get("ok", False):
            self.warnings.append("%s reports an error: %s" % (name, d.get("error")))
        got = (d.get("connection") or {}).get("transport")
        if got != tp:
            self.warnings.append("%s ran over %s, not %s" % (name, got, tp))


# ---- figures -----------------------------------------------------------------

def style_axes(ax, title, xlabel, ylabel):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def save(fig, out, name):
    path = os.path.join(out, "eval", name)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "eval/" + name


def net_ceiling_median(raw, bs, tp):
    """Median over the net section's runs of one ceiling (the memcpy for 1m, etc.)."""
    vals = []
    for (t, _, _, b, _), runs in raw.net.items():
        if b == bs and t == tp:
            vals += [c[1] for _, c in runs if c]
    return statistics.median(vals) if vals else None


def fig_device(raw, out):
    jobs = sorted({k[2] for k in raw.device})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    refs = {"1m": [("memcpy, 1 thread", net_ceiling_median(raw, "1m", "shm")),
                   ("loopback TCP stream", net_ceiling_median(raw, "1m", "tcp"))],
            "4k": [("loopback TCP 4 KiB round trips", net_ceiling_median(raw, "4k", "tcp"))]}
    for ax, bs in zip(axes, ["1m", "4k"]):
        best = 0
        for rw in RWS:
            xs, med, lo, hi = [], [], [], []
            for j in jobs:
                s = Spread(raw.device.get((rw, bs, j), []))
                if s:
                    xs.append(j)
                    med.append(s.med)
                    lo.append(s.med - s.lo)
                    hi.append(s.hi - s.med)
                    best = max(best, s.med)
            if xs:
                ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=rw)
        for (label, v), ls in zip(refs[bs], ["--", ":"]):
            if v:
                ratio = best / v if v else 0
                ax.axhline(v, color="k", ls=ls, lw=1,
                           label="%s %s %s (best device / it = %.2f×)" % (
                               label, fmt(v, bs), "GiB/s" if bs == "1m" else "K/s", ratio))
        ax.set_xscale("log", base=2)
        ax.set_xticks(jobs)
        ax.set_xticklabels([str(j) for j in jobs])
        ax.set_ylim(bottom=0)
        style_axes(ax, "%s blocks, io_uring, depth 1 per job, O_DIRECT" %
                   ("1 MiB" if bs == "1m" else "4 KiB"), "fio jobs", unit_of(bs))
        ax.legend(fontsize=7)
    fig.suptitle("Device ceiling: fio on the storage path (median, bars = min–max over runs)")
    return save(fig, out, "device.png")


def net_cell(raw, tp, t, rw, bs, n):
    """(Spread of results, Spread of per-run ratios, ceiling label, kind, Spread of ceilings)."""
    runs = raw.net.get((tp, t, rw, bs, n), [])
    vals = [v for v, _ in runs]
    ceils = [c for _, c in runs if c]
    ratios = [v / c[1] for v, c in runs if c and c[1]]
    label, kind = (ceils[0][0], ceils[0][2]) if ceils else ("no ceiling", "bw")
    return Spread(vals), Spread(ratios), label, kind, Spread([c[1] for c in ceils])


def fig_heatmap(raw, out, rw, bs, tps, targets, threads):
    fig, axes = plt.subplots(1, len(tps), figsize=(5.4 * len(tps), 5), squeeze=False,
                             layout="constrained")
    for ax, tp in zip(axes[0], tps):
        grid = [[net_cell(raw, tp, t, rw, bs, n)[0].med or 0 for n in threads] for t in targets]
        im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
        vmin = min(min(r) for r in grid)
        vspan = (max(max(r) for r in grid) - vmin) or 1
        label, kind, ceil = "no ceiling", "bw", Spread([])
        for yi, t in enumerate(targets):
            for xi, n in enumerate(threads):
                s, r, label_c, kind_c, ceil_c = net_cell(raw, tp, t, rw, bs, n)
                if not s:
                    ax.text(xi, yi, "not run", ha="center", va="center", fontsize=8, color="w")
                    continue
                label, kind = label_c, kind_c
                ceil = Spread(ceil.vals + ceil_c.vals)
                txt = "%s\n(%s–%s)\n%s\nof ceiling" % (fmt(s.med, bs), fmt(s.lo, bs),
                                                         fmt(s.hi, bs), fmt_ratio_spread(r, kind))
                if kind == "rt" and ceil_c:
                    # The round-trip ceiling runs at each cell's own depth.
                    txt += " %s" % fmt(ceil_c.med, bs)
                ax.text(xi, yi, txt, ha="center", va="center",
                        fontsize=7.5 if len(threads) <= 3 else 6,
                        color="k" if (grid[yi][xi] - vmin) / vspan > 0.6 else "w")
        ax.set_xticks(range(len(threads)))
        ax.set_xticklabels([str(n) for n in threads])
        ax.set_yticks(range(len(targets)))
        ax.set_yticklabels([str(t) for t in targets])
        ax.set_xlabel("client threads (lode bench --numjobs)")
        ax.set_ylabel("server targets (loded --targets)")
        if kind == "rt":
            ax.set_title("%s — ceiling: loopback TCP 4 KiB round trips\nat each cell's depth "
                         "(as many in flight as the cell), K IOPS in the cell" % TP_LABEL[tp],
                         fontsize=9)
        else:
            ax.set_title("%s — ceiling: %s\n%s" % (TP_LABEL[tp], label, fmt_spread(ceil, bs)),
                         fontsize=9)
        fig.colorbar(im, ax=ax, label=unit_of(bs))
    what = "1 MiB sequential reads" if (rw, bs) == ("read", "1m") else "%s %s" % (
        "4 KiB" if bs == "4k" else "1 MiB", rw)
    fig.suptitle("Data plane, %s: median (min–max) and median ratio to the same run's ceiling"
                 % what, fontsize=11)
    return save(fig, out, "net_%s_%s.png" % (rw, bs))


E2E_WL = ["read-1m", "write-1m", "randread-4k", "randwrite-4k"]


def e2e_where(raw, backing):
    tps = sorted({w.split("-")[0] for (b, w, _) in raw.e2e if b == backing and w != "medium"},
                 key=lambda t: ["tcp", "shm", "rdma"].index(t) if t in TP_LABEL else 9)
    return tps


def e2e_case(raw, backing, where, wl):
    """(Spread of values, Spread of per-repeat ratios to the medium)."""
    runs = raw.e2e.get((backing, where, wl), {})
    med = raw.e2e.get((backing, "medium", wl), {})
    ratios = [v / med[rep] for rep, v in runs.items() if med.get(rep)]
    return Spread(list(runs.values())), Spread(ratios)


def e2e_transport_ceiling(raw, backing, tp, wl):
    """Spread of the lib runs' ceiling for tp: memcpy / tcp stream (1m), tcp round trips (4k)."""
    bs = wl.split("-")[1]
    vals = []
    for c in raw.e2e_ceil.get((backing, tp, wl), {}).values():
        if bs == "1m" and tp != "tcp" and c.get("memcpy"):
            vals.append(c["memcpy"]["bw_mib_s"] / 1024)
        elif c.get("tcp"):
            t = c["tcp"]
            vals.append(t["bw_mib_s"] / 1024 if t["kind"] == "stream" else t["round_trips_s"] / 1e3)
    return Spread(vals)


def fig_e2e(raw, out, backing, jobs):
    tps = e2e_where(raw, backing)
    layers = ["lib", "fuse", "preload"]
    fig, axes = plt.subplots(1, 4, figsize=(19, 5.4), layout="constrained")
    colors = {"lib": "tab:blue", "fuse": "tab:orange", "preload": "tab:green"}
    for ax, wl in zip(axes, E2E_WL):
        bs = wl.split("-")[1]
        width = 0.8 / len(layers)
        top, low = 0, float("inf")
        for li, layer in enumerate(layers):
            for ti, tp in enumerate(tps):
                s, r = e2e_case(raw, backing, "%s-%s" % (tp, layer), wl)
                if not s:
                    continue
                x = ti + (li - 1) * width
                ax.bar(x, s.med, width, color=colors[layer],
                       yerr=[[s.med - s.lo], [s.hi - s.med]], capsize=3,
                       label=LAYER_LABEL[layer] if ti == 0 else None)
                if r:
                    ax.annotate(fmt_ratio(r.med, "bw"), (x, s.hi), xytext=(0, 2),
                                textcoords="offset points", ha="center", va="bottom",
                                fontsize=7)
                top = max(top, s.hi)
                low = min(low, s.lo) if s.lo > 0 else low
        med = Spread(list(raw.e2e.get((backing, "medium", wl), {}).values()))
        if med:
            ax.axhline(med.med, color="k", ls="--", lw=1.2,
                       label="medium ceiling %s" % fmt_spread(med, bs))
            ax.axhspan(med.lo, med.hi, color="k", alpha=0.08)
            top = max(top, med.hi)
            low = min(low, med.lo)
        tlines = []
        for tp, ls in zip(tps, [":", "-."]):
            c = e2e_transport_ceiling(raw, backing, tp, wl)
            if c and (bs == "1m" or tp == "tcp"):
                name = {"1m": "memcpy" if tp != "tcp" else "TCP stream",
                        "4k": "TCP 4K round trips at the run's depth"}[bs]
                tlines.append((c, ls, "%s %s" % (name, fmt_spread(c, bs))))
                if c.med < 3 * max(top, 1e-9):
                    top = max(top, c.med)
        # Bars far below the ceiling would vanish on a linear axis: then log.
        log = top and low < float("inf") and top / low > 20
        if log:
            ax.set_yscale("log")
            ax.set_ylim(low / 2, top * 4)
        else:
            ax.set_ylim(0, top * 1.35 if top else 1)
        for c, ls, label in tlines:
            off = c.med > ax.get_ylim()[1]
            ax.axhline(c.med, color="grey", ls=ls, lw=1,
                       label=label + (" (above the axis)" if off else ""))
        ax.set_xticks(range(len(tps)))
        ax.set_xticklabels([TP_LABEL[t] for t in tps])
        njobs = 1 if bs == "1m" else jobs
        style_axes(ax, "%s, %d job%s (psync, O_DIRECT)" % (wl, njobs, "" if njobs == 1 else "s"),
                   "transport", unit_of(bs) + (" (log scale)" if log else ""))
        ax.legend(fontsize=6.5, loc="upper left")
    fig.suptitle("End to end, %s-backed targets: median, bars = min–max, label = median "
                 "ratio to the medium ceiling" % ("RAM" if backing == "ram" else "disk"),
                 fontsize=11)
    return save(fig, out, "e2e_%s.png" % backing)


# ---- text --------------------------------------------------------------------

def cause(key, meta, used):
    """'likely cause: <short name>'; remembers key in used for the closing list."""
    if key not in used:
        used.append(key)
    return "likely cause: *%s*" % CAUSES[key][0].format(
        nproc=meta.get("machine", {}).get("nproc", "?"))


def section_causes(meta, used):
    if not used:
        return []
    nproc = meta.get("machine", {}).get("nproc", "?")
    lines = ["## Likely causes named above", "",
             "Known mechanisms, not measurements: each is named where a result falls "
             "short of its ceiling in the way it predicts.", ""]
    for k in used:
        title, text = CAUSES[k]
        lines.append("- *%s*: %s." % (title.format(nproc=nproc), text.format(nproc=nproc)))
    return lines + [""]


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def section_run(raw):
    m = raw.meta
    mc = m.get("machine", {})
    st = mc.get("storage", {})
    pr = m.get("cpu_pressure", [])
    lines = ["## The run", ""]
    lines.append("- mode: **%s**; command: `%s`" % (m.get("mode", "?"), m.get("command", "?")))
    lines.append("- date: %s; git commit `%s`%s" % (
        m.get("date", "?"), m.get("git_commit", "?")[:12],
        " with uncommitted changes" if m.get("git_dirty") else ""))
    lines.append("- machine: %s, %s cores, %s GiB memory, kernel %s; %s, UCX %s" % (
        mc.get("cpu_model", "?"), mc.get("nproc", "?"), mc.get("mem_gib", "?"),
        mc.get("kernel", "?"), mc.get("fio", "fio ?"), mc.get("ucx", "?")))
    lines.append("- storage path (disk-backed targets, device ceiling): %s on %s (%s); "
                 "RAM-backed targets on /dev/shm (tmpfs)" % (
                     st.get("path", "?"), st.get("source", "?"), st.get("fstype", "?")))
    rt = m.get("runtime_s", {})
    lines.append("- %s run%s per case; seconds measured per run: device %g, data plane %g, "
                 "end to end %g" % (m.get("repeat", "?"), "" if m.get("repeat") == 1 else "s",
                                    rt.get("device", 0), rt.get("net", 0), rt.get("e2e", 0)))
    lines.append("- transports measured: %s; rdma: %s" % (
        ", ".join(m.get("transports", [])) or "none", m.get("rdma", "?")))
    secs = m.get("section_s", {})
    lines.append("- time taken: %s (total %dm%02ds)" % (
        ", ".join("%s %dm%02ds" % (k, v // 60, v % 60) for k, v in sorted(secs.items())),
        m.get("elapsed_s", 0) // 60, m.get("elapsed_s", 0) % 60))
    if pr:
        a10 = [p[1] for p in pr]
        lines.append("- CPU pressure during the run (/proc/pressure/cpu, `some` avg10, "
                     "sampled every 5 s): median %.1f%%, max %.1f%% over %d samples — the "
                     "share of time some runnable task waited for a CPU" % (
                         statistics.median(a10), max(a10), len(a10)))
    if m.get("failures"):
        lines.append("- **runs that failed** (missing below): %s" % ", ".join(m["failures"]))
    for w in raw.warnings:
        lines.append("- warning: %s" % w)
    return lines


def section_device(raw, figs, used):
    lines = ["## 1. Device ceilings", ""]
    if not raw.device:
        return lines + ["Not run in this evaluation.", ""]
    meta = raw.meta
    jobs = sorted({k[2] for k in raw.device})
    lines += ["fio `--ioengine=io_uring --direct=1 --iodepth=1` on files in the storage "
              "path, jobs × block size × workload; each job has a file of its own. "
              "This is the raw device's ceiling; the data-plane runs' memcpy and loopback "
              "TCP ceilings are drawn beside it.", "",
              "![device](%s)" % figs["device"], ""]
    for bs in ["1m", "4k"]:
        rows = []
        for rw in RWS:
            rows.append([rw] + [fmt_spread(Spread(raw.device.get((rw, bs, j), [])), bs, False)
                                for j in jobs])
        lines += ["%s, %s, median (min–max):" % ("1 MiB" if bs == "1m" else "4 KiB", unit_of(bs)),
                  "", md_table(["workload"] + ["%d job%s" % (j, "" if j == 1 else "s")
                                              for j in jobs], rows), ""]
    # What the numbers show.
    for bs in ["1m", "4k"]:
        for rw in RWS:
            sps = [(j, Spread(raw.device.get((rw, bs, j), []))) for j in jobs]
            sps = [(j, sp) for j, sp in sps if sp]
            if not sps:
                continue
            bj, bsp = max(sps, key=lambda x: x[1].med)
            one = sps[0][1]
            lines.append("- %s %s: %s at %d job%s, best %s at %d job%s (%.2f× the fewest jobs, "
                         "medians)." % (
                             "1 MiB" if bs == "1m" else "4 KiB", rw, fmt_spread(one, bs),
                             sps[0][0], "" if sps[0][0] == 1 else "s", fmt_spread(bsp, bs), bj,
                             "" if bj == 1 else "s", bsp.med / one.med if one.med else 0))
    ones = {}
    for bs in ["1m", "4k"]:
        for rw in RWS:
            s1 = Spread(raw.device.get((rw, bs, jobs[0]), []))
            sb = max((Spread(raw.device.get((rw, bs, j), [])) for j in jobs),
                     key=lambda s: s.med or 0)
            if s1 and sb:
                ones[(rw, bs)] = s1.med / sb.med if sb.med else 0
    small = [k for k, v in ones.items() if k[1] == "4k" and v < 0.7]
    if small:
        lines.append("- At 4 KiB, one job reaches %s of the best — %s." % (
            ", ".join("%.0f%% (%s)" % (100 * ones[k], k[0]) for k in small),
            cause("device-depth", meta, used)))
    nproc = meta.get("machine", {}).get("nproc") or 0
    flat = [k for k in ones if k[1] == "4k" and jobs[-1] > nproc and
            (Spread(raw.device.get((k[0], "4k", jobs[-1]), [])).med or 0) <
            0.9 * max(Spread(raw.device.get((k[0], "4k", j), [])).med or 0 for j in jobs)]
    if flat and nproc:
        lines.append("- With %d jobs, 4 KiB %s fall%s below the best job count: %s." % (
            jobs[-1], ", ".join(k[0] for k in flat), "s" if len(flat) == 1 else "",
            cause("cores", meta, used)))
    mc = net_ceiling_median(raw, "1m", "shm")
    rd = max((Spread(raw.device.get(("read", "1m", j), [])).med or 0) for j in jobs)
    if mc and rd:
        lines.append("- The best 1 MiB read, %.2f GiB/s, is %.2f× this run's single-thread "
                     "memcpy (%.2f GiB/s)." % (rd, rd / mc, mc))
    return lines + [""]


def section_net(raw, figs, used):
    lines = ["## 2. Transport heatmaps", ""]
    if not raw.net:
        return lines + ["Not run in this evaluation.", ""]
    meta = raw.meta
    tps = [t for t in ["tcp", "shm", "rdma"] if any(k[0] == t for k in raw.net)]
    targets = sorted({k[1] for k in raw.net})
    threads = sorted({k[4] for k in raw.net})
    wls = [w for w in [("read", "1m"), ("write", "1m"), ("randread", "4k"), ("randwrite", "4k")]
           if any(k[2:4] == w for k in raw.net)]
    lines += ["`lode bench` (native API, registered buffers) against a RAM-mode loded restarted "
              "with 1, 2, 4… targets, for each transport present (%s), client threads × "
              "targets. 1 MiB runs keep 4 requests in flight per thread, 4 KiB runs 32. "
              "Each cell: median (min–max) over the runs, and the median of each run's "
              "result / the ceiling that run measured: memcpy for 1 MiB over shm or rdma, "
              "the loopback TCP stream for 1 MiB over tcp, and for 4 KiB loopback TCP 4 KiB "
              "round trips (a request answered by a reply, no storage behind it) with as many "
              "in flight as the run kept, up to 128: what a host-mediated exchange can do at "
              "that depth. The ceilings are single-threaded, so several threads can pass "
              "100%%, and a 4 KiB path that beats host-mediated TCP shows above 1×."
              % ", ".join(tps), ""]
    if "rdma" not in tps:
        lines += ["**rdma was absent**: %s. The study's one-sided RDMA column therefore has no "
                  "counterpart here; shm (one-sided RMA through shared memory) is the closest "
                  "stand-in, and tcp is the host-mediated path." % meta.get("rdma", "not detected"),
                  ""]
    for rw, bs in wls:
        lines += ["![net %s %s](%s)" % (rw, bs, figs["net_%s_%s" % (rw, bs)]), ""]
        for tp in tps:
            cells = []
            for t in targets:
                for n in threads:
                    s, r, label, kind, _ = net_cell(raw, tp, t, rw, bs, n)
                    if s:
                        cells.append((t, n, s, r, label, kind))
            if not cells:
                continue
            best = max(cells, key=lambda c: c[2].med)
            rated = [c for c in cells if c[3]]
            txt = "- %s %s over %s: best %s with %d target%s and %d thread%s" % (
                "1 MiB" if bs == "1m" else "4 KiB", rw, tp, fmt_spread(best[2], bs),
                best[0], "" if best[0] == 1 else "s", best[1], "" if best[1] == 1 else "s")
            if rated:
                hi = max(rated, key=lambda c: c[3].med)
                lo = min(rated, key=lambda c: c[3].med)
                kind = lo[5]
                txt += "; ratio to %s from %s (%d tgt, %d thr) to %s (%d tgt, %d thr)" % (
                    lo[4], fmt_ratio_spread(lo[3], kind), lo[0], lo[1],
                    fmt_ratio_spread(hi[3], kind), hi[0], hi[1])
                short = [c for c in rated if c[3].med < SHORT_MARGIN]
                txt += "."
                if short:
                    key = "%s-%s" % ("tcp" if tp == "tcp" else "shm",
                                     "bulk" if bs == "1m" else "small")
                    nproc = meta.get("machine", {}).get("nproc") or 0
                    txt += " %d of %d cells fall short of half the ceiling — %s." % (
                        len(short), len(rated), cause(key, meta, used))
                    if nproc and any(c[0] + c[1] > nproc for c in short):
                        txt = txt[:-1] + "; where threads + targets exceed %d, also %s." % (
                            nproc, cause("cores", meta, used))
            else:
                txt += "."
            lines.append(txt)
            # Scaling: targets at the most threads, threads at one target.
            s1 = net_cell(raw, tp, targets[0], rw, bs, threads[-1])[0]
            sN = net_cell(raw, tp, targets[-1], rw, bs, threads[-1])[0]
            if s1 and sN and len(targets) > 1:
                lines.append("  - with %d threads, %d → %d targets changes it %.2f×%s" % (
                    threads[-1], targets[0], targets[-1], sN.med / s1.med,
                    "; " + cause("cores", meta, used) if sN.med < 1.1 * s1.med and
                    (meta.get("machine", {}).get("nproc") or 99) <= threads[-1] else ""))
        if "tcp" in tps and len(tps) > 1:
            for other in [t for t in tps if t != "tcp"]:
                rs = []
                for t in targets:
                    for n in threads:
                        a = net_cell(raw, other, t, rw, bs, n)[0]
                        b = net_cell(raw, "tcp", t, rw, bs, n)[0]
                        if a and b and b.med:
                            rs.append(a.med / b.med)
                if rs:
                    lines.append("- %s / tcp, cell by cell: median %.2f×, from %.2f× to %.2f×%s" % (
                        other, statistics.median(rs), min(rs), max(rs),
                        " — " + cause("tcp-bulk" if bs == "1m" else "tcp-small", meta, used)
                        if statistics.median(rs) > 1.5 else "."))
        lines.append("")
    return lines


def e2e_causes(wheres, backing, wl, meta, used):
    """Likely causes of end-to-end shortfalls, one per mechanism, each with the paths it fits."""
    bs = wl.split("-")[1]
    layers = {w.split("-")[1] for w in wheres}
    tps = {w.split("-")[0] for w in wheres}
    why = []
    if "fuse" in layers:
        why.append("FUSE paths: " + cause("fuse", meta, used))
    if bs == "4k" and layers & {"lib", "preload"}:
        why.append("liblodefs and preload: " + cause("sync", meta, used))
    if "tcp" in tps:
        why.append("tcp paths: " + cause("tcp-bulk" if bs == "1m" else "tcp-small", meta, used))
    if backing == "disk":
        why.append("all: " + cause("disk-write" if "write" in wl else "disk-read", meta, used))
    elif bs == "1m" and "shm" in tps and "fuse" not in layers:
        why.append("shm paths: " + cause("shm-bulk", meta, used))
    return "; ".join(why)


def section_e2e(raw, figs, used):
    lines = ["## 3. End to end", ""]
    if not raw.e2e:
        return lines + ["Not run in this evaluation.", ""]
    meta = raw.meta
    jobs = meta.get("e2e_jobs", 1)
    lines += ["The same four workloads — 1 MiB sequential read and write (1 job), 4 KiB random "
              "read and write (%d jobs) — through liblodefs (`lode bench --api fs`), the FUSE "
              "mount (fio, psync, O_DIRECT) and the preload library (the same fio under "
              "LD_PRELOAD), over each transport, with loded's %s targets on RAM (/dev/shm) "
              "and on the storage path. The ceiling is the same fio, in the same repeat, on "
              "the medium the targets use (tmpfs or the disk); each bar's label is the median "
              "of its runs' ratios to it. The transport ceilings measured by the liblodefs "
              "runs (memcpy, loopback TCP) are drawn as grey lines." % (
                  jobs, meta.get("e2e_targets", "?")), ""]
    backings = [b for b in ["ram", "disk"] if any(k[0] == b for k in raw.e2e)]
    for backing in backings:
        tps = e2e_where(raw, backing)
        lines += ["### %s-backed targets" % ("RAM" if backing == "ram" else "Disk"), "",
                  "![e2e %s](%s)" % (backing, figs["e2e_" + backing]), ""]
        rows = []
        wheres = ["medium"] + ["%s-%s" % (tp, l) for tp in tps for l in ["lib", "fuse", "preload"]]
        for where in wheres:
            row = [LAYER_LABEL["medium"] if where == "medium" else
                   "%s over %s" % (LAYER_LABEL[where.split("-")[1]], where.split("-")[0])]
            for wl in E2E_WL:
                bs = wl.split("-")[1]
                s, r = e2e_case(raw, backing, where, wl)
                cell = fmt_spread(s, bs)
                if where != "medium" and r:
                    cell += " · %s" % fmt_ratio_spread(r, "bw")
                row.append(cell)
            rows.append(row)
        lines += ["Median (min–max) · median ratio to the medium:", "",
                  md_table(["path"] + E2E_WL, rows), ""]
        for wl in E2E_WL:
            bs = wl.split("-")[1]
            cases = []
            for where in wheres[1:]:
                s, r = e2e_case(raw, backing, where, wl)
                if s and r:
                    cases.append((where, s, r))
            if not cases:
                continue
            best = max(cases, key=lambda c: c[2].med)
            worst = min(cases, key=lambda c: c[2].med)
            txt = "- %s: best %s over %s at %s of the medium (%s); worst %s over %s at %s (%s)." % (
                wl, LAYER_LABEL[best[0].split("-")[1]], best[0].split("-")[0],
                fmt_ratio_spread(best[2], "bw"), fmt_spread(best[1], bs),
                LAYER_LABEL[worst[0].split("-")[1]], worst[0].split("-")[0],
                fmt_ratio_spread(worst[2], "bw"), fmt_spread(worst[1], bs))
            short = [c for c in cases if c[2].med < SHORT_MARGIN]
            if short:
                txt += " %d of %d paths fall short of half the medium (%s); %s." % (
                    len(short), len(cases), ", ".join(
                        "%s/%s %s" % (c[0].split("-")[0], c[0].split("-")[1],
                                      fmt_ratio(c[2].med, "bw")) for c in short),
                    e2e_causes([c[0] for c in short], backing, wl, meta, used))
            lines.append(txt)
            for tp in tps:
                f = e2e_case(raw, backing, tp + "-fuse", wl)[0]
                p = e2e_case(raw, backing, tp + "-preload", wl)[0]
                lb = e2e_case(raw, backing, tp + "-lib", wl)[0]
                if f and p and f.med:
                    lines.append("  - over %s: preload / FUSE %.2f×, liblodefs / FUSE %s" % (
                        tp, p.med / f.med, "%.2f×" % (lb.med / f.med) if lb else "—"))
            for other in [t for t in tps if t != "tcp"]:
                if "tcp" not in tps:
                    break
                parts = []
                for layer in ["lib", "fuse", "preload"]:
                    a = e2e_case(raw, backing, "%s-%s" % (other, layer), wl)[0]
                    b = e2e_case(raw, backing, "tcp-" + layer, wl)[0]
                    if a and b and b.med:
                        parts.append("%s %.2f×" % (LAYER_LABEL[layer].split(" (")[0],
                                                   a.med / b.med))
                if parts:
                    lines.append("  - %s / tcp, path by path: %s" % (other, ", ".join(parts)))
        lines.append("")
    return lines


def section_summary(raw, used):
    """The headline of each section, from the same numbers as the sections."""
    lines = ["## What the numbers show", ""]
    meta = raw.meta
    if raw.device:
        jobs = sorted({k[2] for k in raw.device})
        for bs, rw in [("1m", "read"), ("1m", "write"), ("4k", "randread"), ("4k", "randwrite")]:
            sps = [(j, Spread(raw.device.get((rw, bs, j), []))) for j in jobs]
            sps = [(j, sp) for j, sp in sps if sp]
            if sps:
                j, sp = max(sps, key=lambda x: x[1].med)
                lines.append("- Device: %s %s peaks at %s with %d job%s." % (
                    "1 MiB" if bs == "1m" else "4 KiB", rw, fmt_spread(sp, bs), j,
                    "" if j == 1 else "s"))
    if raw.net:
        targets = sorted({k[1] for k in raw.net})
        threads = sorted({k[4] for k in raw.net})
        for rw, bs in sorted({(k[2], k[3]) for k in raw.net}, key=lambda w: (w[1] != "1m", w[0])):
            best = {}
            for tp in ["tcp", "shm", "rdma"]:
                cells = [net_cell(raw, tp, t, rw, bs, n)[0] for t in targets for n in threads]
                cells = [c for c in cells if c]
                if cells:
                    best[tp] = max(cells, key=lambda c: c.med)
            if "tcp" in best and len(best) > 1:
                lines.append("- Data plane, %s %s, best cell: %s; %s (medians)." % (
                    "1 MiB" if bs == "1m" else "4 KiB", rw,
                    ", ".join("%s %s" % (tp, fmt_spread(v, bs)) for tp, v in best.items()),
                    ", ".join("%s reaches %.2f× tcp" % (tp, v.med / best["tcp"].med)
                              for tp, v in best.items() if tp != "tcp" and best["tcp"].med)))
    worst = None
    for backing in ["ram", "disk"]:
        for wl in E2E_WL:
            bs = wl.split("-")[1]
            cases = []
            for tp in e2e_where(raw, backing):
                for layer in ["lib", "fuse", "preload"]:
                    sp, r = e2e_case(raw, backing, "%s-%s" % (tp, layer), wl)
                    if sp and r:
                        cases.append((r.med, tp, layer, sp, r))
            if not cases:
                continue
            b = max(cases, key=lambda c: c[0])
            lines.append("- End to end, %s-backed, %s: best %s over %s, %s = %s of the medium." % (
                BACKING_LABEL[backing], wl, LAYER_LABEL[b[2]], b[1], fmt_spread(b[3], bs),
                fmt_ratio_spread(b[4], "bw")))
            w = min(cases, key=lambda c: c[0])
            if worst is None or w[0] < worst[0]:
                worst = (w[0], w[1], w[2], backing, wl, w[4])
    if worst:
        _, tp, layer, backing, wl, r = worst
        lines.append("- Furthest from its ceiling: %s over %s, %s-backed, %s, at %s of the medium "
                     "(%s)." % (LAYER_LABEL[layer], tp, BACKING_LABEL[backing], wl,
                                fmt_ratio_spread(r, "bw"),
                                e2e_causes(["%s-%s" % (tp, layer)], backing, wl, meta, used)))
    if "rdma" not in meta.get("transports", ["rdma"]):
        lines.append("- rdma was absent (%s): this run cannot show one-sided RDMA against tcp; "
                     "shm, one-sided through shared memory, stands in for it on one host." %
                     meta.get("rdma", "not detected"))
    return lines + [""]


def write_report(raw, out):
    os.makedirs(os.path.join(out, "eval"), exist_ok=True)
    figs = {}
    if raw.device:
        figs["device"] = fig_device(raw, out)
    if raw.net:
        tps = [t for t in ["tcp", "shm", "rdma"] if any(k[0] == t for k in raw.net)]
        targets = sorted({k[1] for k in raw.net})
        threads = sorted({k[4] for k in raw.net})
        for rw, bs in sorted({(k[2], k[3]) for k in raw.net}):
            figs["net_%s_%s" % (rw, bs)] = fig_heatmap(raw, out, rw, bs, tps, targets, threads)
    for backing in ["ram", "disk"]:
        if any(k[0] == backing for k in raw.e2e):
            figs["e2e_" + backing] = fig_e2e(raw, out, backing, raw.meta.get("e2e_jobs", 1))
    lines = ["# Lode evaluation", "",
             "Generated by `bench/eval/report.py` from the raw results in `%s`; do not edit "
             "by hand — run `make eval` (bench/eval/README.md) to remake it. Every number "
             "is the median over the runs with (min–max) beside it." % (
                 os.path.relpath(raw.dir, out)), "",
             "It follows section 4 of the study Lode reproduces (one-sided RDMA against "
             "host-mediated TCP, from the raw device to the POSIX API): device ceilings, "
             "then the transports, then the whole stack.", ""]
    used = []
    body = section_device(raw, figs, used)
    body += section_net(raw, figs, used)
    body += section_e2e(raw, figs, used)
    lines += section_summary(raw, used)
    lines += section_run(raw) + [""]
    lines += body
    lines += section_causes(raw.meta, used)
    with open(os.path.join(out, "evaluation.md"), "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    return figs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", required=True, help="directory of raw JSON (bench/eval/run.sh's)")
    ap.add_argument("--out", required=True, help="evaluation.md here, PNGs in OUT/eval")
    a = ap.parse_args()
    if not os.path.isdir(a.raw):
        print("report.py: %s is not a directory" % a.raw, file=sys.stderr)
        return 2
    raw = Raw(a.raw)
    if not (raw.device or raw.net or raw.e2e):
        print("report.py: no raw results in %s" % a.raw, file=sys.stderr)
        return 1
    write_report(raw, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
