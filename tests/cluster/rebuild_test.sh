#!/usr/bin/env bash
# Rebuild of a dead engine's replicas (src/server/rebuild.c). Three engines
# on loopback, an RP_2 container. Objects are written; then, while a client
# keeps writing, one engine is killed with -9: it goes DOWN, the survivors
# copy the replicas it held to the engines the map then assigns, and it goes
# OUT once every survivor has reported its part. Checks that the rebuild
# runs and ends (the map says OUT, the engines' logs say done, `lode pool
# query` says so); that the writes made during the rebuild went on without
# an error; that every object reads back byte for byte from a new
# connection; and, the point of it all, that once a second engine is killed
# everything still reads back from the last one: without the rebuild, the
# objects whose two replicas were on the two dead engines would be gone.
# A second container has a snapshot: its objects were overwritten and a
# key of each removed after it, and both views read back to the end (the
# copies carry every snapshot's view, not just the latest).
#
# usage: rebuild_test.sh LODED LODE PLACE_CLIENT
set -u
loded=$1
lode=$2
client=$3
# A replicated write that lost a member waits, up to the client's timeout,
# for the map to mark that engine DOWN: the timeout must outlast the grace.
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup rebuild-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

cluster_of_three 2
check "container of class RP_2" 0 A cont create data --class RP_2

# ---- objects before the failure ----
check "objects written before the failure" 0 "$client" stream "$a_addr" data 3
n1=$(sed -n 's/^count //p' "$dir/out")
# A snapshot's view is rebuilt too: objects as the snapshot saw them, then
# overwritten, and a key of each removed.
# Akeys that change shape after it too: an array that ends sooner, one
# extended by zeros, a value punched and written as an array.
check "container snap of class RP_2" 0 A cont create snap --class RP_2
check "200 objects written to snap" 0 "$client" write "$a_addr" snap 200
check "shaped akeys written to snap" 0 "$client" shapes "$a_addr" snap 1
check "a snapshot of snap" 0 A cont snap create snap
s1=$(cat "$dir/out")
check "snap's objects overwritten after it" 0 env PLACE_GEN=4 "$client" write "$a_addr" snap 200
check "... and key k0 of each removed" 0 "$client" remove "$a_addr" snap 200
check "... and the shaped akeys changed" 0 "$client" shapes "$a_addr" snap 2
check "the shapes as changed" 0 "$client" shapes "$a_addr" snap 3
check "the shapes as the snapshot saw them" 0 env PLACE_EPOCH="$s1" "$client" shapes "$a_addr" snap 4
check "the snapshot reads as it was" 0 env PLACE_EPOCH="$s1" "$client" verify "$a_addr" snap 200
check "the latest as overwritten, k0 gone" 0 \
	env PLACE_GEN=4 PLACE_NO_K0=1 "$client" verify "$a_addr" snap 200

# ---- kill -9 of c while a client writes; rebuild; c goes OUT ----
"$client" stream "$a_addr" data 10 >"$dir/stream.out" 2>&1 &
stream=$!
sleep 1
kill -9 "$c_pid"
wait "$c_pid" 2>/dev/null
t0=$(date +%s%N)
wait_state "killed c is DOWN" 2 DOWN 10
wait_state "rebuilt c is OUT" 2 OUT 60 && {
	t1=$(date +%s%N)
	echo "     DOWN to OUT in $(((t1 - t0) / 1000000)) ms"
}
for log in loded.log b.log; do
	grep -q "rebuild for pool map version [0-9]*: done" "$dir/$log" ||
		failed "$log does not say its rebuild is done"
done
check "pool query after the rebuild" 0 A pool query default
grep -q "rebuild .* done" "$dir/out" || failed "pool query: $(cat "$dir/out")"
wait "$stream"
rc=$?
cat "$dir/stream.out"
[ "$rc" -eq 0 ] || failed "writes during the rebuild exited $rc"
n2=$(sed -n 's/^count //p' "$dir/stream.out")
n=$n1
[ "${n2:-0}" -gt "$n" ] && n=$n2
check "every object reads back after the rebuild ($n)" 0 "$client" verify "$a_addr" data "$n"
check "the snapshot reads as it was after the rebuild" 0 \
	env PLACE_EPOCH="$s1" "$client" verify "$a_addr" snap 200
check "the latest as overwritten, k0 gone, after the rebuild" 0 \
	env PLACE_GEN=4 PLACE_NO_K0=1 "$client" verify "$a_addr" snap 200

# ---- a second failure: the rebuilt replicas carry the data ----
kill -9 "$b_pid"
wait "$b_pid" 2>/dev/null
wait_state "killed b is DOWN" 1 DOWN 10
check "with two engines dead, every object reads back from the last" 0 \
	"$client" verify "$a_addr" data "$n"
check "... the snapshot as it was (the rebuilt copies carry it)" 0 \
	env PLACE_EPOCH="$s1" "$client" verify "$a_addr" snap 200
check "... the latest as overwritten, k0 gone" 0 \
	env PLACE_GEN=4 PLACE_NO_K0=1 "$client" verify "$a_addr" snap 200
check "... the shapes as changed" 0 "$client" shapes "$a_addr" snap 3
check "... and as the snapshot saw them" 0 env PLACE_EPOCH="$s1" "$client" shapes "$a_addr" snap 4
checks_done
