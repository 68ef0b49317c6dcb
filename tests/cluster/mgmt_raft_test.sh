#!/usr/bin/env bash
# The management service replicated with Raft (src/mgmt README,
# "Replication"): three loded, each hosting a replica and serving RAM
# targets, on loopback with short raft timings. Checks that a leader is
# elected and writes the credentials; that admin commands work through each
# of the three (followers redirect, clients follow); that kill -9 of the
# leader's loded leaves a new leader serving within seconds with what was
# created before, and new changes commit; that a data-plane client keeps
# writing across the leader change (its token, signed by the old leader,
# verifies on every engine), and so does one whose engine and replica were
# the leader's (it calls another replica); that the killed loded
# restarted on its directories catches up (its state.pb and its own
# answers have a change made while it was down); that with two of three
# down a write fails with UNAVAILABLE instead of succeeding; and that a
# one-replica group starts.
#
# usage: mgmt_raft_test.sh LODED LODE
set -u
loded=$1
lode=$2
export UCX_NET_DEVICES=lo
mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-raft-test.XXXXXX")
declare -A lpid
cleanup() {
	for p in "${lpid[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "$dir"
}
trap cleanup EXIT
export HOME=$dir/home XDG_CONFIG_HOME=$dir/xdg
mkdir -p "$HOME"
unset LODE_USER LODE_SECRET LODE_POOL LODE_MGMT LODE_TLS_CA LODE_ADDR LODE_ADDR_FILE

. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"

# Three free ports per replica: bootstrap, gRPC, raft. They are fixed in
# the replicas' configuration, so a port taken between the pick and the
# bind cannot be picked again: they come from below the kernel's ephemeral
# range (32768 up), which the other tests' UCX listeners draw from.
used=" "
free_port() { # free_port VAR: a port no one answers on and not picked before
	local port
	while :; do
		port=$((20000 + RANDOM % 12000))
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
		case "$used" in *" $port "*) continue ;; esac
		used="$used$port "
		printf -v "$1" '%s' "$port"
		return
	done
}
declare -A A G R
for i in 1 2 3; do
	free_port p; A[$i]=127.0.0.1:$p
	free_port p; G[$i]=127.0.0.1:$p
	free_port p; R[$i]=127.0.0.1:$p
done
reps="1=${R[1]}@${G[1]},2=${R[2]}@${G[2]},3=${R[3]}@${G[3]}"
export LODE_CREDENTIALS=$dir/admin.credentials
start() { # start I: loded I on its directories
	"$loded" --listen "${A[$1]}" --path "$dir/n$1" --ram --transport tcp --targets 2 \
		--admin-cred "$LODE_CREDENTIALS" --heartbeat-ms 200 --grace-ms 3000 \
		--mgmt-replicas "$reps" --mgmt-replica-id "$1" --mgmt-election-ms 300 \
		>>"$dir/n$1.log" 2>&1 &
	lpid[$1]=$!
}
# L I ARGS: lode through loded I and its replica
# (TMO: its timeout in ms, 5000 unless set)
L() { local i=$1; shift; LODE_MGMT=${G[$i]} "$lode" --addr "${A[$i]}" --timeout "${TMO:-5000}" "$@"; }
# leader: the id whose log last says it leads, among the running ones
leader() {
	local i
	for i in "${!lpid[@]}"; do
		[ "$(grep -E 'mgmt: replica (leads|follows)' "$dir/n$i.log" | tail -1 | cut -d' ' -f3)" = leads ] &&
			{ echo "$i"; return; }
	done
}
wait_for() { # wait_for SECONDS CMD...: until CMD succeeds
	local n=$(($1 * 10))
	shift
	for _ in $(seq $n); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
	return 1
}

t0=$(date +%s%N)
for i in 1 2 3; do start $i; done
wait_for 15 test -s "$LODE_CREDENTIALS" || failed "no credentials written"
for i in 1 2 3; do
	wait_for 15 L $i status || failed "loded $i does not answer"
done
ld=$(leader)
[ -n "$ld" ] && { echo "ok   leader elected: replica $ld ($((($(date +%s%N) - t0) / 1000000)) ms from start)"; pass=$((pass + 1)); } ||
	failed "no leader"
grep -h "mgmt: replica" "$dir"/n*.log | head -3

# ---- admin commands through each address ----
f=$(( ld % 3 + 1 )); f2=$(( f % 3 + 1 ))
check "tenant create through a follower" 0 L "$f" tenant create acme
check "user create through the other follower" 0 L "$f2" user create acme/bob
# every loded joins its own service as an engine (through its replica)
up_count() { L "$1" system engines 2>/dev/null | grep -c ' UP '; }
wait_for 10 test "$(up_count "$ld")" = 3 || true
wait_for 10 sh -c "LODE_MGMT=${G[$ld]} '$lode' --addr ${A[$ld]} system engines | grep -c ' UP ' | grep -qx 3" ||
	failed "three engines UP: $(L "$ld" system engines)"
check "cont create through the leader" 0 L "$ld" cont create onleader
# Its data spans the three engines, and the leader's engine dies below:
# replicated, so every object keeps a copy.
check "cont create through a follower" 0 L "$f" cont create data --class RP_2
# A follower answers reads from what it has applied: it may lag a heartbeat.
wait_for 5 sh -c "LODE_MGMT=${G[$f]} '$lode' --addr ${A[$f]} cont list | grep -qx data" ||
	failed "cont list through follower $f: $(L "$f" cont list)"
