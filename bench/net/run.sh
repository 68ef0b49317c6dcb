#!/usr/bin/env bash
#
# bench/net/run.sh: the data plane's performance table. Starts a RAM-mode
# loded with one target, runs `lode bench` (one client thread) for each case
# over shm and over tcp, REPEAT times, and prints a Markdown table of the
# medians beside the ceilings that each run measured, and the targets.
#
# usage: bench/net/run.sh [BUILD_DIR] [OUT_JSON_DIR]
#   BUILD_DIR     holds bin/lode and bin/loded [<repo>/build]
#   OUT_JSON_DIR  where the JSON of every run, loded's log and summary.md go
#                 [a new temporary directory]
# environment:
#   RUNTIME       seconds measured per run (lode bench --runtime) [10]
#   REPEAT        runs per case; the table shows the median and the spread [3]
#
# Exit status: 0 when every run completed (a missed target is reported, not
# an error); 1 when loded did not start or a run failed; 2 on bad usage.
# See bench/net/README.md for what is measured and how to read it.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/net/run.sh [BUILD_DIR] [OUT_JSON_DIR]
  BUILD_DIR     holds bin/lode and bin/loded [<repo>/build]
  OUT_JSON_DIR  where the JSON of every run, loded's log and summary.md go
                [a new temporary directory]
environment:
  RUNTIME       seconds measured per run (lode bench --runtime) [10]
  REPEAT        runs per case; the table shows the median and the spread [3]
EOF
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
BUILD=${1:-$ROOT/build}
OUT=${2:-}
RUNTIME=${RUNTIME:-10}
REPEAT=${REPEAT:-3}
LODE=$BUILD/bin/lode
LODED=$BUILD/bin/loded

if ! [[ $REPEAT =~ ^[1-9][0-9]*$ ]]; then
	echo "run.sh: REPEAT must be a whole number above 0, not '$REPEAT'" >&2
	exit 2
fi
if ! [[ $RUNTIME =~ ^[0-9]+(\.[0-9]+)?$ ]] || [[ $RUNTIME =~ ^0+(\.0*)?$ ]]; then
	echo "run.sh: RUNTIME must be a number of seconds above 0, not '$RUNTIME'" >&2
	exit 2
fi
for b in "$LODE" "$LODED"; do
	if [ ! -x "$b" ]; then
		echo "run.sh: $b not found; build first (cmake --build $BUILD --target lode loded)" >&2
		exit 2
	fi
done
command -v python3 >/dev/null || {
	echo "run.sh: python3 is needed for the table" >&2
	exit 2
}

if [ -z "$OUT" ]; then
	OUT=$(mktemp -d "${TMPDIR:-/tmp}/lode-netbench.XXXXXX")
fi
mkdir -p "$OUT"

# name | lode bench arguments. Sizes are per job; one job (client thread).
CASES=(
	"shm-1m-read|--transport shm --rw read --bs 1m --iodepth 4 --size 512m"
	"shm-1m-write|--transport shm --rw write --bs 1m --iodepth 4 --size 512m"
	"shm-4k-randread|--transport shm --rw randread --bs 4k --iodepth 32 --size 256m"
	"shm-4k-randwrite|--transport shm --rw randwrite --bs 4k --iodepth 32 --size 256m"
	"tcp-1m-read|--transport tcp --rw read --bs 1m --iodepth 4 --size 512m"
	"tcp-1m-write|--transport tcp --rw write --bs 1m --iodepth 4 --size 512m"
	"tcp-4k-randread|--transport tcp --rw randread --bs 4k --iodepth 32 --size 256m"
	"tcp-4k-randwrite|--transport tcp --rw randwrite --bs 4k --iodepth 32 --size 256m"
)

DATA=/dev/shm/lode-netbench-$$
if [ -e "$DATA" ]; then
	echo "run.sh: $DATA already exists; not touching it" >&2
	exit 1
fi
BENCH_PROG=run.sh
# shellcheck source=bench/common.sh
. "$ROOT/bench/common.sh"

