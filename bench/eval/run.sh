#!/usr/bin/env bash
#
# bench/eval/run.sh: the evaluation suite behind `make eval`. It measures
# Lode from the raw device up to the POSIX API, each number beside a
# ceiling the same run measured, and writes a report generated from the data:
#
#   device  fio (io_uring, O_DIRECT) on the storage path where disk-backed
#           targets live: jobs x {1 MiB, 4 KiB} x {read, write, randread,
#           randwrite}; the raw device's ceiling.
#   net     `lode bench` through the data plane (liblode, UCX, loded RAM
#           targets) for each transport present: client threads x targets
#           (loded restarted with --targets N); 1 MiB reads and 4 KiB random
#           reads (and the writes in full mode); each run carries its own
#           memcpy and loopback TCP ceilings.
#   e2e     the four workloads through liblodefs (`lode bench --api fs`),
#           the FUSE mount (fio psync, O_DIRECT) and the preload library (the
#           same fio under LD_PRELOAD), over tcp and shm, with RAM-backed
#           (/dev/shm) and disk-backed targets; beside fio on the medium itself.
#
# Then bench/eval/report.py turns the raw JSON into evaluation.md and PNGs.
#
# usage: bench/eval/run.sh [SECTION...]
#   SECTION   device, net, e2e or report [device net e2e report]; `report`
#             alone regenerates the report from the raw JSON already there.
#             A section that runs replaces its own raw files only.
# environment:
#   MODE      quick (10-15 min on 2 cores) or full (larger hosts) [quick]
#   EVAL_OUT  evaluation.md goes here, PNGs in EVAL_OUT/eval, the raw JSON in
#             EVAL_OUT/eval/raw [<repo>/docs]
#   BUILD     holds bin/lode, bin/loded, bin/lode-fuse, lib/liblode-preload.so
#             [<repo>/build]
#   DISK_DIR  directory on the storage path, for disk-backed targets and the
#             device ceiling's files [<repo>/lode-data/eval-<pid>]
#   REPEAT, RUNTIME_DEV, RUNTIME_NET, RUNTIME_E2E, DEV_JOBS, NET_THREADS,
#   NET_TARGETS, E2E_JOBS, TRANSPORTS override what MODE picks (see below).
#   PYTHON    a python3 with matplotlib [/usr/bin/python3 if it has it]
# Exit status: 0 when every run completed; 1 when a run failed (the report
# says which are missing) or set-up failed; 2 on bad usage or a missing tool.
# bench/eval/README.md says what is measured and how to read the report.
set -euo pipefail

usage() {
	sed -n '3,43p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
SECTIONS=()
for a in "$@"; do
	case $a in
	-h | --help)
		usage
		exit 0
		;;
	device | net | e2e | report) SECTIONS+=("$a") ;;
	*)
		usage >&2
		exit 2
		;;
	esac
done
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(device net e2e report)
want() { [[ " ${SECTIONS[*]} " == *" $1 "* ]]; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_PROG="eval"
# shellcheck source=bench/common.sh
. "$ROOT/bench/common.sh"

MODE=${MODE:-quick}
case $MODE in
quick)
	: "${REPEAT:=2}" "${RUNTIME_DEV:=1}" "${RUNTIME_NET:=1}" "${RUNTIME_E2E:=2}"
	: "${DEV_JOBS:=1 2 4 8 16}" "${NET_THREADS:=1 2 4}" "${NET_TARGETS:=1 2 4}"
	: "${E2E_JOBS:=4}"
	NET_WL=("read 1m" "randread 4k")
	DEV_MB=512 NET_MB_1M=64 NET_MB_4K=16 E2E_MB=256 E2E_MB_4K=32
	;;