check "kv put before the leader change" 0 L "$f" kv put data o k0 v0

check "cont create through the leader" 0 L "$ld" cont create data2 --class RP_2

# ---- kill -9 of the leader; a client of a follower keeps writing ----
# A write that lost the dead engine's replica waits for the map that says
# it is DOWN: the new leader counts its silence from the election (0.9-2.1 s
# after the kill here under the sanitizers), then the grace (3 s). The
# writers' timeout covers both, as the default (10 s) does.
TMO=10000 L "$f" bench --cont data --rw write --bs 4k --size 4M --runtime 5 --ceiling 0 --json \
	--progress 1 >"$dir/bench.json" 2>"$dir/bench.err" &
bench=$!
# ... and so does a client of the leader: its engine and its replica die,
# and it finds the service on another replica for the map that says so.
# Its jobs must have connected before the kill (a slow start under the
# sanitizers took over a second): nothing else here knows another address.
TMO=10000 L "$ld" bench --cont data2 --rw write --bs 4k --size 4M --runtime 8 --ceiling 0 --json \
	--progress 1 >"$dir/bench2.json" 2>"$dir/bench2.err" &
bench2=$!
bench_started "the follower's client" "$dir/bench.err" "$bench"
bench_started "the leader's client" "$dir/bench2.err" "$bench2"
sleep 0.5
kill -9 "${lpid[$ld]}"
wait "${lpid[$ld]}" 2>/dev/null
unset "lpid[$ld]"
k0=$(date +%s%N)
# At once, before the followers notice: the follower still names the dead
# leader, and a container's opening (the leader's to serve, and harmless
# to repeat) waits for the next one.
check "a container opened through a follower just after the leader died" 0 \
	L "$f" kv get data o k0
[ "$(cat "$dir/out")" = v0 ] || failed "kv get just after the kill: $(cat "$dir/out")"
wait_for 10 L "$f" tenant create after || failed "a change after the leader died"
k1=$(date +%s%N)
echo "ok   a new leader committed a change $(((k1 - k0) / 1000000)) ms after the kill (election 300 ms)"
pass=$((pass + 1))
nl=$(leader)
[ -n "$nl" ] && [ "$nl" != "$ld" ] || failed "new leader is '$nl' (old $ld)"
check "the containers are still there" 0 L "$f2" cont query onleader
check "the user is still there" 0 L "$f2" user list acme
grep -q bob "$dir/out" || failed "user list: $(cat "$dir/out")"
wait "$bench"
rc=$?
[ "$rc" -eq 0 ] || { failed "bench across the leader change exited $rc"; cat "$dir/bench.err"; }
grep -q '"errors":0,' "$dir/bench.json" || failed "bench saw errors: $(cat "$dir/bench.json")"
wait "$bench2"
rc=$?
[ "$rc" -eq 0 ] || { failed "bench of the leader's client exited $rc"; cat "$dir/bench2.err"; }
grep -q '"errors":0,' "$dir/bench2.json" ||
	failed "bench of the leader's client saw errors: $(cat "$dir/bench2.json")"
check "kv get of what was written before" 0 L "$f" kv get data o k0
[ "$(cat "$dir/out")" = v0 ] || failed "kv get k0: $(cat "$dir/out")"
check "kv put after the leader change" 0 L "$f" kv put data o k1 v1
check "kv get back" 0 L "$f" kv get data o k1
[ "$(cat "$dir/out")" = v1 ] || failed "kv get: $(cat "$dir/out")"

# ---- the killed loded restarted catches up ----
check "a change while it is down" 0 L "$f" tenant create whiledown
start "$ld"
wait_for 15 grep -q whiledown "$dir/n$ld/mgmt/state.pb" || failed "restarted $ld's state.pb lacks the change"
wait_for 15 L "$ld" tenant list || failed "restarted $ld does not answer"
check "restarted replica lists it" 0 L "$ld" tenant list
grep -q whiledown "$dir/out" || failed "tenant list on $ld: $(cat "$dir/out")"

# ---- two of three down: writes fail clearly ----
one=$(leader)
for i in "${!lpid[@]}"; do
	[ "$i" = "$one" ] && continue
	kill -9 "${lpid[$i]}"
	wait "${lpid[$i]}" 2>/dev/null
	unset "lpid[$i]"
	break
done
for i in "${!lpid[@]}"; do
	[ "$i" = "$one" ] && continue
	kill -9 "${lpid[$i]}"
	wait "${lpid[$i]}" 2>/dev/null
	unset "lpid[$i]"
done
check "a write with no majority fails" 1 L "$one" tenant create nomajority
grep -qiE "no leader|not committed|unavailable|leader" "$dir/err" || failed "says why: $(cat "$dir/err")"
kill "${lpid[$one]}"
wait "${lpid[$one]}" 2>/dev/null
unset "lpid[$one]"

# ---- one replica ----
rm -f "$LODE_CREDENTIALS"
reps="1=${R[1]}@${G[1]}"
rm -rf "$dir/n1"
start 1
wait_for 15 test -s "$LODE_CREDENTIALS" || failed "one replica: no credentials"
wait_for 15 L 1 status || failed "one replica: loded does not answer"
wait_for 10 sh -c "LODE_MGMT=${G[1]} '$lode' --addr ${A[1]} system engines | grep -q ' UP '" ||
	failed "one replica: its engine joined: $(L 1 system engines)"
check "one replica: cont create" 0 L 1 cont create solo
check "one replica: kv put" 0 L 1 kv put solo o k v
checks_done
