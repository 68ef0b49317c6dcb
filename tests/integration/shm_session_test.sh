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
# The clients of loded_start and of cont create go first: the count to
# come back to is loded's own.
gone_to 1000 "settled"
sleep 2
base=$(held)
head -c 100000 /dev/urandom >"$dir/in"
for i in 1 2 3 4 5 6 7 8; do
	check "put $i" 0 L obj put c "o$i" "$dir/in"
done
after=$(held)
# The count must see each client's segments, or its coming back proves nothing.
if [ "$after" -ge $((base + 8)) ]; then
	echo "ok   eight clients' segments seen: $base -> $after"
	pass=$((pass + 1))
else
	failed "eight clients left $after segments held, against $base before: not measured"
fi
gone_to "$base" "after eight clients exited"

# A client killed mid-stream says no goodbye: UCX's peer check ends its sessions.
# (the binary itself in the background, not a shell around it, for kill)
"$lode" --addr "$addr" --transport shm bench --cont c --rw write --bs 64k --size 8M --runtime 60 --ceiling 0 --numjobs 2 \
	--progress 1 >"$dir/bench.out" 2>"$dir/bench.err" &
bpid=$!
bench_started "the killed client" "$dir/bench.err" "$bpid"
sleep 0.5
if [ "$(held)" -gt "$base" ]; then
	echo "ok   the running client's segments seen: $(held)"
	pass=$((pass + 1))
else
	failed "the running client holds nothing in loded: $(held), $base before"
fi
kill -9 "$bpid"
wait "$bpid" 2>/dev/null
bpid=
gone_to "$base" "after kill -9 of a client"

# loded kept serving, and what was written reads back.
check get 0 L obj get c o5 "$dir/out5"
cmp -s "$dir/in" "$dir/out5" || failed "o5 read back differs"
checks_done