full)
	: "${REPEAT:=3}" "${RUNTIME_DEV:=10}" "${RUNTIME_NET:=10}" "${RUNTIME_E2E:=10}"
	: "${DEV_JOBS:=1 2 4 8 16}" "${NET_THREADS:=1 2 4 8 16}" "${NET_TARGETS:=1 2 4}"
	: "${E2E_JOBS:=16}"
	NET_WL=("read 1m" "write 1m" "randread 4k" "randwrite 4k")
	DEV_MB=4096 NET_MB_1M=256 NET_MB_4K=64 E2E_MB=1024 E2E_MB_4K=256
	;;
*)
	echo "eval: MODE must be quick or full, not '$MODE'" >&2
	exit 2
	;;
esac
if ! [[ $REPEAT =~ ^[1-9][0-9]*$ ]]; then
	echo "eval: REPEAT must be a whole number above 0, not '$REPEAT'" >&2
	exit 2
fi
for v in RUNTIME_DEV RUNTIME_NET RUNTIME_E2E; do
	if ! [[ ${!v} =~ ^[0-9]+(\.[0-9]+)?$ ]] || [[ ${!v} =~ ^0+(\.0*)?$ ]]; then
		echo "eval: $v must be a number of seconds above 0, not '${!v}'" >&2
		exit 2
	fi
done

EVAL_OUT=${EVAL_OUT:-$ROOT/docs}
BUILD=${BUILD:-$ROOT/build}
RAW=$EVAL_OUT/eval/raw
LODE=$BUILD/bin/lode
LODED=$BUILD/bin/loded
LODE_FUSE=$BUILD/bin/lode-fuse
PRELOAD=$BUILD/lib/liblode-preload.so
[ -f "$PRELOAD" ] || PRELOAD=$BUILD/bin/liblode-preload.so
if [ -z "${PYTHON:-}" ]; then
	PYTHON=python3
	/usr/bin/python3 -c 'import matplotlib' 2>/dev/null && PYTHON=/usr/bin/python3
fi
BENCH_PYTHON=$PYTHON # bench_free_port runs it
"$PYTHON" -c 'import matplotlib' 2>/dev/null || {
	echo "eval: $PYTHON has no matplotlib (apt-get install python3-matplotlib)" >&2
	exit 2
}

measuring=0
want device || want net || want e2e && measuring=1
if [ "$measuring" = 1 ]; then
	for b in "$LODE" "$LODED" "$LODE_FUSE" "$PRELOAD"; do
		[ -e "$b" ] || {
			echo "eval: $b not found; build first (make)" >&2
			exit 2
		}
	done
	bench_need fio fusermount3 mountpoint timeout || exit 2
	[ -e /dev/fuse ] || {
		echo "eval: /dev/fuse is missing; the FUSE and preload cases need it" >&2
		exit 2
	}
fi

mkdir -p "$RAW"
# One evaluation at a time on this machine: two would share its cores, /dev/shm
# and the storage path, and measure each other.
# (A pid file rather than flock: loded and lode-fuse would inherit flock's
# descriptor and hold the lock after this script.)
LOCK=${TMPDIR:-/tmp}/lode-eval.pid
if other=$(cat "$LOCK" 2>/dev/null) && [ -n "$other" ] && kill -0 "$other" 2>/dev/null; then
	echo "eval: another evaluation (pid $other, $LOCK) is running; not starting" >&2
	exit 1
fi
echo $$ >"$LOCK"

WORK=/dev/shm/lode-eval-$$
DISK_DIR=${DISK_DIR:-$ROOT/lode-data/eval-$$}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/lode-eval-logs.XXXXXX")
MNT=$LOGS/mnt
sampler_pid=
failures=()

