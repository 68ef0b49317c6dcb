#!/usr/bin/env bash
# Erasure-coded cells that swap places (docs/decisions/0017). Three engines
# of two targets each hold EC_2P1 objects: a stripe has three cells, more
# than an engine has targets. A fourth engine joins: jump hashing moves a
# member onto it, and a later member of the same group, whose first draw
# the moved member had taken, takes that member's old engine, and with
# two targets per engine, for some groups its old target too. Each member
# stores its cells as an object of its own there, so the two do not meet:
# the integration ends (the new engine goes UP) and every object reads
# back; the reclaim then removes the cells the leaving member left
# behind. The new engine is killed, its cells are rebuilt elsewhere, and
# everything still reads back.
#
# usage: ec_swap_test.sh LODED LODE EC_CLIENT
set -u
loded=$1
lode=$2
ec=$3
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup ec-swap-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

N=300
cluster_of_three 2
check "container of class EC_2P1" 0 A cont create c21 --class EC_2P1
check "$N EC_2P1 writes, punches and reads" 0 "$ec" ops "$a_addr" c21 EC_2P1 11 $N
# Many objects: some of their groups swap when the fourth engine joins.
check "EC_2P1 objects streamed for 4 s" 0 "$ec" stream "$a_addr" c21 EC_2P1 4
n=$(sed -n 's/^count //p' "$dir/out")
[ "${n:-0}" -gt 100 ] || failed "the stream wrote ${n:-no} objects"

# ---- a fourth engine of two targets joins ----
t0=$(date +%s%N)
loded_join d --targets 2
d_pid=$jpid
pids+=("$d_pid")
wait_state "the new engine is integrated (UP)" 3 UP 90 &&
	echo "     NEW to UP in $((($(date +%s%N) - t0) / 1000000)) ms"
# The case this test is for happened: some member went where another
# member of its group is now.
beside=$(sed -n 's/.*: \([0-9]*\) erasure-coded members went where another member.*/\1/p' \
	"$dir"/*.log | awk '{ s += $1 } END { print s + 0 }')
if [ "$beside" -gt 0 ]; then
	echo "ok   $beside members moved beside another member of their group"
	pass=$((pass + 1))
else
	failed "no member moved beside another member of its group: the test proves nothing"
fi
check "every object reads back after the integration" 0 "$ec" verify "$a_addr" c21 EC_2P1 11 $N
check "objects of the container's class listed by the caller's ids" 0 \
	"$ec" olist "$a_addr" c21 EC_2P1 20
check "the $n streamed objects too" 0 "$ec" check "$a_addr" c21 EC_2P1 "$n"
for _ in $(seq 100); do
	grep -q "reclaim of what pool map version [0-9]* places elsewhere: done, [1-9]" \
		"$dir/loded.log" "$dir/b.log" "$dir/c.log" && break
	sleep 0.2
done
grep -h "reclaim of\|rebuild for pool map version [0-9]*: done" "$dir"/*.log | sed 's/^/     /'
grep -q "reclaim of what pool map version [0-9]* places elsewhere: done, [1-9]" \
	"$dir/loded.log" "$dir/b.log" "$dir/c.log" &&
	{ echo "ok   the old places removed the cells that moved"; pass=$((pass + 1)); } ||
	failed "no engine says it reclaimed a dkey"

# ---- the new engine dies: its cells are rebuilt from the others ----
kill -9 "$d_pid"
wait "$d_pid" 2>/dev/null
wait_state "killed d is DOWN" 3 DOWN 10
check "every object reads back degraded" 0 "$ec" verify "$a_addr" c21 EC_2P1 11 $N
check "the streamed ones too" 0 "$ec" check "$a_addr" c21 EC_2P1 "$n"
wait_state "rebuilt d is OUT" 3 OUT 90
check "every object reads back after the rebuild" 0 "$ec" verify "$a_addr" c21 EC_2P1 11 $N
check "the streamed ones too" 0 "$ec" check "$a_addr" c21 EC_2P1 "$n"
checks_done
