#!/usr/bin/env python3
"""bench/eval/meta.py: the facts about one evaluation run, as JSON on stdout.

bench/eval/run.sh calls it once the measuring is over, with the run's
settings in EV_* environment variables; it adds what it can learn about the
machine (CPU model, cores, memory, kernel, the storage path's file system),
the date, the git commit, the tools' versions and the CPU pressure sampled
during the run. report.py reads the result as raw/meta.json and prints it
in the report, so that nothing there is typed by hand.
"""
import datetime
import json
import os
import platform
import subprocess


def env(name, default=""):
    return os.environ.get(name, default)


def out(cmd, default=""):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20,
                              check=False).stdout.strip()
    except OSError:
        return default


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def pressure(path):
    """[(seconds into the run, some avg10, some avg60)] from the sampler's log."""
    samples = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                vals = dict(p.split("=", 1) for p in parts[2:] if "=" in p)
                if parts[1:2] == ["some"] and "avg10" in vals:
                    samples.append([int(parts[0]), float(vals["avg10"]),
                                    float(vals["avg60"])])
    except (OSError, ValueError, IndexError):
        pass
    return samples


def storage(path):
    """The file system that holds path (device, type), for the device ceiling."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    line = out(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", path or "/"])
    parts = line.split()
    return {"path": env("EV_DISK_DIR"), "source": parts[0] if parts else "unknown",
            "fstype": parts[1] if len(parts) > 1 else "unknown"}


def main():
    root = env("EV_ROOT", ".")
    commit = out(["git", "-C", root, "rev-parse", "HEAD"], "unknown")
    # Uncommitted changes to anything but the run's own outputs, which the
    # run has just rewritten.
    spec = ["--", "."]
    evout = env("EV_OUT")
    if evout:
        for name in ("eval", "evaluation.md"):
            rel = os.path.relpath(os.path.join(evout, name), os.path.abspath(root))
            if not rel.startswith(".."):
                spec.append(":(exclude)" + rel)
    dirty = bool(out(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"] + spec))
    durations = {}
    for item in env("EV_DURATIONS").split():
        k, v = item.split("=", 1)
        durations[k] = int(v)
    meta = {
        "mode": env("EV_MODE"),
        "command": env("EV_COMMAND"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_commit": commit,
        "git_dirty": dirty,
        "sections": env("EV_SECTIONS").split(),
        "repeat": int(env("EV_REPEAT", "1")),
        "runtime_s": {"device": float(env("EV_RT_DEV", "0")), "net": float(env("EV_RT_NET", "0")),
                      "e2e": float(env("EV_RT_E2E", "0"))},
        "device_jobs": [int(x) for x in env("EV_DEV_JOBS").split()],
        "device_total_mib": int(env("EV_DEV_MB", "0")),
        "net_threads": [int(x) for x in env("EV_NET_THREADS").split()],
        "net_targets": [int(x) for x in env("EV_NET_TARGETS").split()],
        "e2e_jobs": int(env("EV_E2E_JOBS", "1")),
        "e2e_targets": int(env("EV_E2E_TARGETS", "2")),
        "e2e_file_mib": int(env("EV_E2E_MB", "0")),
        "e2e_4k_region_mib": int(env("EV_E2E_MB_4K", "0")),
        "transports": env("EV_TRANSPORTS").split(),
        "rdma": env("EV_RDMA"),
        "failures": env("EV_FAILURES").split(),
        "elapsed_s": int(env("EV_ELAPSED", "0")),
        "section_s": durations,
        "machine": {
            "cpu_model": cpu_model(),
            "nproc": os.cpu_count(),
            "mem_gib": mem_gib(),
            "kernel": platform.release(),
            "storage": storage(env("EV_DISK_DIR")),
            "fio": out(["fio", "--version"]),
            "ucx": out(["ucx_info", "-v"]).splitlines()[0:1],
        },
        "cpu_pressure": pressure(env("EV_PRESSURE")),
    }
    meta["machine"]["ucx"] = (meta["machine"]["ucx"] or ["unknown"])[0].lstrip("# ")
    json.dump(meta, fp=__import__("sys").stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