cleanup() {
	local rc=$?
	trap - EXIT
	bench_unmount "$MNT"
	bench_loded_stop
	if [ -n "$sampler_pid" ]; then
		kill "$sampler_pid" 2>/dev/null || true
		wait "$sampler_pid" 2>/dev/null || true
	fi
	rm -rf "$WORK" "$DISK_DIR"
	[ "$(cat "$LOCK" 2>/dev/null)" = $$ ] && rm -f "$LOCK"
	[ "$rc" = 0 ] || echo "eval: stopped (exit $rc); logs are in $LOGS" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$measuring" = 1 ]; then
	for d in "$WORK" "$DISK_DIR"; do
		if [ -e "$d" ]; then
			echo "eval: $d already exists; not touching it" >&2
			exit 1
		fi
	done
	mkdir -p "$WORK" "$DISK_DIR" "$MNT"
	if mountpoint -q "$MNT"; then
		echo "eval: $MNT is already a mount point" >&2
		exit 1
	fi
	export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
	export LODE_CREDENTIALS=$LOGS/admin.credentials
	# CPU pressure through the run, for the report: a busy machine widens
	# every spread, and the reader should know how busy it was.
	(
		t0=$(date +%s)
		while :; do
			printf '%s %s\n' "$(($(date +%s) - t0))" "$(head -1 /proc/pressure/cpu 2>/dev/null)"
			sleep 5
		done
	) >"$LOGS/pressure.log" 2>/dev/null &
	sampler_pid=$!
fi

T0=$(date +%s)
done_n=0
total_n=0

progress() { # progress LABEL: one line on stderr, case n of m, elapsed, estimate
	local now el left=""
	done_n=$((done_n + 1))
	now=$(date +%s)
	el=$((now - T0))
	if [ "$done_n" -gt 1 ]; then
		left=$((el * (total_n - done_n + 1) / (done_n - 1)))
		left=", about $((left / 60))m$((left % 60))s left"
	fi
	printf 'eval: [%d/%d] %s (elapsed %dm%02ds%s)\n' "$done_n" "$total_n" "$1" \
		$((el / 60)) $((el % 60)) "$left" >&2
}

# run_case RAW_NAME TIMEOUT COMMAND...: COMMAND's stdout becomes
# $RAW/RAW_NAME.json; a failure is recorded and the run goes on, so that one
# bad case costs one hole in the report rather than the whole evaluation.
run_case() {
	local name=$1 limit=$2 rc=0
	shift 2
	timeout --kill-after=10 "$limit" "$@" >"$RAW/$name.json" 2>"$LOGS/$name.err" || rc=$?
	if [ "$rc" != 0 ]; then
		echo "eval: $name failed (exit $rc):" >&2
		tail -5 "$LOGS/$name.err" >&2
		rm -f "$RAW/$name.json"
		failures+=("$name")
	fi
	[ -s "$LOGS/$name.err" ] || rm -f "$LOGS/$name.err"
	return 0
}

# loded_up NAME TARGETS DATA_DIR [--ram]: a fresh loded on a free port.
loded_up() {
	local name=$1 targets=$2 data=$3
	shift 3
	ADDR=127.0.0.1:$(bench_free_port)
	export LODE_ADDR=$ADDR
	rm -rf "$data" "$LODE_CREDENTIALS"
	mkdir -p "$data"
	bench_loded_start "$LODED" "$LODE" "$ADDR" "$LOGS/loded.$name.log" --path "$data" \
		--targets "$targets" --capacity "${LODED_CAPACITY:-2G}" \
		--admin-cred "$LODE_CREDENTIALS" "$@"
}

loded_down() { # loded_down DATA_DIR
	bench_loded_stop
	rm -rf "$1"
}

# ---- which transports work here -------------------------------------------
# tcp and shm are expected everywhere; rdma only where a device exists. Each is
# tried with a tiny lode bench run and kept if the run used it: detected,
# never assumed, and an absent rdma is reported, not an error.
RDMA_NOTE="not tried"
detect_transports() {
	local tp got out
	if [ -n "${TRANSPORTS:-}" ]; then
		RDMA_NOTE="not tried: TRANSPORTS='$TRANSPORTS' was given"
		return 0
	fi
	TRANSPORTS=""
	loded_up probe 1 "$WORK/probe" --ram || exit 1
	for tp in tcp shm rdma; do
		out=$LOGS/probe.$tp
		got=$(timeout --kill-after=5 30 "$LODE" bench --addr "$ADDR" --transport "$tp" \
			--rw write --bs 4k --size 1m --runtime 0.2 --ceiling 0 --cont eval-probe \
			--json 2>"$out.err" | "$PYTHON" -c 'import json, sys
d = json.load(sys.stdin)
print(d["connection"]["transport"] if d.get("ok") else "")' 2>/dev/null) || got=""
		if [ "$got" = "$tp" ]; then
			TRANSPORTS+="${TRANSPORTS:+ }$tp"
		elif [ "$tp" = rdma ]; then
			if [ -d /sys/class/infiniband ] && [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
				RDMA_NOTE="an RDMA device exists but lode bench --transport rdma did not run over it: $(head -c 200 "$out.err" | tr '\n' ' ')"
			else
				RDMA_NOTE="no RDMA device on this machine (/sys/class/infiniband is empty or missing); lode bench --transport rdma ${got:+fell back to $got}${got:-did not connect}"
			fi
		else
			echo "eval: transport $tp does not work here: $(head -c 300 "$out.err")" >&2
		fi
	done
	[[ " $TRANSPORTS " == *" rdma "* ]] && RDMA_NOTE="usable"
	loded_down "$WORK/probe"
	echo "eval: transports: $TRANSPORTS (rdma: $RDMA_NOTE)" >&2
	[ -n "$TRANSPORTS" ] || {
		echo "eval: no transport works; see $LOGS/probe.*.err" >&2
		exit 1
	}
}

# ---- fio -------------------------------------------------------------------
# fio_json NAME RUNTIME [fio args...]: one fio run, its JSON as is; under
# the command in FIO_PRE (env LD_PRELOAD=...) when that is set.
FIO_PRE=()
fio_json() {
	local name=$1 runtime=$2
	shift 2
	run_case "$name" "$(awk -v r="$runtime" 'BEGIN { printf "%d", r + 300 }')" \
		"${FIO_PRE[@]}" fio --output-format=json --direct=1 --thread --group_reporting --time_based \
		--runtime="$runtime" "$@"
}

# workload NAME -> "rw bs numjobs MiB" for the end-to-end cases. The 4 KiB
# cases use a smaller region: a read run's region is written first, and
# liblodefs's prefill (lode bench) writes it in 4 KiB pieces, each made
# durable on a disk-backed target.
e2e_workload() {
	case $1 in
	read-1m) echo "read 1m 1 $E2E_MB" ;;
	write-1m) echo "write 1m 1 $E2E_MB" ;;
	randread-4k) echo "randread 4k $E2E_JOBS $E2E_MB_4K" ;;
	randwrite-4k) echo "randwrite 4k $E2E_JOBS $E2E_MB_4K" ;;
	esac
}
E2E_WL=(read-1m write-1m randread-4k randwrite-4k)
E2E_LAYERS=(lib fuse preload)
BACKINGS=(ram disk)

