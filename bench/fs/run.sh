#!/usr/bin/env bash
#
# bench/fs/run.sh: the POSIX layer's performance table. In one run it sets up
#   local   a directory on tmpfs (/dev/shm), the medium the RAM targets use;
#   pt      that directory through FUSE's passthrough_ll example (built here
#           from libfuse3-dev's examples), the cost of FUSE alone;
#   fuse    a Lode container mounted by lode-fuse (RAM-mode loded);
#   preload the same mount with LD_PRELOAD=liblode-preload.so, so fio's
#           reads and writes go through liblodefs and skip the kernel;
#   lib     `lode bench --api fs`: liblodefs itself, no kernel at all;
#   plb     `lode bench --api posix` on the mount under the preload library:
#           the preload path driven by lode bench's loop, so that beside
#           lib it shows the library's own cost without fio's;
# and runs the same fio workloads (O_DIRECT, so every I/O reaches the file
# system under test rather than the page cache) on each, REPEAT times (a
# case's columns back to back, in reverse order on even repeats), plus
# lode-mdbench's metadata rates. It prints a Markdown table of medians with
# their spread, the ratios the issue sets targets for, and keeps every JSON.
#
# usage: bench/fs/run.sh [BUILD_DIR] [OUT_DIR]
# environment:
#   RUNTIME    seconds per fio / lode bench run [10]
#   RAMP       seconds of I/O before each run's measured interval [2]: a
#              preloaded fio's threads make their liblodefs connections
#              during its first second, as lode bench's jobs do before theirs
#   REPEAT     runs per case [3]
#   TRANSPORT  lode-fuse's and liblodefs's transport [shm]
#   TARGETS    loded targets [2]
#   SIZE_MB    MiB of file per case (fio's jobs share one file; lode bench
#              gives each job SIZE_MB / numjobs) [256]
#   MDFILES    files per metadata run [20000]
#   CASES      an extended regex: only the data-path cases whose names match
#              (e.g. 'randread-4k-j'); metadata runs only when it matches 'md'
#              [every case]
# Exit status: 0 when every run completed (a missed target is reported, not
# an error); 1 on a failed run or set-up, or a preload or plb run in which
# the preload library served no I/O (its LODE_PRELOAD_DEBUG summary); 2 on
# bad usage.
set -euo pipefail

usage() {
	sed -n '3,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}
case "${1:-}" in
-h | --help)
	usage
	exit 0
	;;
esac
[ $# -le 2 ] || {
	usage >&2
	exit 2
}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BENCH_PROG=run.sh
# shellcheck source=bench/common.sh
. "$ROOT/bench/common.sh"
BUILD=${1:-$ROOT/build}
OUT=${2:-$(mktemp -d "${TMPDIR:-/tmp}/lode-fsbench.XXXXXX")}
RUNTIME=${RUNTIME:-10}
RAMP=${RAMP:-2}
REPEAT=${REPEAT:-3}
TRANSPORT=${TRANSPORT:-shm}
TARGETS=${TARGETS:-2}
SIZE_MB=${SIZE_MB:-256}
MDFILES=${MDFILES:-20000}
CASES=${CASES:-.}
BIN=$BUILD/bin
PRELOAD=$BUILD/lib/liblode-preload.so
[ -f "$PRELOAD" ] || PRELOAD=$BIN/liblode-preload.so
EXAMPLES=/usr/share/doc/libfuse3-dev/examples

for b in "$BIN/lode" "$BIN/loded" "$BIN/lode-fuse" "$BIN/lode-mdbench" "$PRELOAD"; do
	[ -e "$b" ] || {
		echo "run.sh: $b not found; build first (make)" >&2
		exit 2
	}
done
bench_need fio python3 gcc fusermount3 || exit 2
[ -f "$EXAMPLES/passthrough_ll.c" ] || {
	echo "run.sh: $EXAMPLES/passthrough_ll.c not found (libfuse3-dev)" >&2
	exit 2
}
mkdir -p "$OUT"

WORK=/dev/shm/lode-fsbench-$$
LOCAL=$WORK/local
DATA=$WORK/data
MNT_PT=$OUT/mnt-pt
MNT_LODE=$OUT/mnt-lode
PT=$OUT/passthrough_ll

