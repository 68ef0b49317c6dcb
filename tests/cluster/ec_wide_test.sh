#!/usr/bin/env bash
# EC_8P2 (src/client/ec_io.c) on ten engines, the fewest it places on: a
# group is 8 data and 2 parity cells, each on its own engine. ec_client
# (ec_client.c) checks random writes, punches, reads and sizes against a
# model; then two engines are killed with -9 (the class's tolerance), and
# everything reads back degraded, and writes, partial ones included, go
# on and read back. With eight engines left no group has a replacement:
# nothing is rebuilt meanwhile, every read of a lost cell is a
# reconstruction.
#
# usage: ec_wide_test.sh LODED LODE EC_CLIENT
set -u
loded=$1
lode=$2
client=$3
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup ec-wide-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

# A 5 s grace: with ten engines under ASan beside other tests, the service's
# backlog once held heartbeats past a 3 s grace and a third engine went
# DOWN, beyond EC_8P2's tolerance. Detection speed is cluster_test's.
cluster_host --ram --transport tcp --targets 1 --heartbeat-ms 200 --grace-ms 5000
C() { check "$1" 0 "$client" "${@:2}"; cat "$dir/out"; }

declare -a epid
for i in 1 2 3 4 5 6 7 8 9; do
	loded_join "e$i" --targets 1
	epid[$i]=$jpid
	pids+=("$jpid")
done
for i in 1 2 3 4 5 6 7 8 9; do wait_state "engine $i joins UP" "$i" UP 10; done
check "container of class EC_8P2" 0 A cont create c82 --class EC_8P2
C "EC_8P2 matches the model" ops "$a_addr" c82 EC_8P2 20 300

kill -9 "${epid[4]}" "${epid[8]}"
wait "${epid[4]}" "${epid[8]}" 2>/dev/null
wait_state "killed engine 4 is DOWN" 4 DOWN 10
wait_state "killed engine 8 is DOWN" 8 DOWN 10
C "EC_8P2 reads back with two engines dead" verify "$a_addr" c82 EC_8P2 20 300
C "EC_8P2 writes and punches go on with two dead" dops "$a_addr" c82 EC_8P2 21 300
C "and read back" verify "$a_addr" c82 EC_8P2 21 300
checks_done
