#!/usr/bin/env python3
"""bench/eval/test_report.py: report.py on a synthetic evaluation, no benchmark run.

Writes a small raw directory shaped like bench/eval/run.sh's (fio JSON with
the fields report.py reads, `lode bench --json` objects, meta.json), runs
report.py on it, and checks that evaluation.md has every section, that every
figure it links exists and is a PNG, that the numbers in its text are the
fixture's medians, spreads and ratios, that an absent rdma and a transport
fallback are stated, and that a section with no raw files says it was not
run. Exit 0 when all checks pass, 1 otherwise, 77 (skip) without matplotlib.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 2 ** 30
fails = []


def check(name, cond, detail=""):
    print("%s %s%s" % ("ok  " if cond else "FAIL", name, "" if cond else ": " + detail))
    if not cond:
        fails.append(name)


def put(raw, name, obj):
    with open(os.path.join(raw, name + ".json"), "w") as f:
        json.dump(obj, f)


def fio(rw, gib_s=0.0, kiops=0.0):
    """The part of fio's JSON that report.py reads."""
    moved = {"io_bytes": 1 << 30, "bw_bytes": int(gib_s * GIB) if gib_s else int(kiops * 4096e3),
             "iops": kiops * 1e3 if kiops else gib_s * 1024}
    idle = {"io_bytes": 0, "bw_bytes": 0, "iops": 0.0}
    reads = rw in ("read", "randread")
    return {"fio version": "fio-3.33",
            "jobs": [{"jobname": "x", "read": moved if reads else idle,
                      "write": idle if reads else moved}]}


def bench(tp, bs, gib_s=0.0, kiops=0.0, memcpy=10.0, stream=2.0, rt_k=50.0, used=None):
    """The part of `lode bench --json` that report.py reads."""
    ceil = {"memcpy": {"bw_mib_s": memcpy * 1024}}
    if bs == "1m":
        ceil["tcp"] = {"kind": "stream", "bw_mib_s": stream * 1024}
    else:
        ceil["tcp"] = {"kind": "round_trip", "depth": 32, "round_trips_s": rt_k * 1e3}
    bw = gib_s * 1024 if gib_s else kiops * 4
    return {"ok": True, "error": None, "connection": {"transport": used or tp},
            "result": {"bw_mib_s": bw, "iops": kiops * 1e3 if kiops else gib_s * 1024},
            "ceilings": ceil}


