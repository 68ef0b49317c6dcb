#!/usr/bin/env bash
#
# bench/cluster/run.sh: what several engines cost and give (issue 6 §7).
# Starts systems of 1 to 4 RAM-mode engines on loopback (one loded hosts the
# management service, the others join it), one target each, and measures
# through `lode bench`, one client process of 4 jobs at depth 4:
#
#   1. scaling: 1 MiB reads and writes, 4 KiB random reads and writes, on
#      1, 2, 3 and 4 engines (container class $SCALE_CLASS);
#   2. replication: the same four cases on 3 engines for S1, SX, RP_2, RP_3;
#   3. degraded reads: RP_2 reads on those 3 engines again after kill -9 of
#      engine 2, once the map shows it DOWN;
#   4. failover: on a fresh 3-engine system per run, kill -9 of engine 2
#      during 4 KiB RP_2 writes: time until the map shows it DOWN, and the
#      longest write the client saw (lode bench's lat_max_us);
#   5. erasure coding: lode-ec-bench's encode rate (a library figure; EC is
#      not on the I/O path) beside the end-to-end cost of RP_2 writes.
#
# and prints Markdown tables of medians (min–max) with the ceilings that
# the same runs measured (memcpy and a loopback TCP stream, 1 MiB pieces).
#
# usage: bench/cluster/run.sh [BUILD_DIR] [OUT_DIR]
#   BUILD_DIR  holds bin/lode, bin/loded, bin/lode-ec-bench [<repo>/build]
#   OUT_DIR    every run's JSON, the engines' logs, summary.md
#              [a new temporary directory]
# environment:
#   RUNTIME     seconds measured per lode bench run [5]
#   REPEAT      runs per case, and fresh systems for the failover [3]
#   TRANSPORTS  client transports, each a full pass: tcp, shm [tcp]
#   PORT        first of five loopback ports: engines PORT..PORT+3, the
#               management service PORT+4 [7540]
#   SCALE_CLASS container class of the scaling runs [SX]
#
# Exit status: 0 when every run completed; 1 when a system did not start,
# a port was busy or a run failed (the table is still printed); 2 on bad
# usage. See bench/cluster/README.md for what is measured and how to read it.
set -euo pipefail

usage() {
	sed -n '/^# usage:/,/^# Exit/p' "$0" | sed 's/^# \{0,1\}//; /^Exit/d'
}

case "${1:-}" in
-h | --help)
	usage
	exit 0
	;;
esac
if [ $# -gt 2 ]; then
	usage >&2
	exit 2
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" 2>/dev/null && pwd) || {
	echo "run.sh: no build directory ${1:-$ROOT/build}" >&2
	exit 2
}
OUT=${2:-}
RUNTIME=${RUNTIME:-5}
REPEAT=${REPEAT:-3}
TRANSPORTS=${TRANSPORTS:-tcp}
PORT=${PORT:-7540}
SCALE_CLASS=${SCALE_CLASS:-SX}
LODE=$BUILD/bin/lode
LODED=$BUILD/bin/loded
ECBENCH=$BUILD/bin/lode-ec-bench

# Fixed shape of every lode bench run: one client process, JOBS threads
# (each its own connection and object), DEPTH requests in flight each.
JOBS=4
DEPTH=4
CAPACITY=2G       # per target; small, so that writes reach aggregation's steady state
HB_MS=200         # heartbeat and grace of the hosting loded (parts 3 and 4)
GRACE_MS=1500
FAIL_RUNTIME=8    # part 4: length of the write run that spans the kill
KILL_AFTER=3      # part 4: seconds after the run starts that engine 2 is killed
VICTIM=2          # the engine killed in parts 3 and 4: a joined one, never the host

if ! [[ $REPEAT =~ ^[1-9][0-9]*$ ]]; then
	echo "run.sh: REPEAT must be a whole number above 0, not '$REPEAT'" >&2
	exit 2
fi
if ! [[ $RUNTIME =~ ^[0-9]+(\.[0-9]+)?$ ]] || [[ $RUNTIME =~ ^0+(\.0*)?$ ]]; then
	echo "run.sh: RUNTIME must be a number of seconds above 0, not '$RUNTIME'" >&2
	exit 2
