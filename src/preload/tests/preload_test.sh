#!/usr/bin/env bash
# liblode-preload.so end to end: a real loded, a container mounted with
# lode-fuse, and programs run with the preload -
#   - preload_test main: every intercepted call, threads, fork, stdio, with
#     the preload's counters as proof that bytes went through liblodefs;
#   - bytes written through the preload read back through FUSE by programs
#     without it, and bytes written through FUSE read back through it;
#   - unmodified tools (dd, cat, sqlite3 in WAL mode) with the preload, and
#     dd/cat with it disabled;
#   - preload_test dead: the server killed under an open file, then
#     restarted: the descriptor reads on through the preload.
#
# usage: preload_test.sh LODED LODE LODE_FUSE PRELOAD_SO TEST_BIN [SANITIZER_RUNTIME]
# SANITIZER_RUNTIME: the shared ASan runtime of a sanitizer build, which
# must be loaded before the instrumented preload (LD_PRELOAD=RUNTIME:PRELOAD).
# Exits 77 (skipped) without lode-fuse or a usable /dev/fuse.
set -u
loded=$1
lode=$2
lfuse=$3
preload=$4
tbin=$5
asan_rt=${6:-}
export UCX_NET_DEVICES=lo
# A dead server must fail requests within seconds, not the default 10 s.
export LODE_TIMEOUT_MS=3000

if [ -z "$lfuse" ] || [ ! -x "$lfuse" ]; then
	echo "SKIP: no lode-fuse in this build"
	exit 77
fi
if [ ! -c /dev/fuse ] || [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ]; then
	echo "SKIP: /dev/fuse is missing or not usable here"
	exit 77
fi
if ! command -v fusermount3 >/dev/null; then
	echo "SKIP: fusermount3 is not installed"
	exit 77
fi
pre=$preload
if [ -n "$asan_rt" ]; then
	if [ ! -f "$asan_rt" ]; then
		echo "FAIL the sanitizer runtime $asan_rt does not exist"
		exit 1
	fi
	pre=$asan_rt:$preload
fi

mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-preload-test.XXXXXX")
dir=$(realpath "$dir")
mnt=$dir/mnt
scratch=$dir/scratch
mkdir "$mnt" "$scratch"
pid= # loded

mounted() { # the fstype of the mount at $mnt, if any
	awk -v m="$mnt" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { print $(i + 1); exit } }' \
		/proc/self/mountinfo
}
cleanup() {
	if [ -n "$(mounted)" ]; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
	fi
	local daemon
	daemon=$(cat "$dir/fuse.pid" 2>/dev/null) # (gone once the daemon saw the unmount)
	if [ -n "$daemon" ]; then
		kill "$daemon" 2>/dev/null
		wait_for 5 gone "$daemon"
	fi
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait_for 5 gone "$pid"
	fi
	# never through a mount that is still there
	[ -z "$(mounted)" ] && rm -rf --one-file-system "$dir"
}
trap cleanup EXIT

nbad=0
bad() {
	echo "FAIL $*"
	nbad=$((nbad + 1))
}
# gone PID: exited (a zombie waiting for its reaper, pid 1, counts: that can take seconds here)
gone() {
	local st
	st=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
	[ -z "$st" ] || [ "$st" = Z ]
}
wait_for() { # wait_for SECONDS COMMAND...: true as soon as COMMAND is
	local n=$(($1 * 10))
	shift
	while [ "$n" -gt 0 ]; do
		"$@" && return 0
		sleep 0.1
		n=$((n - 1))
	done
	return 1
}

# Programs of this test run with the preload; tools that are not ours also
# run without leak checking (their own leaks are not this test's business).
with_preload() { env LD_PRELOAD="$pre" "$@"; }
tool() { env LD_PRELOAD="$pre" ASAN_OPTIONS=detect_leaks=0 "$@"; }
no_preload() { env -u LD_PRELOAD "$@"; }

# ---- a loded of our own, a container, a mount ----
. "$(dirname "${BASH_SOURCE[0]}")/../../../tests/lib/loded.sh"
loded_start --targets 2 --transport tcp # disk: the data outlives the kill below
disown "$pid" # killed on purpose below: no "Killed" notice from bash
"$lode" --addr "$addr" cont create pl >/dev/null || { echo "FAIL cont create pl"; exit 1; }
if ! "$lfuse" --addr "$addr" --transport tcp --pidfile "$dir/fuse.pid" --log "$dir/fuse.log" \
	pl "$mnt"; then
	echo "FAIL lode-fuse could not mount; its log:"
	cat "$dir/fuse.log" 2>/dev/null
	exit 1
fi
[ "$(mounted)" = fuse.lode ] || { echo "FAIL mountinfo shows '$(mounted)' at $mnt"; exit 1; }

