#!/usr/bin/env bash
#
# bench/cluster/rebuild.sh: rebuild throughput (issue 6 §7). For each
# repeat, a fresh system of three RAM-mode engines on loopback (one hosts
# the management service, two join it; 2 targets each, transport tcp), an
# RP_2 container filled with DATA_MB of 1 MiB values through `lode bench`
# (whose run also measures the loopback TCP stream, the ceiling); then
# kill -9 of engine 2 and the time until the map shows it DOWN, and from
# DOWN until the survivors have rebuilt its replicas and the map shows it
# OUT. The bytes copied are the survivors' own reports (their logs: "rebuild
# ... done, N objects, B bytes"). Prints a Markdown table of medians
# (min–max): bytes copied, seconds, MiB/s over both survivors and of the
# one that copied more, and the ratio to the same run's TCP stream.
# MODE=integrate: instead of the kill, a fourth engine joins (NEW) and the
# time is from its start until the map shows it NEW, then until the three
# have copied onto it what the layout with it places there and the map
# shows it UP (docs/decisions/0014); the rates are over all three.
#
# usage: bench/cluster/rebuild.sh [BUILD_DIR] [OUT_DIR]
# environment:
#   DATA_MB   MiB written to the RP_2 container before the kill [256]
#   REPEAT    fresh systems [3]
#   GRACE_MS  the service's grace period [1500]
#   MODE      rebuild (kill -9 of engine 2) or integrate (a fourth joins) [rebuild]
# Exit status: 0 when every run completed, 1 otherwise, 2 on bad usage.
set -euo pipefail

case "${1:-}" in
-h | --help)
	sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac
[ $# -le 2 ] || {
	sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_PROG=rebuild.sh
# shellcheck source=bench/common.sh
. "$ROOT/bench/common.sh"
BUILD=${1:-$ROOT/build}
OUT=${2:-$(mktemp -d "${TMPDIR:-/tmp}/lode-rebuild.XXXXXX")}
DATA_MB=${DATA_MB:-256}
REPEAT=${REPEAT:-3}
GRACE_MS=${GRACE_MS:-1500}
MODE=${MODE:-rebuild}
case $MODE in
rebuild | integrate) ;;
*)
	echo "rebuild.sh: MODE is rebuild or integrate, not '$MODE'" >&2
	exit 2
	;;
esac
LODE=$BUILD/bin/lode
LODED=$BUILD/bin/loded
for b in "$LODE" "$LODED"; do
	[ -x "$b" ] || {
		echo "rebuild.sh: $b not found; build first (make)" >&2
		exit 2
	}
done
bench_need python3 || exit 2
mkdir -p "$OUT"
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} LODE_TIMEOUT_MS=${LODE_TIMEOUT_MS:-10000}

# shellcheck source=bench/cluster/lib.sh
. "$ROOT/bench/cluster/lib.sh"
trap 'stop_all; rm -rf "${WORK:-/nonexistent}"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


