#!/usr/bin/env bash
# One engine cut off from the management service by the network, not by a
# kill: engine c runs in a network namespace of its own, joined to the host
# by a veth pair; engines a (hosting the service) and b listen on the host's
# end. Traffic control on c's end then starves what c sends to the
# service's port (an htb class of 8 bit/s with a queue of one packet: the
# kernels this runs on have no tc drop action), while c stays reachable
# for clients. Checks that c fences
# itself within the grace period (no split brain: a client still reaching c
# is refused, it does not get a second copy of the truth); that the service
# marks c DOWN; that a client writing an RP_2 stream across the cut sees no
# error and every acknowledged write reads back; that the others rebuild
# c's replicas and c goes OUT; that once the network heals c stays OUT and
# refuses data (it missed the writes of the cut); and that the data still
# reads back then.
#
# usage: partition_test.sh LODED LODE PLACE_CLIENT
# Exits 77 (skipped) where network namespaces cannot be made (not root, no
# iproute2, no veth).
set -u
loded=$1
lode=$2
client=$3
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup partition-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

ns=lode-part-$$
host_if=lpa$$ ns_if=lpb$$
net=10.$((64 + $$ % 128)).$(($$ / 128 % 250)) # a /24 of our own
host_ip=$net.1 ns_ip=$net.2
command -v ip >/dev/null && command -v tc >/dev/null || { echo "skip: no ip or tc"; exit 77; }
ip netns add "$ns" 2>/dev/null || { echo "skip: cannot make a network namespace"; exit 77; }
netns_cleanup() {
	scratch_cleanup
	ip netns del "$ns" 2>/dev/null
}
trap netns_cleanup EXIT
if ! ip link add "$host_if" type veth peer name "$ns_if" netns "$ns" 2>/dev/null; then
	echo "skip: cannot make a veth pair"
	exit 77
fi
if ! ip netns exec "$ns" tc qdisc add dev "$ns_if" root handle 1: htb default 0 2>/dev/null ||
	! ip netns exec "$ns" tc qdisc del dev "$ns_if" root 2>/dev/null; then
	echo "skip: no htb queueing discipline"
	exit 77
fi
ip addr add "$host_ip/24" dev "$host_if" && ip link set "$host_if" up &&
	ip -n "$ns" addr add "$ns_ip/24" dev "$ns_if" && ip -n "$ns" link set "$ns_if" up &&
	ip -n "$ns" link set lo up || { echo "FAIL setting up the veth pair"; exit 1; }

# UCX's tcp lanes go over the veth pair on both sides.
export UCX_NET_DEVICES=$host_if LODE_TIMEOUT_MS=8000
HB=(--heartbeat-ms 200 --grace-ms 3000)
LODED_HOST=$host_ip cluster_host --ram --transport tcp --targets 2 "${HB[@]}"

LODED_HOST=$host_ip loded_join b
pids+=("$jpid")
LODED_HOST=$ns_ip LODED_PREFIX="ip netns exec $ns env UCX_NET_DEVICES=$ns_if" \
	loded_join c --targets 2
c_pid=$jpid c_addr=$jaddr
pids+=("$c_pid")
wait_state "engine b joins UP" 1 UP 5
wait_state "engine c joins UP from its namespace" 2 UP 5
check "container of class RP_2" 0 A cont create data --class RP_2

# ---- cut c off from the service while a client writes RP_2 ----
"$client" stream "$a_addr" data 8 >"$dir/stream.out" 2>&1 &
stream=$!
sleep 1.5
mport=${mgmt##*:}
T=(ip netns exec "$ns" tc)
"${T[@]}" qdisc add dev "$ns_if" root handle 1: htb default 0 &&
	"${T[@]}" class add dev "$ns_if" parent 1: classid 1:10 htb rate 8bit ceil 8bit burst 1 \
		cburst 1 &&
	"${T[@]}" qdisc add dev "$ns_if" parent 1:10 handle 10: pfifo limit 1 &&
	"${T[@]}" filter add dev "$ns_if" parent 1: protocol ip prio 1 u32 \
		match ip dst "$host_ip/32" match ip dport "$mport" 0xffff flowid 1:10 ||
	failed "the traffic-control filter"
t0=$(date +%s%N)
for _ in $(seq 100); do
	grep -q "lost the management service" "$dir/c.log" && break
	sleep 0.1
done
t1=$(date +%s%N)
if grep -q "lost the management service" "$dir/c.log"; then
	echo "ok   c fenced itself $(((t1 - t0) / 1000000)) ms after the cut (grace 3000 ms)"
	pass=$((pass + 1))
else
	failed "c did not fence itself"
fi
wait_state "the service marks c DOWN" 2 DOWN 10
kill -0 "$c_pid" 2>/dev/null || failed "c died instead of fencing"
# A client that still reaches c is refused: c does not serve on its own.
check "a cut-off engine refuses data" 1 "$lode" --addr "$c_addr" cont create onc
grep -q "not serving" "$dir/err" || failed "the refusal names the fence: $(cat "$dir/err")"
wait "$stream"
rc=$?
cat "$dir/stream.out"
[ "$rc" -eq 0 ] || failed "the RP_2 stream across the cut exited $rc"
n=$(sed -n 's/^count //p' "$dir/stream.out")
check "every acknowledged write reads back, from a new connection" 0 \
	"$client" verify "$a_addr" data "${n:-1}"

# The others rebuild c's replicas; c goes OUT.
wait_state "c goes OUT once its replicas are rebuilt" 2 OUT 60

# ---- the network heals: c stays OUT and fenced ----
"${T[@]}" qdisc del dev "$ns_if" root || failed "removing the filter"
sleep 1.5
[ "$(engine_state 2)" = OUT ] || failed "healed c is $(engine_state 2), not OUT"
check "a healed but OUT engine still refuses data" 1 "$lode" --addr "$c_addr" cont create onc
check "the data reads back after the heal" 0 "$client" verify "$a_addr" data "${n:-1}"
checks_done