fi
if ! [[ $PORT =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1024 ] || [ "$PORT" -gt 65530 ]; then
	echo "run.sh: PORT must be a port from 1024 to 65530, not '$PORT'" >&2
	exit 2
fi
for t in $TRANSPORTS; do
	case $t in
	tcp | shm) ;;
	*)
		echo "run.sh: TRANSPORTS takes tcp and shm, not '$t'" >&2
		exit 2
		;;
	esac
done
[ -n "${TRANSPORTS// /}" ] || {
	echo "run.sh: TRANSPORTS is empty" >&2
	exit 2
}
case $SCALE_CLASS in
S[0-9]* | SX | RP_2 | RP_3) ;;
*)
	echo "run.sh: SCALE_CLASS must be S1..S128, SX, RP_2 or RP_3, not '$SCALE_CLASS'" >&2
	exit 2
	;;
esac
for b in "$LODE" "$LODED" "$ECBENCH"; do
	if [ ! -x "$b" ]; then
		echo "run.sh: $b not found; build first (cmake --build $BUILD)" >&2
		exit 2
	fi
done

BENCH_PROG=run.sh
# shellcheck source=bench/common.sh
. "$ROOT/bench/common.sh"
bench_need python3 || exit 2

# Every port this script listens on must be free before it starts anything:
# a loded already there would be joined or measured by mistake.
busy=$(python3 - "$PORT" <<'PY'
import socket, sys
base = int(sys.argv[1])
for p in range(base, base + 5):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        print(p, end=" ")
    finally:
        s.close()
PY
)
if [ -n "$busy" ]; then
	echo "run.sh: port(s) ${busy% } on 127.0.0.1 are busy; stop what holds them or set PORT" >&2
	exit 1
fi

if [ -z "$OUT" ]; then
	OUT=$(mktemp -d "${TMPDIR:-/tmp}/lode-clusterbench.XXXXXX")
fi
mkdir -p "$OUT"
DATA=/dev/shm/lode-clusterbench-$$
if [ -e "$DATA" ]; then
	echo "run.sh: $DATA already exists; not touching it" >&2
	exit 1
fi

export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
unset LODE_USER LODE_SECRET LODE_POOL LODE_MGMT LODE_TLS_CA LODE_ADDR LODE_ADDR_FILE LODE_TRANSPORT
MGMT=127.0.0.1:$((PORT + 4))
HOST=127.0.0.1:$PORT

# ---- engines -------------------------------------------------------------
# bench/common.sh keeps one loded in BENCH_LODED_PID; a system here has up
# to four, so each is started and stopped through those helpers with its
# pid moved in and out of that variable.
ENGINE_PIDS=()
BG_PID= # a lode bench running in the background (part 4)

engine_addr() { echo "127.0.0.1:$((PORT + $1))"; }

engine_state() { # engine_state ID: its state in `lode system engines`, or nothing
	"$LODE" --addr "$HOST" --timeout 2000 system engines 2>/dev/null |
		awk -v id="$1" '$1 == id { print $3 }'
}

wait_state() { # wait_state ID STATE SECONDS
	local _
	for _ in $(seq 1 $(($3 * 20))); do
		[ "$(engine_state "$1")" = "$2" ] && return 0
		sleep 0.05
	done
	echo "run.sh: engine $1 is '$(engine_state "$1")' after $3 s, expected $2" >&2
	return 1
}

engine_start() { # engine_start I LOG [LODED_ARG...]: engine I on PORT+I
	local i=$1 log=$2
	shift 2
	BENCH_LODED_PID=
	bench_loded_start "$LODED" "$LODE" "$(engine_addr "$i")" "$log" --path "$DATA/e$i" \
		--ram --capacity "$CAPACITY" --targets 1 "$@" || return 1
	ENGINE_PIDS[i]=$BENCH_LODED_PID
	BENCH_LODED_PID=
}

engine_stop() { # engine_stop I: SIGTERM (then SIGKILL) engine I if it runs
	local i=$1
	[ -n "${ENGINE_PIDS[i]:-}" ] || return 0
	BENCH_LODED_PID=${ENGINE_PIDS[i]}
	ENGINE_PIDS[i]=
	bench_loded_stop
}