# ---- sections ----------------------------------------------------------------
section_device() {
	local dir=$DISK_DIR/device n bs rw rep
	mkdir -p "$dir"
	for rep in $(seq 1 "$REPEAT"); do
		for n in $DEV_JOBS; do
			for bs in 1m 4k; do
				for rw in read write randread randwrite; do
					progress "device: fio io_uring $rw $bs, jobs=$n, run $rep"
					# Job name fixed per job count, so that fio lays each
					# job's file out once and the other workloads reuse it.
					fio_json "device.$rw.$bs.j$n.r$rep" "$RUNTIME_DEV" --name="dev-j$n" \
						--directory="$dir" --size="$((DEV_MB / n))m" --ioengine=io_uring \
						--iodepth=1 --rw="$rw" --bs="$bs" --numjobs="$n"
				done
			done
		done
	done
	rm -rf "$dir"
}

section_net() {
	local t tp n wl rw bs rep size depth mb
	for t in $NET_TARGETS; do
		loded_up "net-t$t" "$t" "$WORK/net" --ram || exit 1
		for rep in $(seq 1 "$REPEAT"); do
			for wl in "${NET_WL[@]}"; do
				read -r rw bs <<<"$wl"
				if [ "$bs" = 1m ]; then
					mb=$NET_MB_1M depth=4
				else
					mb=$NET_MB_4K depth=32
				fi
				for tp in $TRANSPORTS; do
					for n in $NET_THREADS; do
						# The region is shared out among the threads, so that
						# 16 threads fit the targets' capacity as 1 does.
						size=$(((mb * 1024 / n) > 1024 ? mb * 1024 / n : 1024))k
						progress "net: $tp, targets=$t, threads=$n, $rw $bs, run $rep"
						run_case "net.$tp.t$t.$rw.$bs.j$n.r$rep" \
							"$(awk -v r="$RUNTIME_NET" 'BEGIN { printf "%d", r + 300 }')" \
							"$LODE" bench --addr "$ADDR" --transport "$tp" --rw "$rw" \
							--bs "$bs" --iodepth "$depth" --numjobs "$n" --size "$size" \
							--runtime "$RUNTIME_NET" --cont eval-net --json
					done
				done
			done
		done
		loded_down "$WORK/net"
	done
}