cleanup() {
	local rc=$?
	trap - EXIT
	bench_loded_stop
	rm -rf "$DATA"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ADDR=127.0.0.1:$(bench_free_port)

echo "run.sh: starting loded on $ADDR, data in $DATA, output in $OUT" >&2
# The first start writes the admin's credentials; the benchmark connects with them.
export LODE_CREDENTIALS=$OUT/admin.credentials
rm -f "$LODE_CREDENTIALS"
bench_loded_start "$LODED" "$LODE" "$ADDR" "$OUT/loded.log" --path "$DATA" --ram \
	--capacity 2G --targets 1 --admin-cred "$LODE_CREDENTIALS" || exit 1

# Repeats are the outer loop, so that a burst of load from elsewhere lands on
# different cases rather than on every run of one.
for rep in $(seq 1 "$REPEAT"); do
	for c in "${CASES[@]}"; do
		name=${c%%|*}
		args=${c#*|}
		echo "run.sh: run $rep/$REPEAT: $name" >&2
		# shellcheck disable=SC2086 # args is a list of words by design
		if ! "$LODE" bench --addr "$ADDR" $args --numjobs 1 --runtime "$RUNTIME" --json \
			>"$OUT/$name.r$rep.json" 2>"$OUT/$name.r$rep.err"; then
			echo "run.sh: lode bench failed for $name (run $rep):" >&2
			cat "$OUT/$name.r$rep.err" >&2
			exit 1
		fi
		# Warnings (if any) stay beside the JSON; an empty file goes.
		[ -s "$OUT/$name.r$rep.err" ] || rm -f "$OUT/$name.r$rep.err"
	done
done

names=()
for c in "${CASES[@]}"; do
	names+=("${c%%|*}")
done

python3 - "$OUT" "$REPEAT" "$RUNTIME" "${names[@]}" <<'PY' | tee "$OUT/summary.md"
import json
import os
import shutil
import statistics
import sys

out, repeat, runtime, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

# Targets from the issue: (kind, threshold, text). "ratio" is of the ceiling
# shown in the row; "iops" is absolute.
TARGETS = {
    "shm-1m-read": ("ratio", 0.75, ">= 75% of memcpy"),
    "shm-1m-write": ("ratio", 0.75, ">= 75% of memcpy"),
    "shm-4k-randread": ("iops", 250e3, ">= 250K IOPS"),
    "tcp-1m-read": ("ratio", 0.80, ">= 80% of tcp stream"),
    "tcp-4k-randread": ("iops", 80e3, ">= 80K IOPS"),
}
SPEEDUP = ("shm-4k-randread", "tcp-4k-randread", 3.0)

warnings = []


def load(name):
    runs = []
    for i in range(1, repeat + 1):
        path = os.path.join(out, "%s.r%d.json" % (name, i))
        with open(path) as f:
            runs.append((path, json.load(f)))
    return runs


def ceiling_of(name, d):
    """The ceiling this case is read against: (label, value, unit, result, ratio).

    The ratio is recomputed from the run's own result and ceiling and
    checked against the one lode bench printed, so that a report whose
    ratio does not follow from its numbers is caught here.
    """
    c, r = d["ceilings"], d["result"]
    bulk = d["config"]["bs"] >= 64 * 1024
    if name.startswith("shm") and bulk:
        m = c.get("memcpy")
        if not m:
            return None
        label, value, unit = "memcpy", m["bw_gib_s"], "GiB/s"
        mine = r["bw_mib_s"] / m["bw_mib_s"] if m["bw_mib_s"] else 0
        printed = m["ratio"]
    else:
        t = c.get("tcp")
        if not t:
            return None
        if t["kind"] == "stream":
            label, value, unit = "tcp stream", t["bw_gib_s"], "GiB/s"
            mine = r["bw_mib_s"] / t["bw_mib_s"] if t["bw_mib_s"] else 0
        else:
            label, value, unit = "tcp round trips", t["round_trips_s"] / 1e3, "K/s"
            mine = r["iops"] / t["round_trips_s"] if t["round_trips_s"] else 0
        printed = t["ratio"]
    if abs(mine - printed) > 1e-4 + 1e-3 * abs(mine):
        warnings.append("%s: printed ratio %.5f but result / ceiling is %.5f"
                        % (name, printed, mine))
    return label, value, unit, mine


def fmt_spread(vals, f):
    mid = f(statistics.median(vals))
    if len(vals) == 1:
        return mid
    return "%s (%s–%s)" % (mid, f(min(vals)), f(max(vals)))


def fmt_pct(v):
    return "n/a" if v is None else "%.0f" % v


rows, medians = [], {}
for name in names:
    runs = load(name)
    ds = [d for _, d in runs]
    for path, d in runs:
        want = name.split("-")[0]
        got = d["connection"]["transport"]
        if got != want:
            warnings.append("%s: %s ran over %s, not %s" % (name, path, got, want))
        if not d["ok"]:
            warnings.append("%s: %s reports an error: %s" % (name, path, d["error"]))
    bulk = ds[0]["config"]["bs"] >= 64 * 1024
    if bulk:
        res = [d["result"]["bw_gib_s"] for d in ds]
        res_fmt = lambda v: "%.2f" % v
        res_unit = "GiB/s"
    else:
        res = [d["result"]["iops"] / 1e3 for d in ds]
        res_fmt = lambda v: "%.1f" % v
        res_unit = "K IOPS"
    med = statistics.median(res)
    medians[name] = med
    # The run nearest the median stands for the case as <name>.json.
    rep_i = min(range(len(res)), key=lambda i: abs(res[i] - med))
    shutil.copyfile(runs[rep_i][0], os.path.join(out, name + ".json"))

    ceils = [ceiling_of(name, d) for d in ds]
    if all(ceils):
        label, _, unit, _ = ceils[0]
        ceil_txt = "%s %s %s" % (label, fmt_spread([c[1] for c in ceils],
                                                   lambda v: "%.1f" % v), unit)
        ratio = statistics.median([c[3] for c in ceils])
        ratio_txt = ("%.0f%%" % (100 * ratio)) if unit == "GiB/s" else "%.2f×" % ratio
    else:
        ceil_txt, ratio, ratio_txt = "not measured", None, "—"

    p50 = statistics.median([d["result"]["lat_p50_us"] for d in ds])
    p99 = statistics.median([d["result"]["lat_p99_us"] for d in ds])
    ccpu = statistics.median([d["cpu"]["client_pct_of_wall"] for d in ds])
    scpus = [d["cpu"]["server_pct_of_wall"] for d in ds]
    scpu = None if None in scpus else statistics.median(scpus)

    tgt = TARGETS.get(name)
    if tgt is None:
        tgt_txt = "—"
    else:
        kind, thr, text = tgt
        if kind == "ratio":
            ok = ratio is not None and ratio >= thr
        else:
            ok = med * 1e3 >= thr
        tgt_txt = "%s: **%s**" % (text, "pass" if ok else "FAIL")
    rows.append([name, "%s %s" % (fmt_spread(res, res_fmt), res_unit), ceil_txt, ratio_txt,
                 "%.0f / %.0f" % (p50, p99), "%.0f" % ccpu, fmt_pct(scpu), tgt_txt])

hdr = ["case", "result, median (min–max)", "ceiling, same run", "ratio",
       "p50 / p99 µs", "client CPU %", "server CPU %", "target"]
print("Lode data plane, RAM-mode loded, 1 target, 1 client thread; "
      "%s s per run, %d run%s per case, median (min–max).\n"
      % (runtime, repeat, "" if repeat == 1 else "s"))
print("| " + " | ".join(hdr) + " |")
print("| " + " | ".join("---" for _ in hdr) + " |")
for r in rows:
    print("| " + " | ".join(r) + " |")

a, b, thr = SPEEDUP
if a in medians and b in medians:
    x = medians[a] / medians[b] if medians[b] else 0
    print("\nshm 4K randread / tcp 4K randread: %.1fK / %.1fK IOPS = %.2f× "
          "(target >= %g×): **%s**" % (medians[a], medians[b], x, thr,
                                       "pass" if x >= thr else "FAIL"))
for w in warnings:
    print("\nwarning: " + w)
PY
echo "run.sh: JSON of every run, loded.log and summary.md are in $OUT" >&2