FAILED=0
: >"$OUT/runs.tsv"
for rep in $(seq 1 "$REPEAT"); do
	dir=$OUT/r$rep
	WORK=/dev/shm/lode-rebuild-$$-$rep
	mkdir -p "$dir" "$WORK"
	A=127.0.0.1:$(bench_free_port)
	export LODE_CREDENTIALS=$dir/admin.credentials
	if [ "$MODE" = integrate ]; then
		echo "rebuild.sh: run $rep/$REPEAT: three engines, $DATA_MB MiB of RP_2, a fourth joins" >&2
	else
		echo "rebuild.sh: run $rep/$REPEAT: three engines, $DATA_MB MiB of RP_2, kill -9 of engine 2" >&2
	fi
	start a "$A" --admin-cred "$LODE_CREDENTIALS" --heartbeat-ms 200 --grace-ms "$GRACE_MS" ||
		exit 1
	mgmt=$(sed -n 's/^mgmt: //p' "$LODE_CREDENTIALS")
	start b "127.0.0.1:$(bench_free_port)" --join "$mgmt" --join-cred "$LODE_CREDENTIALS" || exit 1
	wait_state 1 UP 10 || exit 1
	start c "127.0.0.1:$(bench_free_port)" --join "$mgmt" --join-cred "$LODE_CREDENTIALS" || exit 1
	c_pid=${PIDS[2]}
	wait_state 2 UP 10 || exit 1
	"$LODE" --addr "$A" cont create rb --class RP_2 >/dev/null
	# --rw read writes the region once (prefill) before its short read.
	# An RP_2 object has one group (two engines): 8 objects spread the work.
	"$LODE" --addr "$A" bench --cont rb --transport tcp --rw read --bs 1m --numjobs 8 \
		--iodepth 4 --size "$((DATA_MB / 8))m" --runtime 1 --json >"$dir/fill.json" ||
		{ FAILED=1; stop_all; continue; }
	t0=$(date +%s%N)
	if [ "$MODE" = integrate ]; then
		start d "127.0.0.1:$(bench_free_port)" --join "$mgmt" --join-cred "$LODE_CREDENTIALS" ||
			exit 1
		wait_state 3 NEW 30 || { FAILED=1; stop_all; continue; }
		t1=$(date +%s%N)
		wait_state 3 UP 600 || { FAILED=1; stop_all; continue; }
		t2=$(date +%s%N)
		copiers=("$dir/a.log" "$dir/b.log" "$dir/c.log")
	else
		kill -KILL "$c_pid"
		wait "$c_pid" 2>/dev/null || true
		wait_state 2 DOWN 30 || { FAILED=1; stop_all; continue; }
		t1=$(date +%s%N)
		wait_state 2 OUT 600 || { FAILED=1; stop_all; continue; }
		t2=$(date +%s%N)
		copiers=("$dir/a.log" "$dir/b.log")
	fi
	# What each copier copied: the total, and the busiest one's share.
	bytes=$(grep -ho "rebuild for pool map version [0-9]*: done, [0-9]* objects, [0-9]* bytes" \
		"${copiers[@]}" |
		awk '{ s += $(NF - 1); if ($(NF - 1) > m) m = $(NF - 1) } END { print s + 0, m + 0 }')
	tcp=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ceilings"]["tcp"]["bw_mib_s"])' \
		"$dir/fill.json")
	printf '%s\t%s\t%s\t%s\t%s\n' "$rep" "$t0" "$t1" "$t2" "$bytes $tcp" >>"$OUT/runs.tsv"
	stop_all
	rm -rf "$WORK"
done

python3 - "$OUT/runs.tsv" "$DATA_MB" "$MODE" <<'PY' | tee "$OUT/summary.md"
import statistics, sys

rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
def cell(xs, fmt):
    if not xs:
        return "—"
    return (fmt % statistics.median(xs)) + (" (" + fmt % min(xs) + "–" + fmt % max(xs) + ")" if len(xs) > 1 else "")
down, rebuild, copied, rate, per, ratio = [], [], [], [], [], []
for _, t0, t1, t2, rest in rows:
    b, busiest, tcp = rest.split()
    b, busiest, tcp = int(b), int(busiest), float(tcp)
    secs = (int(t2) - int(t1)) / 1e9
    down.append((int(t1) - int(t0)) / 1e9)
    rebuild.append(secs)
    copied.append(b / 2**20)
    r = b / 2**20 / secs if secs > 0 else 0
    rate.append(r)
    per.append(busiest / 2**20 / secs if secs > 0 else 0)
    ratio.append(r / tcp if tcp else 0)
if sys.argv[3] == "integrate":
    print("### Integration of a fourth engine into three, RP_2, %s MiB written, %d runs\n" % (sys.argv[2], len(rows)))
    print("| start to NEW (s) | NEW to UP (s) | copied (MiB) | MiB/s, all three | MiB/s, the busiest one | / loopback TCP stream |")
else:
    print("### Rebuild of one engine of three, RP_2, %s MiB written, %d runs\n" % (sys.argv[2], len(rows)))
    print("| kill to DOWN (s) | DOWN to OUT (s) | copied (MiB) | MiB/s, both survivors | MiB/s, the busier one | / loopback TCP stream |")
print("|---|---|---|---|---|---|")
print("| %s | %s | %s | %s | %s | %s |" % (cell(down, "%.2f"), cell(rebuild, "%.2f"), cell(copied, "%.0f"),
      cell(rate, "%.1f"), cell(per, "%.1f"), cell(ratio, "%.3f")))
PY
exit "$FAILED"