cleanup() {
	local rc=$?
	trap - EXIT
	bench_unmount "$MNT_LODE" "$MNT_PT"
	bench_loded_stop
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$LOCAL" "$DATA" "$MNT_PT" "$MNT_LODE"
gcc -O2 -I"$EXAMPLES" -o "$PT" "$EXAMPLES/passthrough_ll.c" \
	$(pkg-config --cflags --libs fuse3)

ADDR=127.0.0.1:$(bench_free_port)
export LODE_ADDR=$ADDR UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
echo "run.sh: loded on $ADDR ($TARGETS RAM targets), output in $OUT" >&2
# The first start writes the admin's credentials; every client connects with them.
export LODE_CREDENTIALS=$OUT/admin.credentials
rm -f "$LODE_CREDENTIALS"
bench_loded_start "$BIN/loded" "$BIN/lode" "$ADDR" "$OUT/loded.log" --path "$DATA" --ram \
	--capacity 4G --targets "$TARGETS" --admin-cred "$LODE_CREDENTIALS" || exit 1
"$BIN/lode" cont create fsbench
"$BIN/lode-fuse" --transport "$TRANSPORT" fsbench "$MNT_LODE"
"$PT" "$MNT_PT" -o source="$LOCAL"
mountpoint -q "$MNT_LODE" && mountpoint -q "$MNT_PT" || {
	echo "run.sh: a mount failed" >&2
	exit 1
}

# fio: name | arguments. --thread keeps fio's jobs in one process, which is
# what the preload library needs to share one liblodefs instance.
FIO_CASES=(
	"seqread-1m|--rw=read --bs=1m --ioengine=psync --numjobs=1"
	"seqwrite-1m|--rw=write --bs=1m --ioengine=psync --numjobs=1"
	"randread-4k-j16|--rw=randread --bs=4k --ioengine=psync --numjobs=16"
	"randread-4k-j32|--rw=randread --bs=4k --ioengine=psync --numjobs=32"
	"randwrite-4k-j16|--rw=randwrite --bs=4k --ioengine=psync --numjobs=16"
	"randwrite-4k-j32|--rw=randwrite --bs=4k --ioengine=psync --numjobs=32"
	"randread-4k-uring-qd16|--rw=randread --bs=4k --ioengine=io_uring --iodepth=16 --numjobs=1"
	"randread-4k-uring-qd32|--rw=randread --bs=4k --ioengine=io_uring --iodepth=32 --numjobs=1"
	"randwrite-4k-uring-qd16|--rw=randwrite --bs=4k --ioengine=io_uring --iodepth=16 --numjobs=1"
	"randwrite-4k-uring-qd32|--rw=randwrite --bs=4k --ioengine=io_uring --iodepth=32 --numjobs=1"
)
# lode bench through liblodefs: name | arguments (one file per job).
LIB_CASES=(
	"seqread-1m|--rw read --bs 1m --numjobs 1"
	"seqwrite-1m|--rw write --bs 1m --numjobs 1"
	"randread-4k-j16|--rw randread --bs 4k --numjobs 16"
	"randread-4k-j32|--rw randread --bs 4k --numjobs 32"
	"randwrite-4k-j16|--rw randwrite --bs 4k --numjobs 16"
	"randwrite-4k-j32|--rw randwrite --bs 4k --numjobs 32"
)

run_fio() { # where name args rep
	local where=$1 name=$2 args=$3 rep=$4 dir pre=()
	case $where in
	local) dir=$LOCAL ;;
	pt) dir=$MNT_PT ;;
	fuse) dir=$MNT_LODE ;;
	preload)
		dir=$MNT_LODE
		pre=(env LD_PRELOAD="$PRELOAD" LODE_PRELOAD_DEBUG=1 LODEFS_CHANNELS=32)
		;;
	esac
	# One data file per case, shared by its jobs; laid out once, unmeasured.
	# shellcheck disable=SC2086 # args is a list of words by design
	"${pre[@]}" fio --name="$name" --filename="$dir/fio-${name%%-j*}.dat" --size="${SIZE_MB}m" \
		--direct=1 --thread --group_reporting --time_based --runtime="$RUNTIME" --ramp_time="$RAMP" \
		--output-format=json $args >"$OUT/$where.$name.r$rep.json" 2>"$OUT/$where.$name.r$rep.err" || {
		echo "run.sh: fio $name on $where failed:" >&2
		cat "$OUT/$where.$name.r$rep.err" >&2
		exit 1
	}
	[ "$where" != preload ] || preload_served "$OUT/$where.$name.r$rep.err"
}