def fixture(raw, sections):
    meta = {"mode": "quick", "command": "bench/eval/run.sh (MODE=quick)",
            "date": "2030-01-02 03:04 UTC", "git_commit": "0123456789abcdef",
            "git_dirty": False, "repeat": 2,
            "runtime_s": {"device": 1, "net": 1, "e2e": 2},
            "transports": ["tcp", "shm"], "e2e_jobs": 4, "e2e_targets": 2,
            "rdma": "no RDMA device on this machine (fixture)", "failures": [],
            "elapsed_s": 754, "section_s": {"device": 100, "net": 300, "e2e": 354},
            "machine": {"cpu_model": "Fixture CPU", "nproc": 2, "mem_gib": 8.0,
                        "kernel": "6.1.0", "fio": "fio-3.33", "ucx": "UCX 1.13",
                        "storage": {"path": "/x/lode-data/eval", "source": "/dev/vda",
                                    "fstype": "ext4"}},
            "cpu_pressure": [[0, 10.0, 5.0], [5, 30.0, 6.0], [10, 20.0, 7.0]]}
    put(raw, "meta", meta)
    if "device" in sections:
        for rw in ["read", "write", "randread", "randwrite"]:
            for j in [1, 4]:
                for rep, k in [(1, 1.0), (2, 1.2)]:
                    put(raw, "device.%s.1m.j%d.r%d" % (rw, j, rep), fio(rw, gib_s=k * j))
                    put(raw, "device.%s.4k.j%d.r%d" % (rw, j, rep), fio(rw, kiops=20 * k * j))
    if "net" in sections:
        for tp, f in [("tcp", 1.0), ("shm", 4.0)]:
            for t in [1, 2]:
                for n in [1, 2]:
                    for rep, k in [(1, 0.9), (2, 1.1)]:
                        put(raw, "net.%s.t%d.read.1m.j%d.r%d" % (tp, t, n, rep),
                            bench(tp, "1m", gib_s=f * k * n * t * 0.5))
                        put(raw, "net.%s.t%d.randread.4k.j%d.r%d" % (tp, t, n, rep),
                            bench(tp, "4k", kiops=f * k * n * 100,
                                  used="tcp" if (tp, t, n, rep) == ("shm", 2, 2, 2) else None))
    if "e2e" in sections:
        for wl, bs in [("read-1m", "1m"), ("write-1m", "1m"), ("randread-4k", "4k"),
                       ("randwrite-4k", "4k")]:
            for rep, k in [(1, 1.0), (2, 1.5)]:
                base = 4.0 if bs == "1m" else 200.0
                put(raw, "e2e.ram.medium.%s.r%d" % (wl, rep),
                    fio(wl.split("-")[0], gib_s=base * k) if bs == "1m"
                    else fio(wl.split("-")[0], kiops=base * k))
                for tp, tf in [("tcp", 0.25), ("shm", 0.75)]:
                    for layer, lf in [("lib", 1.0), ("fuse", 0.4), ("preload", 0.9)]:
                        v = base * k * tf * lf
                        name = "e2e.ram.%s-%s.%s.r%d" % (tp, layer, wl, rep)
                        if layer == "lib":
                            put(raw, name, bench(tp, bs, gib_s=v) if bs == "1m"
                                else bench(tp, bs, kiops=v))
                        else:
                            put(raw, name, fio(wl.split("-")[0], gib_s=v) if bs == "1m"
                                else fio(wl.split("-")[0], kiops=v))


