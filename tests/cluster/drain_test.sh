#!/usr/bin/env bash
# Drain: an operator removes a healthy engine (`lode system drain ID`).
# Four engines on loopback; S1, RP_2 and EC_2P1 containers. ec_client
# (ec_client.c) writes byte arrays of each class against a model; then,
# while a client keeps writing, engine 3 is drained: its data is copied to
# where the map will place it without it, reads go on where the data is
# meanwhile, writes go to both places, and it goes OUT. Checks that the
# drain ends (DRAIN, then OUT, the engines' logs say done); that the writes
# made meanwhile went on without an error; that everything reads back, S1
# included (one copy: what the drained engine held was moved, not rebuilt
# from redundancy); and that it all still reads back once the drained
# engine's process is gone.
#
# usage: drain_test.sh LODED LODE EC_CLIENT
set -u
loded=$1
lode=$2
client=$3
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup drain-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

cluster_host --ram --transport tcp --targets 2 --heartbeat-ms 200 --grace-ms 3000
C() { check "$1" 0 "$client" "${@:2}"; cat "$dir/out"; }

declare -A epid
for e in b c d; do
	loded_join "$e" --targets 2
	epid[$e]=$jpid
	pids+=("$jpid")
done
for i in 1 2 3; do wait_state "engine $i joins UP" "$i" UP 5; done
for cls in S1 RP_2 EC_2P1; do
	check "container of class $cls" 0 A cont create "c$cls" --class "$cls"
done
C "S1 objects written" ops "$a_addr" cS1 S1 1 200
C "RP_2 objects written" ops "$a_addr" cRP_2 RP_2 2 200
C "EC_2P1 objects written" ops "$a_addr" cEC_2P1 EC_2P1 3 200

# ---- drain engine d (3) while a client writes ----
"$client" stream "$a_addr" cRP_2 RP_2 6 >"$dir/stream.out" 2>&1 &
stream=$!
sleep 1
check "drain engine 3" 0 A system drain 3
wait_state "engine 3 goes OUT once drained" 3 OUT 60
wait "$stream"
rc=$?
cat "$dir/stream.out"
[ "$rc" -eq 0 ] || failed "the RP_2 stream across the drain exited $rc"
n=$(sed -n 's/^count //p' "$dir/stream.out")
for log in loded.log b.log c.log d.log; do
	grep -q "rebuild for pool map version [0-9]*: done" "$dir/$log" ||
		failed "$log says no rebuild (drain) was done"
done
C "S1 reads back after the drain" verify "$a_addr" cS1 S1 1 200
C "RP_2 reads back after the drain" verify "$a_addr" cRP_2 RP_2 2 200
C "EC_2P1 reads back after the drain" verify "$a_addr" cEC_2P1 EC_2P1 3 200
C "the stream's objects read back" check "$a_addr" cRP_2 RP_2 "${n:-1}"

# ---- nothing depends on the drained engine any more ----
kill -9 "${epid[d]}"
wait "${epid[d]}" 2>/dev/null
C "S1 reads back with the drained engine gone" verify "$a_addr" cS1 S1 1 200
C "EC_2P1 reads back with the drained engine gone" verify "$a_addr" cEC_2P1 EC_2P1 3 200
C "the stream's objects read back with it gone" check "$a_addr" cRP_2 RP_2 "${n:-1}"
checks_done
