#!/usr/bin/env bash
# EC_8P2 (src/client/ec_io.c) on ten engines, the fewest it places on: a
# group is 8 data and 2 parity cells, each on its own engine. ec_client
# (ec_client.c) checks random writes, punches, reads and sizes against a
# model; then two engines are killed with -9 (the class's tolerance), and
# everything reads back degraded, and writes, partial ones included, go
# on and read back. With eight engines left no group has a replacement:
# nothing is rebuilt meanwhile, every read of a lost cell is a
# reconstruction, and the engines' rebuild passes, which fail the same way
# each time, are retried ever less often.
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
t_down=$(date +%s)
C "EC_8P2 reads back with two engines dead" verify "$a_addr" c82 EC_8P2 20 300
C "EC_8P2 writes and punches go on with two dead" dops "$a_addr" c82 EC_8P2 21 300
EC_DOPS=1 C "and read back" verify "$a_addr" c82 EC_8P2 21 300

# Nothing can be rebuilt with eight engines left: each engine's passes fail
# the same way, and each waits longer than the last (2, 4, 8, then 10 s),
# so that they do not connect to every engine every 2 s while it lasts.
# The fifth pass of engine 1 comes at least 10 s after the fourth.
v=$("$lode" --addr "$a_addr" status --json | sed -n 's/.*"map_version":\([0-9]*\).*/\1/p')
passes() { grep "rebuild for pool map version $v: started" "$dir/e1.log"; }
for _ in $(seq 90); do [ "$(passes | wc -l)" -ge 5 ] && break; sleep 1; done
if [ "$(passes | wc -l)" -ge 5 ]; then
	t4=$(date -d "$(passes | sed -n 4p | cut -c1-19)" +%s)
	t5=$(date -d "$(passes | sed -n 5p | cut -c1-19)" +%s)
	if [ $((t5 - t4)) -ge 9 ]; then
		echo "ok   engine 1's fifth rebuild pass of version $v came $((t5 - t4)) s after its fourth"
		pass=$((pass + 1))
	else
		failed "engine 1's fifth rebuild pass of version $v came $((t5 - t4)) s after its fourth"
	fi
else
	failed "engine 1 tried the rebuild of version $v $(passes | wc -l) times in 90 s"
fi
checks_done
