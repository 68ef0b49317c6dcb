#!/usr/bin/env bash
#
# bench/cluster/ec.sh: erasure coding beside replication (issue 6 §7). For
# each repeat, a fresh system of three RAM-mode engines on loopback (one
# hosts the management service, two join it; 2 targets each, transport
# tcp), an RP_2 and an EC_2P1 container. `lode bench` writes then reads
# 1 MiB blocks in each (numjobs 4, iodepth 4, 64 MiB a job), and writes
# 4 KiB blocks at random (16 MiB a job: EC_2P1's are partial stripes, read,
# modified and written under the array's write lease); then engine 2
# is killed with -9, and once the map shows it DOWN both are read again:
# degraded (EC_2P1 rebuilds a third of the cells from the other two; RP_2
# reads the live replica). The engine stays DOWN: with two engines left an
# EC_2P1 group has no replacement, so no rebuild moves data meanwhile. Each
# `lode bench` run measures its own loopback TCP stream, the ceiling.
# Prints a Markdown table of medians (min–max) in MiB/s (and IOPS for 4 KiB)
# and the ratio to the same run's TCP stream.
#
# usage: bench/cluster/ec.sh [BUILD_DIR] [OUT_DIR]
# environment:
#   RUNTIME   seconds each `lode bench` measures [3]
#   REPEAT    fresh systems [3]
# Exit status: 0 when every run completed, 1 otherwise, 2 on bad usage.
set -euo pipefail

case "${1:-}" in
-h | --help)
	sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac
[ $# -le 2 ] || {
	sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_PROG=ec.sh
# shellcheck source=bench/common.sh
. "$ROOT/bench/common.sh"
BUILD=${1:-$ROOT/build}
OUT=${2:-$(mktemp -d "${TMPDIR:-/tmp}/lode-ec.XXXXXX")}
RUNTIME=${RUNTIME:-3}
REPEAT=${REPEAT:-3}
LODE=$BUILD/bin/lode
LODED=$BUILD/bin/loded
for b in "$LODE" "$LODED"; do
	[ -x "$b" ] || {
		echo "ec.sh: $b not found; build first (make)" >&2
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

run() { # run NAME CONT RW [ARGS]: one lode bench, its JSON in $dir/NAME.json
	local name=$1 cont=$2 rw=$3 bs=1m size=64m
	shift 3
	[ "$rw" = randwrite ] && bs=4k size=16m
	"$LODE" --addr "$A" bench --cont "$cont" --transport tcp --rw "$rw" --bs $bs --numjobs 4 \
		--iodepth 4 --size $size --runtime "$RUNTIME" --json "$@" >"$dir/$name.json"
}

FAILED=0
: >"$OUT/runs.tsv"
for rep in $(seq 1 "$REPEAT"); do
	dir=$OUT/r$rep
	WORK=/dev/shm/lode-ec-$$-$rep
	mkdir -p "$dir" "$WORK"
	A=127.0.0.1:$(bench_free_port)
	export LODE_CREDENTIALS=$dir/admin.credentials
	echo "ec.sh: run $rep/$REPEAT: three engines, RP_2 and EC_2P1, then kill -9 of engine 2" >&2
	start a "$A" --admin-cred "$LODE_CREDENTIALS" --heartbeat-ms 200 --grace-ms 1500 || exit 1
	mgmt=$(sed -n 's/^mgmt: //p' "$LODE_CREDENTIALS")
	start b "127.0.0.1:$(bench_free_port)" --join "$mgmt" --join-cred "$LODE_CREDENTIALS" || exit 1
	wait_state 1 UP 10 || exit 1
	start c "127.0.0.1:$(bench_free_port)" --join "$mgmt" --join-cred "$LODE_CREDENTIALS" || exit 1
	c_pid=${PIDS[2]}
	wait_state 2 UP 10 || exit 1
	"$LODE" --addr "$A" cont create rp --class RP_2 >/dev/null
	"$LODE" --addr "$A" cont create ec --class EC_2P1 >/dev/null
	ok=1
	for c in rp ec; do
		run "$c-write" $c write && run "$c-read" $c read --prefill 0 &&
			run "$c-write4k" $c randwrite || ok=0
	done
	kill -KILL "$c_pid"
	wait "$c_pid" 2>/dev/null || true
	wait_state 2 DOWN 30 || ok=0
	for c in rp ec; do
		[ $ok = 1 ] && run "$c-degraded" $c read --prefill 0 --verify 0 || ok=0
	done
	if [ $ok = 1 ]; then
		printf '%s\n' "$rep" >>"$OUT/runs.tsv"
	else
		FAILED=1
	fi
	stop_all
	rm -rf "$WORK"
done

python3 - "$OUT" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys, os

out = sys.argv[1]
reps = [l.strip() for l in open(os.path.join(out, "runs.tsv")) if l.strip()]
def cell(xs, fmt):
    if not xs:
        return "—"
    return (fmt % statistics.median(xs)) + (" (" + fmt % min(xs) + "–" + fmt % max(xs) + ")" if len(xs) > 1 else "")
print("### 1 MiB blocks, RP_2 and EC_2P1 on three engines, %d runs\n" % len(reps))
print("| class | test | MiB/s | / loopback TCP stream | client CPU s per GiB | IOPS |")
print("|---|---|---|---|---|---|")
for c, name in (("rp", "RP_2"), ("ec", "EC_2P1")):
    for t, what in (("write", "write"), ("read", "read"), ("degraded", "read, engine 2 dead"),
                    ("write4k", "4 KiB random write")):
        bw, ratio, cpu, iops = [], [], [], []
        for r in reps:
            d = json.load(open(os.path.join(out, "r" + r, "%s-%s.json" % (c, t))))
            res = d["result"]
            b = res["bw_mib_s"]
            bw.append(b)
            tcp = (d["ceilings"]["tcp"] or {}).get("bw_mib_s", 0)
            ratio.append(b / tcp if tcp else 0)
            gib = res["bytes"] / 2**30
            if gib:
                cpu.append(d["cpu"]["client_s"] / gib)
            if t == "write4k":
                iops.append(res["ios"] / d["wall_s"])
        print("| %s | %s | %s | %s | %s | %s |" % (name, what, cell(bw, "%.0f"), cell(ratio, "%.2f"),
              cell(cpu, "%.2f"), cell(iops, "%.0f")))
PY
exit "$FAILED"