engine_kill9() { # engine_kill9 I: what a crash looks like to everyone else
	local pid=${ENGINE_PIDS[$1]}
	ENGINE_PIDS[$1]=
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

system_stop() { # joined engines first, then the host (and the service)
	local i
	for ((i = ${#ENGINE_PIDS[@]} - 1; i >= 0; i--)); do
		engine_stop "$i"
	done
	ENGINE_PIDS=()
	rm -rf "$DATA"
}

# system_start N DIR: engine 0 hosts the service; engines 1..N-1 join it one
# at a time (so that engine i gets id i) and each is UP before the next.
system_start() {
	local n=$1 dir=$2 i
	mkdir -p "$dir" "$DATA"
	export LODE_CREDENTIALS=$dir/admin.credentials
	rm -f "$LODE_CREDENTIALS"
	engine_start 0 "$dir/e0.log" --admin-cred "$LODE_CREDENTIALS" --mgmt-listen "$MGMT" \
		--heartbeat-ms "$HB_MS" --grace-ms "$GRACE_MS" || return 1
	for ((i = 1; i < n; i++)); do
		engine_start "$i" "$dir/e$i.log" --join "$MGMT" --join-cred "$LODE_CREDENTIALS" ||
			return 1
		wait_state "$i" UP 10 || return 1
	done
}

cleanup() {
	local rc=$?
	trap - EXIT
	if [ -n "$BG_PID" ]; then
		kill -TERM "$BG_PID" 2>/dev/null || true
		wait "$BG_PID" 2>/dev/null || true
	fi
	system_stop
	if [ -s "${MANIFEST:-}" ]; then
		report || rc=1
		echo "run.sh: every run's JSON, the engines' logs and summary.md are in $OUT" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# report: the tables, from the manifest and the files it names, on stdout
# and in OUT/summary.md. Run at exit, so that an interrupted or failed run
# still shows what it measured.
report() {
	local psi_end elapsed
	psi_end=$(sed -n 's/^some //p' /proc/pressure/cpu 2>/dev/null || echo "n/a")
	elapsed=$(($(date +%s) - START))
	python3 - "$OUT" "$RUNTIME" "$REPEAT" "$JOBS" "$DEPTH" "$SCALE_CLASS" "$VICTIM" \
		"$HB_MS" "$GRACE_MS" "$FAIL_RUNTIME" "$KILL_AFTER" "$PRESSURE_START" "$psi_end" \
		"$elapsed" "$TRANSPORTS" <<'PY' | tee "$OUT/summary.md"
import collections
import json
import os
import re
import statistics
import sys

(out, runtime, repeat, jobs, depth, scale_cls, victim, hb, grace, fail_rt, kill_after,
 psi0, psi1, elapsed, transports) = sys.argv[1:]
repeat = int(repeat)
transports = transports.split()
warnings = []

CASES = ["1m-read", "1m-write", "4k-randread", "4k-randwrite"]
LABEL = {"1m-read": "1 MiB read", "1m-write": "1 MiB write",
         "4k-randread": "4 KiB randread", "4k-randwrite": "4 KiB randwrite"}


def bulk(case):
    return case.startswith("1m")


def value(case, d):
    """A run's result in the table's unit: GiB/s for 1 MiB, K IOPS for 4 KiB."""
    r = d["result"]
    return r["bw_gib_s"] if bulk(case) else r["iops"] / 1e3


def unit(case):
    return "GiB/s" if bulk(case) else "K IOPS"


def fmt(v, case=None):
    if v is None:
        return "—"
    return "%.2f" % v if case is None or bulk(case) else "%.1f" % v


def spread(vals, f=lambda v: "%.2f" % v):
    if not vals:
        return "—"
    mid = f(statistics.median(vals))
    if len(vals) == 1:
        return mid
    return "%s (%s–%s)" % (mid, f(min(vals)), f(max(vals)))


def shares(before, after):
    """Each engine's share of the run's requests, in %, from the counters."""
    if before == "-" or after == "-":
        return None
    b = [int(x) for x in before.split(",")]
    a = [int(x) for x in after.split(",")]
    if len(a) != len(b):
        return None
    d = [y - x for x, y in zip(b, a)]
    tot = sum(d)
    return [100.0 * x / tot for x in d] if tot else None


def fmt_shares(s):
    return "/".join("%.0f" % x for x in s) if s else "—"


# runs[(tp, part, n, cls, case)] = [(rep, data, shares)]
runs = collections.defaultdict(list)
with open(os.path.join(out, "manifest.tsv")) as f:
    for line in f:
        tp, part, n, cls, case, rep, path, before, after = line.rstrip("\n").split("\t")
        try:
            with open(path) as jf:
                d = json.load(jf)
        except (OSError, ValueError) as e:
            warnings.append("%s: no result (%s)" % (path, e))
            continue
        if d["connection"]["transport"] != tp:
            warnings.append("%s ran over %s, not %s" % (path, d["connection"]["transport"], tp))
        if not d["ok"] and part != "failover":
            warnings.append("%s reports an error: %s" % (path, d["error"]))
            continue
        runs[(tp, part, int(n), cls, case)].append((int(rep), d, shares(before, after)))


def vals(key, case):
    return [value(case, d) for _, d, _ in runs.get(key, [])]


def med(key, case):
    v = vals(key, case)
    return statistics.median(v) if v else None


def ratio(a, b):
    return a / b if a is not None and b else None


def first_shares(key):
    for _, _, s in sorted(runs.get(key, []), key=lambda x: x[0]):
        if s:
            return s
    return None


def table(hdr, rows):
    print("| " + " | ".join(hdr) + " |")
    print("| " + " | ".join("---" for _ in hdr) + " |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


def cls_key(tp, n, cls):
    part = "scale" if cls == scale_cls else "repl"
    return lambda case: (tp, part, n, cls, case)


def kill_times(path):
    """(upper bound ms, lower bound ms, polls) from kill_and_time's file."""
    try:
        t0, tl, td, polls = open(path).read().split()
    except (OSError, ValueError):
        return None
    if td == "-":
        return None
    return ((int(td) - int(t0)) / 1e6, (int(tl) - int(t0)) / 1e6, int(polls))


print("# Lode with several engines (bench/cluster/run.sh)\n")
print("Loopback, RAM targets (one per engine, capacity 2 GiB), one `lode bench` process "
      "of %s jobs at depth %s; %s s per run, %d run%s per case; median (min–max). "
      "Heartbeat %s ms, grace %s ms. CPU pressure (some) at the start: %s; at the end: "
      "%s. The whole run took %s s.\n"
      % (jobs, depth, runtime, repeat, "" if repeat == 1 else "s", hb, grace, psi0, psi1,
         elapsed))

for tp in transports:
    print("## Transport %s\n" % tp)

    # ---- ceilings ----
    mc, st = [], []
    for (t, part, n, cls, case), rs in runs.items():
        if t != tp:
            continue
        for _, d, _ in rs:
            c = d.get("ceilings") or {}
            if c.get("memcpy"):
                mc.append(c["memcpy"]["bw_gib_s"])
            if c.get("tcp") and c["tcp"].get("kind") == "stream":
                st.append(c["tcp"]["bw_gib_s"])
    print("Ceilings, measured by the 1 MiB runs just before each test (%d runs): "
          "memcpy of 1 MiB pieces, one thread: %s GiB/s; loopback TCP stream, "
          "1 MiB sends: %s GiB/s.\n" % (len(mc), spread(mc), spread(st)))

    # ---- part 1 ----
    print("### Scaling, container class %s\n" % scale_cls)
    print("× 1 engine: the median over the 1-engine median; ÷ engines: that over the "
          "number of engines (1.00 would be linear scaling). Requests per engine: each "
          "engine's share of the requests of run 1, engine 0 first.\n")
    rows = []
    for case in CASES:
        base = med((tp, "scale", 1, scale_cls, case), case)
        for n in (1, 2, 3, 4):
            key = (tp, "scale", n, scale_cls, case)
            rs = runs.get(key, [])
            if not rs:
                continue
            ds = [d for _, d, _ in rs]
            m = med(key, case)
            x = ratio(m, base)
            p50 = statistics.median(d["result"]["lat_p50_us"] for d in ds)
            p99 = statistics.median(d["result"]["lat_p99_us"] for d in ds)
            cc = statistics.median(d["cpu"]["client_pct_of_wall"] for d in ds)
            sc = [d["cpu"]["server_pct_of_wall"] for d in ds]
            sc = None if None in sc else statistics.median(sc)
            rows.append([LABEL[case], str(n), "%s %s" % (spread(vals(key, case),
                                                               lambda v: fmt(v, case)),
                                                        unit(case)),
                         fmt(x), fmt(x / n if x is not None else None),
                         "%.0f / %.0f" % (p50, p99), "%.0f" % cc,
                         "—" if sc is None else "%.0f" % sc, fmt_shares(first_shares(key))])
    table(["case", "engines", "result", "× 1 engine", "÷ engines", "p50 / p99 µs",
           "client CPU %", "server CPU %", "requests per engine, %"], rows)

    # ---- part 2 ----
    print("### Replication on 3 engines\n")
    classes = ["S1", "SX", "RP_2", "RP_3"]
    rows = []
    for case in CASES:
        row = [LABEL[case] + " (" + unit(case) + ")"]
        m = {}
        for cls in classes:
            k = cls_key(tp, 3, cls)(case)
            m[cls] = med(k, case)
            row.append(spread(vals(k, case), lambda v: fmt(v, case)))
        row.append(fmt(ratio(m["RP_2"], m["S1"])))
        row.append(fmt(ratio(m["RP_3"], m["S1"])))
        rows.append(row)
    table(["case"] + classes + ["RP_2 / S1", "RP_3 / S1"], rows)
    rows = []
    for cls in classes:
        rows.append([cls] + [fmt_shares(first_shares(cls_key(tp, 3, cls)(c))) for c in CASES])
    print("Requests per engine, % (run 1; a replicated write counts once on every "
          "replica):\n")
    table(["class"] + [LABEL[c] for c in CASES], rows)

    # ---- part 3 ----
    kt = kill_times(os.path.join(out, tp, "degraded-kill.txt"))
    print("### Degraded reads: RP_2 on 3 engines, engine %s killed\n" % victim)
    if kt:
        print("Engine %s showed DOWN in `lode system engines` %.0f ms after kill -9 "
              "(the poll before saw it UP at %.0f ms).\n" % (victim, kt[0], kt[1]))
    rows = []
    for case in ("1m-read", "4k-randread"):
        bk = cls_key(tp, 3, "RP_2")(case)
        ak = (tp, "degraded", 3, "RP_2", case)
        b, a = med(bk, case), med(ak, case)
        rows.append(["%s (%s)" % (LABEL[case], unit(case)),
                     spread(vals(bk, case), lambda v: fmt(v, case)),
                     spread(vals(ak, case), lambda v: fmt(v, case)), fmt(ratio(a, b)),
                     fmt_shares(first_shares(bk)), fmt_shares(first_shares(ak))])
    table(["case", "before: 3 engines UP", "after: engine %s DOWN" % victim,
           "after / before", "requests per engine, % (0/1/2)",
           "after, % (0/1)"], rows)

    # ---- part 4 ----
    print("### Failover: kill -9 of engine %s during 4 KiB RP_2 writes\n" % victim)
    print("A fresh 3-engine system per run; %s s of writes, engine %s killed %s s after "
          "the run started. DOWN: when `lode system engines` first showed it (polled "
          "back to back). Longest write: lode bench's lat_max_us over the whole run.\n"
          % (fail_rt, victim, kill_after))
    rows, downs, stalls = [], [], []
    for rep, d, _ in sorted(runs.get((tp, "failover", 3, "RP_2", "4k-randwrite"), []),
                            key=lambda x: x[0]):
        kt = kill_times(os.path.join(out, tp, "failover-kill.r%d.txt" % rep))
        r = d["result"]
        if kt:
            downs.append(kt[0])
        stalls.append(r["lat_max_us"] / 1e3)
        rows.append([str(rep), "%.0f (%.0f–%.0f)" % (kt[0], kt[1], kt[0]) if kt else "—",
                     "%.1f" % (r["lat_max_us"] / 1e3), "%.0f" % r["lat_p99_9_us"],
                     "%.1f" % (r["iops"] / 1e3), str(d["errors"]),
                     "yes" if d["ok"] else "no: %s" % d["error"]])
    table(["run", "kill → DOWN shown, ms (between polls)", "longest write, ms",
           "p99.9 µs", "K IOPS", "errors", "ok"], rows)
    ref = [d["result"]["lat_max_us"] / 1e3
           for _, d, _ in runs.get(cls_key(tp, 3, "RP_2")("4k-randwrite"), [])]
    print("Median (min–max): DOWN after %s ms; longest write %s ms. Without a kill "
          "(part 2's RP_2 4 KiB randwrite runs, %s s each): longest write %s ms.\n"
          % (spread(downs, lambda v: "%.0f" % v), spread(stalls, lambda v: "%.1f" % v),
             runtime, spread(ref, lambda v: "%.1f" % v)))

# ---- part 5 ----
print("## Erasure coding (library) beside replication (end to end)\n")
ec = []
try:
    text = open(os.path.join(out, "ec-bench.txt")).read()
except OSError:
    text = ""
cur = None
for line in text.splitlines():
    m = re.match(r"EC (\d+)\+(\d+), cell (\S+ \S+)", line)
    if m:
        cur = {"code": "%s+%s" % m.group(1, 2), "cell": m.group(3)}
        ec.append(cur)
        continue
    m = re.match(r"\s+encode\s+([\d.]+) GiB/s\s+\(([\d.]+)-([\d.]+)\)", line)
    if m and cur:
        cur["enc"] = "%s (%s–%s)" % m.group(1, 2, 3)
        cur["enc_v"] = float(m.group(1))
    m = re.match(r"\s+memcpy \(ceiling\)\s+([\d.]+) GiB/s", line)
    if m and cur:
        cur["memcpy"] = m.group(1)
    m = re.match(r"\s+RP_2/RP_3 cost\s+1 copy ([\d.]+) GiB/s, 2 copies ([\d.]+)", line)
    if m and cur:
        cur["copies"] = "%s / %s" % m.group(1, 2)
if not ec:
    warnings.append("no lode-ec-bench figures (see ec-bench.txt)")
print("`lode-ec-bench --codes 2+1,4+2 --cells 4K,1M`: one thread, in memory, no I/O; "
      "GiB/s of data, median (min–max) of 5 samples. **A library figure, not an "
      "end-to-end one** (bench/cluster/ec.sh measures EC end to end).\n")
table(["code", "cell", "encode, GiB/s", "ms per GiB", "memcpy, same run",
       "1 copy / 2 copies (RP_2's / RP_3's extra copying)"],
      [[e["code"], e["cell"], e.get("enc", "—"),
        "%.0f" % (1e3 / e["enc_v"]) if e.get("enc_v") else "—",
        e.get("memcpy", "—"), e.get("copies", "—")] for e in ec])
rows = []
for tp in transports:
    s1 = med(cls_key(tp, 3, "S1")("1m-write"), "1m-write")
    rp = med(cls_key(tp, 3, "RP_2")("1m-write"), "1m-write")
    extra = (1e3 / rp - 1e3 / s1) if s1 and rp else None
    rows.append([tp, fmt(s1), "%.0f" % (1e3 / s1) if s1 else "—", fmt(rp),
                 "%.0f" % (1e3 / rp) if rp else "—",
                 "%.0f" % extra if extra is not None else "—"])
print("End to end, 1 MiB writes on 3 engines (part 2), the same data per GiB:\n")
table(["transport", "S1 GiB/s", "S1 ms per GiB", "RP_2 GiB/s", "RP_2 ms per GiB",
       "RP_2's extra ms per GiB"], rows)

for w in warnings:
    print("warning: " + w + "\n")
PY
}

# ---- runs ------------------------------------------------------------------
# Every lode bench run appends one line to the manifest, which the report at
# the end reads: transport part engines class case rep json reqs_before
# reqs_after. reqs_* are the targets' request counters from `lode status`
# (one target per engine, in engine order), so their difference says which
# engines the run's objects landed on.
MANIFEST=$OUT/manifest.tsv
: >"$MANIFEST"
FAILED=0

# case | lode bench arguments (sizes per job)
CASES=(
	"1m-read|--rw read --bs 1m --size 64m --ceiling 1"
	"1m-write|--rw write --bs 1m --size 64m --ceiling 0"
	"4k-randread|--rw randread --bs 4k --size 16m --ceiling 0"
	"4k-randwrite|--rw randwrite --bs 4k --size 16m --ceiling 0"
)
cont_name() { echo "${1//_/}-${2%%-*}"; } # cont_name CLASS CASE: one per class and size

reqs() { # the targets' request counters, comma-separated; "-" if status fails
	"$LODE" --addr "$HOST" --timeout 3000 status --json 2>/dev/null | python3 -c '
import json, sys
try:
    print(",".join(str(t["requests"]) for t in json.load(sys.stdin)["targets"]))
except Exception:
    print("-")' || echo -
}

START=$(date +%s)
NRUN=0
TOTAL=0
progress() {
	NRUN=$((NRUN + 1))
	echo "run.sh: [$1] $2 ($NRUN of $TOTAL, $(($(date +%s) - START)) s so far)" >&2
}

# one_run TRANSPORT PART ENGINES CLASS CASE REP PREFILL [EXTRA...]: one
# lode bench run against the running system, recorded in the manifest. The
# counters read after a run are the next run's "before" (LAST_REQS), so
# each run costs one `lode status`.
LAST_REQS=-
one_run() {
	local tp=$1 part=$2 n=$3 cls=$4 name=$5 rep=$6 prefill=$7 args json before after
	shift 7
	args=
	for c in "${CASES[@]}"; do
		[ "${c%%|*}" = "$name" ] && args=${c#*|}
	done
	json=$OUT/$tp/$part-n$n-$cls-$name.r$rep.json
	progress "$tp" "$part, $n engine(s), $cls $name, run $rep/$REPEAT"
	before=$LAST_REQS
	# shellcheck disable=SC2086 # args is a list of words by design
	if ! "$LODE" bench --addr "$HOST" --transport "$tp" --cont "$(cont_name "$cls" "$name")" \
		$args --numjobs "$JOBS" --iodepth "$DEPTH" --runtime "$RUNTIME" \
		--prefill "$prefill" --json "$@" >"$json" 2>"${json%.json}.err"; then
		echo "run.sh: lode bench failed ($tp $part $n engines $cls $name run $rep):" >&2
		cat "${json%.json}.err" >&2
		FAILED=1
	fi
	[ -s "${json%.json}.err" ] || rm -f "${json%.json}.err"
	after=$(reqs)
	LAST_REQS=$after
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tp" "$part" "$n" "$cls" "$name" "$rep" \
		"$json" "$before" "$after" >>"$MANIFEST"
}

make_conts() { # make_conts CLASS...: one container per class and I/O size
	local cls c
	for cls in "$@"; do
		for c in 1m 4k; do
			"$LODE" --addr "$HOST" cont create "$(cont_name "$cls" "$c")" --class "$cls" \
				>/dev/null || return 1
		done
	done
}

# The classes of part 2 besides the scaling class, on the 3-engine system.
RP_CLASSES=()
for cls in S1 SX RP_2 RP_3; do
	[ "$cls" = "$SCALE_CLASS" ] || RP_CLASSES+=("$cls")
done
ntp=$(echo "$TRANSPORTS" | wc -w)
TOTAL=$((ntp * REPEAT * (4 * 4 + 4 * ${#RP_CLASSES[@]} + 2) + ntp * REPEAT))

# kill_and_time FILE: kill -9 engine VICTIM and poll the map until
# it shows DOWN; write "kill_ns last_up_ns down_ns polls" to FILE.
kill_and_time() {
	local file=$1 t0 tl td st polls=0
	t0=$(date +%s%N)
	engine_kill9 "$VICTIM"
	tl=$t0
	for _ in $(seq 1 400); do
		st=$(engine_state "$VICTIM")
		polls=$((polls + 1))
		if [ "$st" = DOWN ]; then
			td=$(date +%s%N)
			echo "$t0 $tl $td $polls" >"$file"
			return 0
		fi
		tl=$(date +%s%N)
	done
	echo "run.sh: engine $VICTIM not DOWN 20 s after kill -9" >&2
	echo "$t0 $tl - $polls" >"$file"
	return 1
}

PRESSURE_START=$(sed -n 's/^some //p' /proc/pressure/cpu 2>/dev/null || echo "n/a")
echo "run.sh: output in $OUT, data in $DATA; CPU pressure at the start: $PRESSURE_START" >&2

for tp in $TRANSPORTS; do
	mkdir -p "$OUT/$tp"
	# ---- parts 1, 2 and 3 ----
	for n in 1 2 3 4; do
		sysdir=$OUT/$tp/sys-n$n
		echo "run.sh: [$tp] starting a system of $n engine(s)" >&2
		system_start "$n" "$sysdir" || exit 1
		classes=("$SCALE_CLASS")
		[ "$n" -eq 3 ] && classes+=("${RP_CLASSES[@]}")
		make_conts "${classes[@]}" || exit 1
		LAST_REQS=$(reqs)
		# Repeats outside, so that a burst of load from elsewhere lands on
		# different cases rather than on every run of one.
		for rep in $(seq 1 "$REPEAT"); do
			for cls in "${classes[@]}"; do
				part=scale
				[ "$cls" = "$SCALE_CLASS" ] || part=repl
				for c in "${CASES[@]}"; do
					one_run "$tp" "$part" "$n" "$cls" "${c%%|*}" "$rep" $((rep == 1))
				done
			done
		done
		if [ "$n" -eq 3 ]; then
			echo "run.sh: [$tp] kill -9 of engine $VICTIM; reads of RP_2 degraded" >&2
			kill_and_time "$OUT/$tp/degraded-kill.txt" || exit 1
			LAST_REQS=$(reqs) # the map changed: the DOWN engine's target is gone
			for rep in $(seq 1 "$REPEAT"); do
				for name in 1m-read 4k-randread; do
					# --prefill 0: what part 2's runs wrote, now with one copy gone
					one_run "$tp" degraded 3 RP_2 "$name" "$rep" 0
				done
			done
		fi
		system_stop
	done
	# ---- part 4: a fresh system per run ----
	for rep in $(seq 1 "$REPEAT"); do
		sysdir=$OUT/$tp/sys-failover-r$rep
		system_start 3 "$sysdir" || exit 1
		make_conts RP_2 || exit 1
		json=$OUT/$tp/failover-n3-RP_2-4k-randwrite.r$rep.json
		progress "$tp" "failover, 3 engines, RP_2 4k-randwrite for $FAIL_RUNTIME s, kill -9 at ${KILL_AFTER} s, run $rep/$REPEAT"
		"$LODE" bench --addr "$HOST" --transport "$tp" --cont "$(cont_name RP_2 4k)" \
			--rw randwrite --bs 4k --size 16m --numjobs "$JOBS" --iodepth "$DEPTH" \
			--runtime "$FAIL_RUNTIME" --ceiling 0 --json >"$json" 2>"${json%.json}.err" &
		BG_PID=$!
		sleep "$KILL_AFTER"
		kill_and_time "$OUT/$tp/failover-kill.r$rep.txt" || FAILED=1
		if ! wait "$BG_PID"; then
			echo "run.sh: the write run across the kill failed (run $rep):" >&2
			cat "${json%.json}.err" >&2
			FAILED=1
		fi
		BG_PID=
		[ -s "${json%.json}.err" ] || rm -f "${json%.json}.err"
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tp" failover 3 RP_2 4k-randwrite \
			"$rep" "$json" - - >>"$MANIFEST"
		system_stop
	done
done

# ---- part 5: the EC library, nothing else running ----
echo "run.sh: lode-ec-bench (codes 2+1 and 4+2, cells 4 KiB and 1 MiB)" >&2
"$ECBENCH" --codes 2+1,4+2 --cells 4K,1M >"$OUT/ec-bench.txt" || FAILED=1

echo "run.sh: done" >&2
exit "$FAILED"