# e2e_fio NAME DIR WORKLOAD: the end-to-end fio (psync, O_DIRECT). One file
# serves every workload and its jobs: the first run (1 MiB reads) lays it out
# in 1 MiB writes; a 4 KiB run would lay it out in 4 KiB ones, each durable
# on a disk-backed target, for minutes.
e2e_fio() {
	local name=$1 dir=$2 wl=$3 rw bs n mb
	read -r rw bs n mb <<<"$(e2e_workload "$wl")"
	fio_json "$name" "$RUNTIME_E2E" --name="e2e" --filename="$dir/fio.dat" \
		--size="${mb}m" --ioengine=psync --rw="$rw" --bs="$bs" --numjobs="$n"
}

section_e2e() {
	local backing data medium ram_flag tp wl rep rw bs n mb layer limit
	limit=$(awk -v r="$RUNTIME_E2E" 'BEGIN { printf "%d", r + 300 }')
	for backing in "${BACKINGS[@]}"; do
		if [ "$backing" = ram ]; then
			data=$WORK/e2e-data medium=$WORK/medium ram_flag=(--ram)
		else
			data=$DISK_DIR/e2e-data medium=$DISK_DIR/medium ram_flag=()
		fi
		mkdir -p "$medium"
		loded_up "e2e-$backing" "${E2E_TARGETS:-2}" "$data" "${ram_flag[@]}" || exit 1
		"$LODE" cont create eval >/dev/null
		for rep in $(seq 1 "$REPEAT"); do
			# The medium itself, the same fio: the ceiling under this backing.
			for wl in "${E2E_WL[@]}"; do
				progress "e2e: $backing, fio on the medium, $wl, run $rep"
				e2e_fio "e2e.$backing.medium.$wl.r$rep" "$medium" "$wl"
			done
			for tp in $TRANSPORTS; do
				"$LODE_FUSE" --transport "$tp" --addr "$ADDR" --log "$LOGS/fuse.log" eval "$MNT" || {
					echo "eval: lode-fuse did not mount over $tp" >&2
					exit 1
				}
				for wl in "${E2E_WL[@]}"; do
					read -r rw bs n mb <<<"$(e2e_workload "$wl")"
					for layer in "${E2E_LAYERS[@]}"; do
						progress "e2e: $backing, $tp, $layer, $wl, run $rep"
						case $layer in
						lib)
							run_case "e2e.$backing.$tp-lib.$wl.r$rep" "$limit" \
								"$LODE" bench --api fs --cont eval --addr "$ADDR" \
								--transport "$tp" --rw "$rw" --bs "$bs" --numjobs "$n" \
								--size "$((mb / n))m" --runtime "$RUNTIME_E2E" --json
							;;
						fuse) e2e_fio "e2e.$backing.$tp-fuse.$wl.r$rep" "$MNT" "$wl" ;;
						preload)
							FIO_PRE=(env LD_PRELOAD="$PRELOAD" LODE_TRANSPORT="$tp")
							e2e_fio "e2e.$backing.$tp-preload.$wl.r$rep" "$MNT" "$wl"
							FIO_PRE=()
							;;
						esac
					done
				done
				bench_unmount "$MNT"
			done
		done
		loded_down "$data"
		rm -rf "$medium"
	done
}

