#!/usr/bin/env bash
# Integration of an engine that joins a pool holding data, and the reclaim
# that makes later moves safe (docs/decisions/0014). Three engines on
# loopback, an RP_2 container with objects. A fourth engine joins while a
# client writes: it enters NEW, the engines copy onto it the members the
# map with it UP places there (and the client writes those to it too), and
# it goes UP. Checks that it does, that the writes went on without an
# error, that everything reads back, that it holds records, and that the
# engines removed what moved off them (their logs count the dkeys).
#
# Then the case the reclaim is for. Every object is overwritten, and the
# new engine is killed: its members go back, by placement, to the very
# targets they left when it joined. Without the reclaim those still hold
# the old bytes, the rebuild's copies land beneath them, and reads return
# the old bytes; the last check fails then.
#
# An EC_2P1 container rides along: its cells move onto the new engine as
# well, are read back after the integration, and again, degraded and then
# rebuilt, after the new engine is killed. Engines have three targets, as
# many as an EC_2P1 stripe has cells: a cell that moves onto the engine
# another cell of its stripe is leaving then lands on another target
# (src/layout/place.c); ec_swap_test has engines of two.
#
# Last, reintegration: the killed engine restarts (it stays OUT) and is
# reintegrated; it joins again as a new engine, is filled the same way,
# and what it holds then carries the data when another engine dies.
#
# usage: integrate_test.sh LODED LODE PLACE_CLIENT EC_CLIENT
set -u
loded=$1
lode=$2
client=$3
ec=$4
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup integrate-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

# d_holds NAME: a check that each of d's targets holds data. Status through
# an engine lists its own targets first: d's are 0 to 2. (Before its
# integration they hold one record each, the root container's.)
d_holds() {
	check "$1: d's status" 0 "$lode" --addr "$d_addr" status
	if awk '$1 <= 2 && $2 ~ /^[0-9]+$/ && $2 > 100 { n++ } END { exit n == 3 ? 0 : 1 }' \
		"$dir/out"; then
		echo "ok   $1"
		pass=$((pass + 1))
	else
		failed "$1: $(cat "$dir/out")"
	fi
}

cluster_of_three 3
check "container of class RP_2" 0 A cont create data --class RP_2
N=400
check "$N objects written" 0 "$client" write "$a_addr" data $N
# Punched before the integration, written again after it: the old places
# keep nothing of them, punches included (else a copy back would land
# beneath the punch, and the key would read as removed). A snapshot taken
# before the punch reads as it was wherever the copies go.
check "container pun of class RP_2" 0 A cont create pun --class RP_2
check "300 objects written to pun" 0 "$client" write "$a_addr" pun 300
check "a snapshot of pun" 0 A cont snap create pun
s1=$(cat "$dir/out")
check "... and key k0 of each removed" 0 "$client" remove "$a_addr" pun 300
check "... so that they do not verify" 1 "$client" verify "$a_addr" pun 300
# Likewise with whole objects punched (the old places fold an object's
# punch into its dkeys there, which are then kept or dropped).
check "container opun of class RP_2" 0 A cont create opun --class RP_2
check "300 objects written to opun" 0 "$client" write "$a_addr" opun 300
check "... and their kv objects punched whole" 0 "$client" opunch "$a_addr" opun 300
check "... so that they do not verify" 1 "$client" verify "$a_addr" opun 300
check "container of class EC_2P1" 0 A cont create c21 --class EC_2P1
check "EC_2P1 writes, punches and reads" 0 "$ec" ops "$a_addr" c21 EC_2P1 7 200

# A client connected now knows three engines; it creates a container only
# once the fourth has joined, been filled and walked its targets for the
# last time (below). The container must reach the fourth all the same:
# nothing would make it there later, and writes of members placed there
# would fail.
"$client" mklate "$a_addr" late 200 "$dir/go-late" >"$dir/late.out" 2>&1 &
late=$!
for _ in $(seq 100); do grep -q connected "$dir/late.out" && break; sleep 0.1; done

# ---- a fourth engine joins a pool with data, while a client writes ----
"$client" stream "$a_addr" data 8 >"$dir/stream.out" 2>&1 &
stream=$!
sleep 1
t0=$(date +%s%N)
loded_join d --targets 3
d_pid=$jpid
d_addr=$jaddr
pids+=("$d_pid")
grep -q "engine 3 is NEW" "$dir/d.log" || failed "d did not join NEW: $(cat "$dir/d.log")"
# A snapshot while d is NEW: d's walk may not have made the container yet,
# and makes the snapshot there itself when it does.
check "a snapshot of opun while d is NEW" 0 A cont snap create opun
wait_state "the new engine is integrated (UP)" 3 UP 60 && {
	t1=$(date +%s%N)
	echo "     NEW to UP in $(((t1 - t0) / 1000000)) ms"
}
wait "$stream"
rc=$?
cat "$dir/stream.out"
[ "$rc" -eq 0 ] || failed "writes during the integration exited $rc"
n2=$(sed -n 's/^count //p' "$dir/stream.out")
n=$N
[ "${n2:-0}" -gt "$n" ] && n=$n2
check "every object reads back after the integration ($n)" 0 "$client" verify "$a_addr" data "$n"
check "the EC_2P1 objects read back after the integration" 0 "$ec" verify "$a_addr" c21 EC_2P1 7 200
check "pun's snapshot reads as it was (moved copies carry it)" 0 \
	env PLACE_EPOCH="$s1" "$client" verify "$a_addr" pun 300
