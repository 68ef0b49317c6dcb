#!/usr/bin/env bash
#
# shm_session_test: loded lets go of what a departed shared-memory client
# held. loded answers a client's worker by attaching the worker's receive
# FIFO and buffers, SysV segments the client made; they must go when the
# client does, after a clean exit (its sessions end) and after kill -9 (the
# peer check of UCX's shared-memory transports). loded used to keep them
# for good, 4 per `lode` command, until the system's 4096 segments ran out
# and every program's shmget failed (decision 0004).
#
# UCX checks its peers every UCX_KEEPALIVE_INTERVAL (20 s by default); the
# test sets 1 s so that it takes seconds.
#
# usage: shm_session_test.sh LODED LODE
set -u
loded=$1
lode=$2
export UCX_NET_DEVICES=lo UCX_KEEPALIVE_INTERVAL=1s
mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/shm-session-test.XXXXXX")
pid=
bpid=
cleanup() {
	[ -n "$bpid" ] && kill -9 "$bpid" 2>/dev/null
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"
loded_start --ram --targets 2
L() { "$lode" --addr "$addr" --transport shm "$@"; }

# The SysV segments loded has attached now.
held() { grep -c SYSV "/proc/$pid/maps"; }
# gone_to N WHAT: wait up to 20 s for loded to hold at most N again.
gone_to() {
	local i
	for i in $(seq 200); do
		[ "$(held)" -le "$1" ] && break
		sleep 0.1
	done
	if [ "$(held)" -le "$1" ]; then
		echo "ok   $2: loded holds $(held) segments again (at most $1)"
		pass=$((pass + 1))
	else
		failed "$2: loded still holds $(held) segments, more than $1"
	fi
}

check cont-create 0 L cont create c
head -c 100000 /dev/urandom >"$dir/in"
check put 0 L obj put c o "$dir/in"
# The clients so far (loded_start's, these) go first: the count to come back
# to is loded's own, once it holds still for 3 s (three peer checks).
prev=-1
for _ in $(seq 60); do
	now=$(held)
	[ "$now" = "$prev" ] && break
	prev=$now
	sleep 3
done
base=$(held)

# client_run WHAT KILL: a writing client over shm; its segments must be seen
# in loded while it runs, and be let go after it ends (KILL 0: it exits by
# itself after 3 s, saying goodbye; 1: kill -9 while it writes).
client_run() {
	local what=$1 kill=$2 rc
	# (the binary itself in the background, not a shell around it, for kill)
	"$lode" --addr "$addr" --transport shm bench --cont c --rw write --bs 4k --size 1M \
		--runtime "$([ "$kill" = 1 ] && echo 60 || echo 3)" --ceiling 0 --progress 1 \
		>"$dir/bench.out" 2>"$dir/bench.err" &
	bpid=$!
	bench_started "$what" "$dir/bench.err" "$bpid" || return
	if [ "$(held)" -gt "$base" ]; then
		echo "ok   $what: its segments seen in loded: $base -> $(held)"
		pass=$((pass + 1))
	else
		failed "$what: loded holds none of its segments ($(held), $base before): not measured"
	fi
	[ "$kill" = 1 ] && kill -9 "$bpid"
	wait "$bpid"
	rc=$?
	bpid=
	if [ "$kill" = 1 ] || [ "$rc" = 0 ]; then
		gone_to "$base" "after $what"
	else
		failed "$what: exit $rc: $(cat "$dir/bench.err")"
	fi
}
client_run "a client that exits" 0
# A client killed mid-stream says no goodbye: UCX's peer check ends its sessions.
client_run "a client killed with kill -9" 1

# loded kept serving, and what was written reads back.
check get 0 L obj get c o "$dir/out"
cmp -s "$dir/in" "$dir/out" || failed "o read back differs"
checks_done