def run_report(raw, out):
    p = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "--raw", raw,
                        "--out", out], capture_output=True, text=True, timeout=120)
    check("report.py exits 0 (%s)" % os.path.basename(out), p.returncode == 0, p.stderr[-2000:])
    path = os.path.join(out, "evaluation.md")
    return open(path).read() if os.path.exists(path) else ""


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("skip: %s has no matplotlib" % sys.executable)
        return 77
    base = os.environ.get("LODE_TEST_TMP") or None
    if base:
        os.makedirs(base, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="eval-report-test.", dir=base)
    raw = os.path.join(tmp, "out", "eval", "raw")
    os.makedirs(raw)
    fixture(raw, {"device", "net", "e2e"})
    md = run_report(raw, os.path.join(tmp, "out"))

    for sec in ["## The run", "## 1. Device ceilings", "## 2. Transport heatmaps",
                "## 3. End to end", "### RAM-backed targets", "## What the numbers show"]:
        check("section '%s'" % sec, sec in md)

    figs = re.findall(r"!\[[^]]*\]\(([^)]+)\)", md)
    want = {"eval/device.png", "eval/net_read_1m.png", "eval/net_randread_4k.png",
            "eval/e2e_ram.png"}
    check("figures linked", set(figs) == want, "got %s" % sorted(figs))
    for f in figs:
        p = os.path.join(tmp, "out", f)
        ok = os.path.exists(p) and open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        check("%s exists and is a PNG" % f, ok)

    # The run: facts from meta.json.
    check("machine stated", "Fixture CPU, 2 cores, 8.0 GiB memory, kernel 6.1.0" in md)
    check("commit stated", "`0123456789ab`" in md)
    check("pressure summarised", "median 20.0%, max 30.0% over 3 samples" in md)
    check("time taken", "total 12m34s" in md)

    # Device: 1 MiB read, 1 job: runs 1.0 and 1.2 GiB/s -> 1.10 (1.00–1.20).
    check("device table cell", "| read | 1.10 (1.00–1.20) | 4.40 (4.00–4.80) |" in md)
    check("device sentence", "1 MiB read: 1.10 (1.00–1.20) GiB/s at 1 job, best 4.40 "
          "(4.00–4.80) GiB/s at 4 jobs (4.00× the fewest jobs, medians)" in md)
    check("device 4k shortfall and cause", "one job reaches 25% (read)" in md and
          "likely cause: *depth-1 device latency*" in md)
    # memcpy 10 GiB/s in every shm run; best read 4.40 -> 0.44x.
    check("device vs memcpy", "is 0.44× this run's single-thread memcpy (10.00 GiB/s)" in md)

    # Heatmaps: tcp 1m read best = 1.0*[0.9,1.1]*2*2*0.5 = 1.80–2.20, median 2.00;
    # ratio to the 2 GiB/s stream: 1 target, 1 thread runs 0.45 and 0.55 GiB/s, so
    # 22.5% and 27.5% (printed rounded half to even), median 25%; 2 and 2: 90–110%.
    check("net best cell", "1 MiB read over tcp: best 2.00 (1.80–2.20) GiB/s with 2 targets "
          "and 2 threads" in md, "")
    check("net ratio range", "ratio to loopback TCP stream, 1 thread from 25% (22–28%) "
          "(1 tgt, 1 thr) to 100% (90–110%) (2 tgt, 2 thr)" in md)
    check("net shortfall cause", "likely cause: *tcp has no one-sided RMA*" in md)
    check("net shm/tcp", "- shm / tcp, cell by cell: median 4.00×, from 4.00× to 4.00×" in md)
    check("rdma absent stated", "**rdma was absent**: no RDMA device on this machine (fixture)" in md)
    check("fallback warned", "net.shm.t2.randread.4k.j2.r2 ran over tcp, not shm" in md)
    # 4k round-trip ceiling 50K; tcp 1 thr 1 tgt: 90,110 K -> ratios 1.80x, 2.20x -> 2.00x.
    check("net 4k ratio", "ratio to loopback TCP 4 KiB round trips at the same depth from 2.00× "
          "(1.80–2.20×) (1 tgt, 1 thr)" in md)

    # End to end: medium read-1m runs 4.0, 6.0 -> 5.00 (4.00–6.00); shm lib 0.75 -> 75%.
    check("e2e medium cell", "| fio on the medium | 5.00 (4.00–6.00) GiB/s |" in md)
    check("e2e lib cell", "| liblodefs over shm | 3.75 (3.00–4.50) GiB/s · 75% (75–75%) |" in md)
    check("e2e best/worst", "- read-1m: best liblodefs over shm at 75% (75–75%) of the medium "
          "(3.75 (3.00–4.50) GiB/s); worst lode-fuse (FUSE mount) over tcp at 10% (10–10%)" in md)
    check("e2e shortfall cause", "FUSE paths: likely cause: *FUSE's kernel crossings*" in md)
    check("causes explained once", md.count("- *FUSE's kernel crossings*: every I/O") == 1 and
          "## Likely causes named above" in md)
    # shm paths are 0.75 / 0.25 = 3x the tcp ones in the fixture.
    check("e2e shm/tcp", "  - shm / tcp, path by path: liblodefs 3.00×, lode-fuse 3.00×, "
          "preload library 3.00×" in md)
    check("e2e preload/fuse", "over tcp: preload / FUSE 2.25×, liblodefs / FUSE 2.50×" in md)

    # Only the device section's raw files: the others say they were not run.
    raw2 = os.path.join(tmp, "out2", "eval", "raw")
    os.makedirs(raw2)
    fixture(raw2, {"device"})
    md2 = run_report(raw2, os.path.join(tmp, "out2"))
    check("absent sections said", md2.count("Not run in this evaluation.") == 2)
    check("no stale figures linked", "net_read_1m" not in md2 and "e2e_ram" not in md2)

    # An empty raw directory is an error, not an empty report.
    raw3 = os.path.join(tmp, "raw3")
    os.makedirs(raw3)
    p = subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "--raw", raw3,
                        "--out", os.path.join(tmp, "out3")], capture_output=True, text=True)
    check("empty raw directory fails", p.returncode == 1 and "no raw results" in p.stderr)

    print("%d failed" % len(fails))
    if not fails:
        subprocess.run(["rm", "-rf", tmp])
    else:
        print("output kept in %s" % tmp)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