d_holds "the new engine's three targets hold records"
# The old places' reclaim runs once d is UP (the join's found nothing).
for _ in $(seq 100); do
	dropped=$(sed -n 's/.*reclaim of what pool map version [0-9]* places elsewhere: done, \([0-9]*\) dkeys removed.*/\1/p' \
		"$dir/loded.log" "$dir/b.log" "$dir/c.log" | awk '{ s += $1 } END { print s + 0 }')
	[ "$dropped" -gt 0 ] && break
	sleep 0.2
done
grep -h "reclaim of\|rebuild for pool map version [0-9]*: done" "$dir"/*.log | sed 's/^/     /'
if [ "$dropped" -gt 0 ]; then
	echo "ok   the old places removed $dropped dkeys that moved to the new engine"
	pass=$((pass + 1))
else
	failed "no engine says it reclaimed a dkey"
	grep -h "reclaim" "$dir"/*.log
fi
# The client that knew three engines creates its container and writes.
v=$(sed -n 's/.*reclaim of what pool map version \([0-9]*\) places elsewhere: done, [1-9].*/\1/p' \
	"$dir/loded.log" "$dir/b.log" "$dir/c.log" | sort -n | tail -n 1)
walked=0
for _ in $(seq 100); do
	grep -q "reclaim of what pool map version ${v:-x} places elsewhere: done" "$dir/d.log" &&
		walked=1 && break
	sleep 0.2
done
[ "$walked" = 1 ] || failed "d did not walk its targets for map version ${v:-?}"
touch "$dir/go-late"
wait "$late"
rc=$?
cat "$dir/late.out"
[ "$rc" -eq 0 ] && grep -q "^targets 12$" "$dir/late.out" &&
	echo "ok   a container made by a client that did not know d yet is on all 12 targets" &&
	pass=$((pass + 1)) || failed "the late client's container: exit $rc"

# ---- overwrite, then lose the new engine: its members go back ----
export PLACE_GEN=2
check "$n objects overwritten (generation 2)" 0 "$client" write "$a_addr" data "$n"
check "pun's objects written again (generation 2), k0 too" 0 "$client" write "$a_addr" pun 300
check "opun's objects written again (generation 2)" 0 "$client" write "$a_addr" opun 300
kill -9 "$d_pid"
wait "$d_pid" 2>/dev/null
wait_state "killed d is DOWN" 3 DOWN 10
wait_state "rebuilt d is OUT" 3 OUT 60
check "every object reads back as overwritten, not as it was before d joined" 0 \
	"$client" verify "$a_addr" data "$n"
check "pun's objects read back, k0 too, not as removed before d joined" 0 \
	"$client" verify "$a_addr" pun 300
check "opun's objects read back, not as punched before d joined" 0 \
	"$client" verify "$a_addr" opun 300
check "the EC_2P1 objects read back after d's cells were rebuilt" 0 \
	"$ec" verify "$a_addr" c21 EC_2P1 7 200

# ---- d comes back, is reintegrated: as a new engine, filled by moves ----
loded_join d --targets 3
d_pid=$jpid
d_addr=$jaddr
pids+=("$d_pid")
[ "$(grep -c "joined the system as engine 3" "$dir/d.log")" -eq 2 ] ||
	failed "restarted d is not engine 3 again: $(cat "$dir/d.log")"
[ "$(engine_state 3)" = OUT ] && { echo "ok   restarted d stays OUT"; pass=$((pass + 1)); } ||
	failed "restarted d is $(engine_state 3), expected OUT"
check "reintegrate d" 0 A system reintegrate 3
grep -q "joins again as a new engine" "$dir/out" || failed "reintegrate says: $(cat "$dir/out")"
wait_state "d, as engine 4, is integrated" 4 UP 60
[ "$(engine_state 3)" = OUT ] && { echo "ok   engine 3's slot stays OUT"; pass=$((pass + 1)); } ||
	failed "engine 3 is $(engine_state 3), expected OUT"
check "the overwritten objects read back after d came back" 0 "$client" verify "$a_addr" data "$n"
check "the EC_2P1 objects too" 0 "$ec" verify "$a_addr" c21 EC_2P1 7 200
d_holds "d's three targets hold records again"
# What d holds now carries the data: b dies, and everything still reads.
kill -9 "$b_pid"
wait "$b_pid" 2>/dev/null
wait_state "killed b is DOWN" 1 DOWN 10
wait_state "rebuilt b is OUT" 1 OUT 60
check "every object reads back with b gone" 0 "$client" verify "$a_addr" data "$n"
check "pun's snapshot too" 0 env PLACE_GEN=0 PLACE_EPOCH="$s1" "$client" verify "$a_addr" pun 300
check "the EC_2P1 objects too" 0 "$ec" verify "$a_addr" c21 EC_2P1 7 200
checks_done
