#!/usr/bin/env bash
# Several engines in one system, on loopback: one loded hosts the
# management service, two more join it (--join). Checks that engines join
# and show UP in the pool map; that a killed engine is marked DOWN within
# the grace period in a new map version while a client keeps writing to an
# RP_2 container without an error (liblode writes every replica; the dead
# engine's copies are lost, so writes are degraded, and requests refused as
# stale are placed again with the new map); that an excluded engine refuses
# data and serves again once reintegrated; that a restarted engine gets its
# old id back and stays out of the layout (DOWN, or OUT once the others
# rebuilt its replicas: rebuild_test.sh); that engines stay UP while the
# service itself is stopped past the grace; that refused credentials stop a joining
# engine with the service's words; and that an engine which loses the
# service fences itself.
#
# usage: cluster_test.sh LODED LODE
set -u
loded=$1
lode=$2
export UCX_NET_DEVICES=lo
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup cluster-test

. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

HB=(--heartbeat-ms 200 --grace-ms 3000)
cluster_host --ram --transport tcp --targets 2 "${HB[@]}"

join() { loded_join "$@"; }

map_version() { "$lode" --addr "$1" status --json | sed -n 's/.*"map_version":\([0-9]*\).*/\1/p'; }

# ---- two engines join ----
join b
b_pid=$jpid b_addr=$jaddr
pids+=("$b_pid")
join c --targets 3
c_pid=$jpid c_addr=$jaddr
pids+=("$c_pid")
wait_state "engine 1 joins UP" 1 UP 5
wait_state "engine 2 joins UP" 2 UP 5
check "system engines lists three" 0 A system engines
[ "$(grep -cE '^ *[0-9]+ ' "$dir/out")" -eq 3 ] || failed "engines: $(cat "$dir/out")"
grep -q "joined the system as engine 1" "$dir/b.log" || failed "b's log names its id"
v1=$(map_version "$a_addr")
[ -n "$v1" ] && [ "$v1" -ge 3 ] || failed "map version after two joins is '$v1', expected >= 3"

# ---- the service stopped past the grace: its deafness is not the engines' silence ----
# The service's host stops (SIGSTOP) for 4.5 s, past the 3 s grace; when it
# runs again, its late timer counts the stop as its own silence, so no
# engine goes DOWN and the map keeps its version.
kill -STOP "$pid"
sleep 4.5
kill -CONT "$pid"
sleep 1.5 # several checks of the map
wait_state "engine 1 stays UP after the service was stopped" 1 UP 1
wait_state "engine 2 stays UP after the service was stopped" 2 UP 1
v=$(map_version "$a_addr")
[ "$v" = "$v1" ] || failed "map version $v after the service was stopped, was $v1"

# ---- kill -9 of an engine: DOWN within the grace period; clients go on ----
A cont create data --class RP_2 >/dev/null || failed "cont create"
A bench --cont data --rw write --bs 4k --size 8M --runtime 4 --ceiling 0 --json --progress 1 \
	>"$dir/bench.json" 2>"$dir/bench.err" &
bench=$!
bench_started "the client" "$dir/bench.err" "$bench"
sleep 0.5
kill -9 "$c_pid"
wait "$c_pid" 2>/dev/null
t0=$(date +%s%N)
wait_state "killed engine 2 is DOWN" 2 DOWN 10
t1=$(date +%s%N)
echo "     detected in $(((t1 - t0) / 1000000)) ms (grace 3000 ms)"
wait "$bench"
rc=$?
[ "$rc" -eq 0 ] || { failed "bench across the map change exited $rc"; cat "$dir/bench.err"; }
grep -q '"errors":0,' "$dir/bench.json" || failed "bench saw errors: $(cat "$dir/bench.json")"
v2=$(map_version "$a_addr")
[ -n "$v2" ] && [ "$v2" -gt "$v1" ] || failed "map version $v2 after the death, was $v1"

# ---- a restarted engine gets its id back and stays DOWN (or OUT) ----
join c --targets 3
c_pid=$jpid c_addr=$jaddr
pids+=("$c_pid")
grep -q "joined the system as engine 2" "$dir/c.log" || failed "restarted c is engine 2 again"
sleep 0.5
case $(engine_state 2) in
DOWN | OUT) ;;
*) failed "restarted engine 2 is $(engine_state 2), not DOWN or OUT" ;;
esac
check "a DOWN engine refuses data" 1 "$lode" --addr "$c_addr" cont create onc
grep -q "not serving" "$dir/err" || failed "refusal names the fence: $(cat "$dir/err")"

# ---- exclude and reintegrate by hand ----
check "exclude engine 1" 0 A system exclude 1
wait_state "excluded engine 1 is DOWN" 1 DOWN 5
sleep 0.5
check "an excluded engine refuses data" 1 "$lode" --addr "$b_addr" cont create onb
check "exclude engine 0 is refused" 1 A system exclude 0
check "reintegrate engine 1" 0 A system reintegrate 1
for _ in $(seq 30); do
	"$lode" --addr "$b_addr" cont create onb --class RP_2 >/dev/null 2>&1 && break
	sleep 0.1
done
# The refused creates above were undone: the label is free again. RP_2, so
# that objects whose group holds the DOWN engine 2 are written degraded.
check "a reintegrated engine serves" 0 "$lode" --addr "$b_addr" kv put onb o k1 v1
check "and reads back" 0 "$lode" --addr "$b_addr" kv get onb o k1
[ "$(cat "$dir/out")" = v1 ] || failed "kv get on b: $(cat "$dir/out")"

# ---- credentials the service refuses stop a joining engine ----
printf 'user: admin\nsecret: wrong\n' >"$dir/bad.cred"
"$loded" --listen 127.0.0.1:0 --path "$dir/bad" --ram --transport tcp --join "$mgmt" \
	--join-cred "$dir/bad.cred" >"$dir/bad.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] || failed "a join with a wrong secret started"
grep -q "joining $mgmt" "$dir/bad.log" || failed "bad join says why: $(cat "$dir/bad.log")"
check "join without join_cred is a usage error" 2 "$loded" --join "$mgmt" --ram

# ---- an engine that loses the service fences itself ----
# A client of engine 1 writes while the service (and engine 0 with it) dies:
# within the grace period engine 1 stops serving, and the client is told
# why: "not serving" from engine 1, or, for a group whose other member is
# engine 0 or the DOWN engine 2, that no member is left (host is down).
"$lode" --addr "$b_addr" bench --cont onb --rw write --bs 4k --size 4M --runtime 8 --ceiling 0 \
	--progress 1 >"$dir/bench2.out" 2>"$dir/bench2.err" &
bench=$!
bench_started "the client of b" "$dir/bench2.err" "$bench"
sleep 1
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=
for _ in $(seq 80); do
	grep -q "lost the management service" "$dir/b.log" && break
	sleep 0.1
done
grep -q "lost the management service" "$dir/b.log" || failed "b did not fence itself"
wait "$bench"
rc=$?
[ "$rc" -ne 0 ] || failed "writes to a fenced engine went on"
grep -qE "not serving|Host is down" "$dir/bench2.err" ||
	failed "the client was not told: $(cat "$dir/bench2.err")"
checks_done