# ---- every intercepted call, from the inside ----
with_preload "$tbin" main "$mnt" "$scratch" || bad "preload_test main"

# ---- bytes written through the preload, read through FUSE without it ----
no_preload cmp "$mnt/from-preload" "$scratch/from-preload.expected" ||
	bad "from-preload read through FUSE differs"

# ---- bytes written through FUSE, read through the preload ----
size=$((2 << 20 | 77))
head -c "$size" /dev/urandom >"$scratch/fuse-src"
no_preload cp "$scratch/fuse-src" "$mnt/from-fuse" || bad "cp through FUSE"
with_preload "$tbin" fuse-read "$mnt" "$scratch" "$mnt/from-fuse" "$scratch/fuse-src" ||
	bad "preload_test fuse-read"

# ---- unmodified tools; the debug summary says what liblodefs served ----
LODE_PRELOAD_DEBUG=1 tool dd if="$scratch/fuse-src" of="$mnt/dd-out" bs=64k status=none \
	2>"$dir/dd.err" || bad "dd into the mount with the preload"
grep -q "stats opens=1 .* bytes_written=$size " "$dir/dd.err" ||
	bad "dd's writes were not served by liblodefs: $(grep stats "$dir/dd.err")"
no_preload cmp "$scratch/fuse-src" "$mnt/dd-out" || bad "dd-out read through FUSE differs"
# (through a pipe: cat would hand a file-to-file copy to the kernel)
LODE_PRELOAD_DEBUG=1 tool cat "$mnt/dd-out" 2>"$dir/cat.err" | cmp -s - "$scratch/fuse-src" ||
	bad "cat with the preload read different bytes"
grep -q "stats opens=1 .* bytes_read=$size " "$dir/cat.err" ||
	bad "cat's reads were not served by liblodefs: $(grep stats "$dir/cat.err")"
LODE_PRELOAD_DISABLE=1 LODE_PRELOAD_DEBUG=1 tool cat "$mnt/dd-out" 2>"$dir/off.err" |
	cmp -s - "$scratch/fuse-src" || bad "cat with the preload disabled read different bytes"
grep -q "interception off" "$dir/off.err" && ! grep -q "stats" "$dir/off.err" ||
	bad "LODE_PRELOAD_DISABLE=1 did not turn interception off: $(cat "$dir/off.err")"
# SQLite in WAL mode: pread/pwrite/fstat/ftruncate/fsync on the database,
# and a WAL index that is written, then mapped (the kernel must know its size)
if command -v sqlite3 >/dev/null; then
	LODE_PRELOAD_DEBUG=1 tool sqlite3 "$mnt/db" "pragma journal_mode=wal; create table t(a, b);
		insert into t values (1, 'x'); insert into t select a + 1, b || 'y' from t;
		insert into t select a + 2, b from t; select count(*), sum(a) from t;" \
		>"$dir/sql.out" 2>"$dir/sql.err"
	[ "$(tr '\n' ' ' <"$dir/sql.out")" = "wal 4|10 " ] ||
		bad "sqlite3 with the preload: '$(cat "$dir/sql.out")' $(grep -v lode-preload "$dir/sql.err")"
	grep -q "stats opens=[1-9].* writes=[1-9]" "$dir/sql.err" ||
		bad "sqlite3's I/O was not served by liblodefs: $(grep stats "$dir/sql.err")"
	[ "$(no_preload sqlite3 "$mnt/db" "select count(*) from t; pragma integrity_check;" |
		tr '\n' ' ')" = "4 ok " ] || bad "the database read through FUSE is not intact"
fi
daemon=$(cat "$dir/fuse.pid" 2>/dev/null)
kill -0 "$daemon" 2>/dev/null || bad "lode-fuse died during the test"

# ---- the server dies under an open file, and comes back ----
if [ -n "$pid" ]; then
	env LD_PRELOAD="$pre" timeout 150 "$tbin" dead "$mnt" "$scratch" "$pid" back &
	tpid=$!
	wait_for 60 test -e "$scratch/dead-waiting" || bad "preload_test dead did not get to the restart"
	wait_for 5 gone "$pid" || bad "loded $pid still runs after preload_test dead killed it"
	pid=
	if loded_restart; then
		disown "$pid"
	else
		bad "loded did not restart"
	fi
	touch "$scratch/dead-back"
	wait "$tpid" || bad "preload_test dead"
fi

if [ "$nbad" -ne 0 ]; then
	echo "$nbad checks failed; the end of lode-fuse's log:"
	tail -20 "$dir/fuse.log" 2>/dev/null | sed 's/^/    /'
	exit 1
fi
echo "preload_test.sh: all passed"