# preload_served ERRFILE: the preload library's exit summary (LODE_PRELOAD_DEBUG)
# must count reads or writes it served, or the run measured the FUSE path.
preload_served() {
	grep -Eq 'lode-preload(\[[0-9]+\])?: stats opens=[1-9][0-9]* .*(reads|writes)=[1-9]' "$1" || {
		echo "run.sh: the preload library served no I/O ($1):" >&2
		grep 'lode-preload' "$1" | tail -5 >&2
		exit 1
	}
}

run_lib() { # where(lib|plb) name args rep
	local where=$1 name=$2 args=$3 rep=$4 jobs api=(--api fs --cont fsbench) pre=()
	jobs=${args##*--numjobs }
	if [ "$where" = plb ]; then
		mkdir -p "$MNT_LODE/plb-$name"
		api=(--api posix --dir "$MNT_LODE/plb-$name")
		pre=(env LD_PRELOAD="$PRELOAD" LODE_PRELOAD_DEBUG=1)
	fi
	# shellcheck disable=SC2086 # args is a list of words by design
	"${pre[@]}" env LODEFS_CHANNELS=32 "$BIN/lode" bench "${api[@]}" --transport "$TRANSPORT" \
		$args --size "$((SIZE_MB / jobs))m" --runtime "$RUNTIME" --ramp "$RAMP" --json \
		>"$OUT/$where.$name.r$rep.json" 2>"$OUT/$where.$name.r$rep.err" || {
		echo "run.sh: lode bench $name on $where failed:" >&2
		cat "$OUT/$where.$name.r$rep.err" >&2
		exit 1
	}
	[ "$where" != plb ] || preload_served "$OUT/$where.$name.r$rep.err"
}

# Every column of a case runs back to back, so that a ratio compares runs
# seconds apart; even repeats run them in reverse, so that a column's place
# in the sequence (the first run after another kind ran slower in A/B
# tests, 2026-11-28) does not favour one column in the medians.
for rep in $(seq 1 "$REPEAT"); do
	for c in "${FIO_CASES[@]}"; do
		name=${c%%|*}
		args=${c#*|}
		[[ $name =~ $CASES ]] || continue
		cols=(local pt fuse)
		# io_uring submissions go to the kernel: the preload library cannot take them.
		[[ $name == *uring* ]] || cols+=(preload)
		libargs=
		for l in "${LIB_CASES[@]}"; do
			[ "${l%%|*}" = "$name" ] && libargs=${l#*|} && cols+=(lib plb)
		done
		if [ $((rep % 2)) = 0 ]; then
			for ((i = 0, j = ${#cols[@]} - 1; i < j; i++, j--)); do
				t=${cols[i]} cols[i]=${cols[j]} cols[j]=$t
			done
		fi
		for where in "${cols[@]}"; do
			if [ "$where" = lib ] || [ "$where" = plb ]; then
				echo "run.sh: run $rep/$REPEAT: lode bench $name on $where" >&2
				run_lib "$where" "$name" "$libargs" "$rep"
			else
				echo "run.sh: run $rep/$REPEAT: fio $name on $where" >&2
				run_fio "$where" "$name" "$args" "$rep"
			fi
		done
	done
	[[ md =~ $CASES ]] || continue
	for threads in 1 4; do
		for dirs in 1 "$threads"; do
			[ "$threads" = 1 ] && [ "$dirs" != 1 ] && continue
			md="md-t$threads-d$dirs"
			[ "$threads" != 1 ] && [ "$dirs" != 1 ] && md="md-t$threads-dmany"
			echo "run.sh: run $rep/$REPEAT: $md" >&2
			"$BIN/lode-mdbench" --api lib --container fsbench --files "$MDFILES" \
				--threads "$threads" --dirs "$dirs" --json >"$OUT/lib.$md.r$rep.json"
			for where in local pt fuse; do
				case $where in
				local) dir=$LOCAL ;;
				pt) dir=$MNT_PT ;;
				fuse) dir=$MNT_LODE ;;
				esac
				"$BIN/lode-mdbench" --api posix --dir "$dir" --files "$MDFILES" \
					--threads "$threads" --dirs "$dirs" --json >"$OUT/$where.$md.r$rep.json"
			done
		done
	done
done

python3 - "$OUT" "$REPEAT" <<'PY' | tee "$OUT/summary.md"
import glob, json, os, statistics, sys

out, repeat = sys.argv[1], int(sys.argv[2])
WHERE = ["local", "pt", "fuse", "preload", "lib", "plb"]
LABEL = {"local": "tmpfs", "pt": "passthrough_ll", "fuse": "lode-fuse",
         "preload": "preload", "lib": "liblodefs", "plb": "preload (lode bench)"}


def runs(where, name):
    vals = []
    for i in range(1, repeat + 1):
        p = os.path.join(out, "%s.%s.r%d.json" % (where, name, i))
        if not os.path.exists(p):
            return None
        with open(p) as f:
            j = json.load(f)
        vals.append(j)
    return vals


def io_value(where, name):
    """(bytes/s, IOPS) medians and IOPS spread, from fio or lode bench JSON."""
    rs = runs(where, name)
    if rs is None:
        return None
    bw, iops = [], []
    for j in rs:
        if "jobs" in j:  # fio
            job = j["jobs"][0]
            d = job["read"] if job["read"]["io_bytes"] else job["write"]
            bw.append(d["bw_bytes"])
            iops.append(d["iops"])
        else:  # lode bench
            bw.append(j["result"]["bw_mib_s"] * 1048576)
            iops.append(j["result"]["iops"])
    return statistics.median(bw), statistics.median(iops), min(iops), max(iops)


def fmt(v, big):
    if v is None:
        return "—"
    bw, iops, lo, hi = v
    if big:
        return "%.2f GiB/s" % (bw / 2**30)
    return "%.1fK (%.1f–%.1fK)" % (iops / 1e3, lo / 1e3, hi / 1e3)


names = sorted({os.path.basename(p).split(".")[1] for p in glob.glob(os.path.join(out, "*.r1.json"))
                if not os.path.basename(p).split(".")[1].startswith("md-")})
print("### Data path (fio --direct=1; lode bench --api fs for liblodefs, --api posix\n"
      "under the preload library for the last column), medians of %d runs\n" % repeat)
print("| workload | " + " | ".join(LABEL[w] for w in WHERE) + " |")
print("|---|" + "---|" * len(WHERE))
vals = {}
for n in names:
    big = n.startswith("seq")
    row = []
    for w in WHERE:
        v = io_value(w, n)
        vals[(w, n)] = v
        row.append(fmt(v, big))
    print("| %s | %s |" % (n, " | ".join(row)))

print("\n### Targets (4 KiB random reads, psync, 16 and 32 threads)\n")
print("Each ratio is taken within one repeat (the two runs back to back, in either order),")
print("then the median over repeats, with min–max.\n")
print("| ratio | j16 | j32 | target |")
print("|---|---|---|---|")
def iops_runs(where, name):
    rs = runs(where, name)
    if rs is None:
        return None
    return [j["jobs"][0]["read"]["iops"] if "jobs" in j else j["result"]["iops"] for j in rs]
def ratio(a, b, n):
    ra, rb = iops_runs(a, n), iops_runs(b, n)
    if not ra or not rb or not all(rb):
        return None
    rs = [x / y for x, y in zip(ra, rb)]
    return statistics.median(rs), min(rs), max(rs)
for a, b, t, text in [("fuse", "pt", 0.8, "lode-fuse / passthrough_ll"),
                      ("preload", "lib", 0.9, "preload / liblodefs"),
                      ("preload", "fuse", 3.0, "preload / lode-fuse"),
                      ("plb", "lib", 0.9, "preload (lode bench) / liblodefs")]:
    cells = []
    for n in ["randread-4k-j16", "randread-4k-j32"]:
        r = ratio(a, b, n)
        cells.append("—" if r is None else "%.2f (%.2f–%.2f)%s" % (r[0], r[1], r[2], "" if r[0] >= t else " (missed)"))
    print("| %s | %s | %s | >= %.2f |" % (text, cells[0], cells[1], t))

print("\n### Metadata (lode-mdbench), operations per second, medians (min–max)\n")
print("| case | where | create | stat | unlink |")
print("|---|---|---|---|---|")
mds = sorted({os.path.basename(p).split(".")[1] for p in glob.glob(os.path.join(out, "*.md-*.r1.json"))})
for m in mds:
    for w in ["local", "pt", "fuse", "lib"]:
        rs = runs(w, m)
        if not rs:
            continue
        cells = []
        for ph in ["create", "stat", "unlink"]:
            xs = [r[ph + "_per_s"] for r in rs]
            cells.append("%.0f (%.0f–%.0f)" % (statistics.median(xs), min(xs), max(xs)))
        print("| %s | %s | %s |" % (m, LABEL[w], " | ".join(cells)))
PY