# ---- the run -------------------------------------------------------------------
words() { # words LIST: how many words
	set -f
	# shellcheck disable=SC2086 # splitting is the point
	set -- $1
	set +f
	echo $#
}
if [ "$measuring" = 1 ]; then
	want net || want e2e && detect_transports
	ntp=$(words "${TRANSPORTS:-}")
	want device && total_n=$((total_n + $(words "$DEV_JOBS") * 8 * REPEAT))
	want net && total_n=$((total_n + ntp * $(words "$NET_TARGETS") * $(words "$NET_THREADS") *
		${#NET_WL[@]} * REPEAT))
	want e2e && total_n=$((total_n + ${#BACKINGS[@]} * ${#E2E_WL[@]} * REPEAT *
		(1 + ntp * ${#E2E_LAYERS[@]})))
	echo "eval: $MODE mode, $total_n runs, REPEAT=$REPEAT; raw JSON in $RAW, logs in $LOGS" >&2
	T0=$(date +%s)
	declare -A took=()
	for s in device net e2e; do
		want "$s" || continue
		rm -f "$RAW/$s".*.json
		t=$(date +%s)
		"section_$s"
		took[$s]=$(($(date +%s) - t))
	done
	kill "$sampler_pid" 2>/dev/null || true
	wait "$sampler_pid" 2>/dev/null || true
	sampler_pid=
	# What the report needs to know about the run and the machine; the
	# report's text comes from this and the raw JSON, nothing else.
	durations=""
	for s in "${!took[@]}"; do
		durations+="$s=${took[$s]} "
	done
	EV_MODE=$MODE EV_REPEAT=$REPEAT EV_RT_DEV=$RUNTIME_DEV EV_RT_NET=$RUNTIME_NET \
		EV_RT_E2E=$RUNTIME_E2E EV_DEV_JOBS=$DEV_JOBS EV_NET_THREADS=$NET_THREADS \
		EV_NET_TARGETS=$NET_TARGETS EV_E2E_JOBS=$E2E_JOBS EV_E2E_TARGETS=${E2E_TARGETS:-2} \
		EV_TRANSPORTS=${TRANSPORTS:-} EV_RDMA=$RDMA_NOTE EV_DURATIONS=$durations \
		EV_SECTIONS="${SECTIONS[*]}" EV_FAILURES="${failures[*]:-}" EV_ROOT=$ROOT EV_OUT=$EVAL_OUT \
		EV_DISK_DIR=$DISK_DIR EV_DEV_MB=$DEV_MB EV_E2E_MB=$E2E_MB EV_E2E_MB_4K=$E2E_MB_4K \
		EV_COMMAND="${EVAL_COMMAND:-bench/eval/run.sh${*:+ $*}} (MODE=$MODE)" \
		EV_PRESSURE=$LOGS/pressure.log EV_ELAPSED=$(($(date +%s) - T0)) \
		"$PYTHON" "$ROOT/bench/eval/meta.py" >"$RAW/meta.json.new"
	mv "$RAW/meta.json.new" "$RAW/meta.json"
	echo "eval: measured in $((($(date +%s) - T0) / 60))m$((($(date +%s) - T0) % 60))s" >&2
fi

if want report; then
	"$PYTHON" "$ROOT/bench/eval/report.py" --raw "$RAW" --out "$EVAL_OUT"
	echo "eval: wrote $EVAL_OUT/evaluation.md and $EVAL_OUT/eval/*.png" >&2
fi
if [ ${#failures[@]} -gt 0 ]; then
	echo "eval: ${#failures[@]} run(s) failed: ${failures[*]}; their stderr is in $LOGS" >&2
	exit 1
fi
