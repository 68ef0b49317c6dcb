#!/usr/bin/env bash
# liblode places data over every engine of the pool map (src/client/place.c).
# Three engines on loopback (one hosts the management service, two join);
# place_client (place_client.c) drives liblode. Checks that S1, S2, SX,
# RP_2 and RP_3 objects read back byte for byte; that S1 objects spread over
# every target of every engine; that an RP_2 write stream survives kill -9
# of an engine with no error and loses no acknowledged write, and reads back
# degraded; that S1 objects on the dead engine fail fast with -EHOSTDOWN;
# that a client connected while an engine was DOWN connects to it once it
# is reintegrated, and writes RP_3 through it; and that a client writing
# RP_2 while an engine is excluded (a new map:
# its requests are refused as stale and placed again) goes on and reads
# everything back.
#
# usage: place_test.sh LODED LODE PLACE_CLIENT
set -u
loded=$1
lode=$2
client=$3
# A replicated write that lost a member waits, up to the client's timeout,
# for the map to mark that engine DOWN: the timeout must outlast the grace.
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup place-test

. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

cluster_host --ram --transport tcp --targets 2 --heartbeat-ms 200 --grace-ms 3000

join() { loded_join "$@"; }

join b
b_pid=$jpid
pids+=("$b_pid")
join c --targets 3
c_pid=$jpid
pids+=("$c_pid")
wait_state "engine b joins UP" 1 UP 5
wait_state "engine c joins UP" 2 UP 5

for cls in S1 S2 SX RP_2 RP_3; do
	A cont create "c$cls" --class "$cls" >/dev/null || failed "cont create --class $cls"
done
check "a container of class EC_2P1 (EC on the I/O path: ec_cluster_test)" 0 A cont create cec --class EC_2P1
check "every class reads back (container RP_2 for class 0)" 0 "$client" rw "$a_addr" cRP_2 40
cat "$dir/out"
check "a container of class SX" 0 "$client" rw "$a_addr" cSX 10
check "placement spreads over every engine" 0 "$client" spread "$a_addr" cS1 3000
cat "$dir/out"

# ---- kill -9 of an engine during an RP_2 write stream ----
"$client" stream "$a_addr" cRP_2 4 >"$dir/stream.out" 2>&1 &
stream=$!
sleep 1.5
kill -9 "$c_pid"
wait "$c_pid" 2>/dev/null
wait "$stream"
rc=$?
cat "$dir/stream.out"
[ "$rc" -eq 0 ] || failed "RP_2 stream across kill -9 exited $rc"
n=$(sed -n 's/^count //p' "$dir/stream.out")
wait_state "killed c is DOWN" 2 DOWN 10
check "RP_2 reads back degraded from a new connection" 0 "$client" verify "$a_addr" cRP_2 "${n:-1}"
check "S1 on the dead engine fails fast with -EHOSTDOWN" 0 "$client" s1dead "$a_addr" cS1 40
cat "$dir/out"

# ---- a client connected while engine 2 is DOWN reaches it once it is back ----
# The renewer connects engines the map has UP that the connection cannot
# reach; without it every RP_3 write (a member on each engine) would wait
# for a map saying engine 2 is DOWN, and fail.
"$client" late "$a_addr" cRP_3 30 "$dir/back" >"$dir/late.out" 2>&1 &
late=$!
for _ in $(seq 100); do
	grep -q connected "$dir/late.out" && break
	kill -0 "$late" 2>/dev/null || break
	sleep 0.1
done
check "a client connects while engine 2 is DOWN" 0 grep -q connected "$dir/late.out"

# ---- a stale map: an engine excluded while a client writes RP_2 ----
# The dead engine comes back (DOWN, with nothing) and is reintegrated, so
# that every RP_2 group keeps a member when engine 1 is excluded.
join c --targets 3
c_pid=$jpid
pids+=("$c_pid")
check "reintegrate engine 2" 0 A system reintegrate 2
touch "$dir/back"
wait "$late"
rc=$?
cat "$dir/late.out"
[ "$rc" -eq 0 ] || failed "the client connected before engine 2 came back exited $rc"
for _ in $(seq 30); do
	A cont create stale --class RP_2 >/dev/null 2>&1 && break
	sleep 0.1
done
"$client" stream "$a_addr" stale 4 >"$dir/stale.out" 2>&1 &
stream=$!
sleep 1.5
check "exclude engine 1 during the stream" 0 A system exclude 1
wait "$stream"
rc=$?
cat "$dir/stale.out"
[ "$rc" -eq 0 ] || failed "RP_2 stream across an exclusion exited $rc"
checks_done
