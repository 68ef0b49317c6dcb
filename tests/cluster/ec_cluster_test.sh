#!/usr/bin/env bash
# Erasure coding on the I/O path (src/client/ec_io.c) and its rebuild
# (src/server/rebuild.c). Six engines on loopback. ec_client (ec_client.c)
# drives liblode. Checks:
#   - random writes, punches, reads and sizes of EC_2P1 and EC_4P2 arrays
#     (whole and partial stripes, unaligned, spanning stripes, punched to
#     far past the end) match a model in memory, as S1's do; single values
#     and chunked arrays of both classes read back;
#   - writers in different processes to the same stripes (each its own
#     data cell, all the same parity range): every data cell holds its
#     writer's last write and every parity cell is the code of the data
#     cells, read from the members themselves (the write lease; the
#     EC_4P2 case fails without it); a writer killed holding the lease does
#     not hold up the next; one that dies between a stripe's data and
#     parity leaves the array torn: the next writer mends every stripe's
#     parity, and a degraded read of a torn array fails (-EIO) rather
#     than return bytes rebuilt from parity that does not match; the
#     rebuild leaves such an array (the engine stays DOWN) until it is
#     punched;
#   - a user who may only read reads c21 degraded (it takes the lease);
#   - snapshots taken while an EC_2P1 stripe is rewritten over and over
#     each see the stripe whole (data and parity of the same write); a
#     snapshot taken after a writer tore an array mends it first: the
#     snapshot's view has parity that matches its data, also when two
#     snapshots are taken at once; a dkey's or an
#     object's punch and its arrays' writers wait for each other, and a
#     snapshot waits for the punch (their leases nest);
#   - EC_8P2 on six engines fails with -ENOSPC (cont create says so up
#     front); an encrypted EC container
#     is refused;
#   - files copied into an EC_2P1 container through lode-fuse (and `lode
#     obj put`) read back byte for byte, and again after the kill below;
#   - kill -9 of an engine during an EC_2P1 write stream: no write fails,
#     and every object reads back;
#   - with the engine DOWN (no rebuild: EC_4P2 needs six engines, five are
#     left) everything reads back degraded, and writes, partial ones
#     included, go on and read back; sizes are exact, by the end marks
#     (two arrays whose last data member is on it end where only the mark
#     says), and stay so after the rebuild; a punch to past the end of an
#     array whose parity is lost works, and the rebuilt parity has its mark;
#   - once the EC_4P2 container is destroyed, the dead engine's EC_2P1
#     cells are rebuilt onto the replacements, while a client writes, and
#     it goes OUT; then a
#     second engine is killed, and everything still reads back: the reads
#     now need the rebuilt cells;
#   - a container snapshotted and then changed (arrays overwritten and
#     punched, single values rewritten, one dkey punched) reads as the
#     snapshot saw it and as changed: before the failure, degraded, after
#     the rebuild (the rebuilt cells carry the snapshot's view; each
#     member's cells, parity included, are also read alone and checked)
#     and after the second failure.
#
# usage: ec_cluster_test.sh LODED LODE EC_CLIENT LODE_FUSE
set -u
loded=$1
lode=$2
client=$3
lode_fuse=$4
# A write that lost a member waits, up to the client's timeout, for the map
# to mark that engine DOWN: the timeout must outlast the grace.
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup ec-cluster-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"
mnt=$dir/mnt
# Never remove the scratch directory through a mount that is still there.
trap 'fusermount3 -u -z "$mnt" 2>/dev/null; scratch_cleanup' EXIT

cluster_host --ram --transport tcp --targets 2 --heartbeat-ms 200 --grace-ms 3000
C() { check "$1" 0 "$client" "${@:2}"; cat "$dir/out"; }

declare -A epid
for e in b c d e f; do
	loded_join "$e" --targets 1
	epid[$e]=$jpid
	pids+=("$jpid")
done
for i in 1 2 3 4 5; do wait_state "engine $i joins UP" "$i" UP 5; done
check "container of class EC_2P1" 0 A cont create c21 --class EC_2P1
check "container of class EC_4P2" 0 A cont create c42 --class EC_4P2
check "container of class S1" 0 A cont create cs1 --class S1

# ---- a snapshot's view, kept through the failures below ----
check "container snp of class EC_2P1" 0 A cont create snp --class EC_2P1
for s in 20 21 22; do C "snp seed $s before its snapshot" ops "$a_addr" snp EC_2P1 $s 150; done
check "a snapshot of snp" 0 A cont snap create snp
s1=$(cat "$dir/out")
for s in 20 21 22; do
	EC_GEN=1 EC_FROM=150 C "snp seed $s changed after it" ops "$a_addr" snp EC_2P1 $s 300
done
snp_check() { # WHEN: snp's snapshot and latest views read back
	local s
	for s in 20 21 22; do
		EC_EPOCH=$s1 C "snp seed $s as the snapshot saw it$1" verify "$a_addr" snp EC_2P1 $s 150
		EC_GEN=1 C "snp seed $s as changed$1" verify "$a_addr" snp EC_2P1 $s 300
	done
}
snp_check ""

# ---- the I/O path against a model ----
C "S1 matches the model (the engine's own semantics)" ops "$a_addr" cs1 S1 1 150
C "EC_2P1 matches the model" ops "$a_addr" c21 EC_2P1 2 300
C "EC_2P1 matches the model (another seed)" ops "$a_addr" c21 EC_2P1 12 300
C "EC_4P2 matches the model" ops "$a_addr" c42 EC_4P2 3 300

# A user who may only read c21: its degraded reads take the lease too.
printf 'reader-secret-1' >"$dir/reader.secret"
check "a tenant of readers" 0 A tenant create ro
check "a user who may only read c21" 0 A user create ro/reader --secret-file "$dir/reader.secret"
check "... read on the pool" 0 A acl set default user:ro/reader r
check "... and on c21" 0 A acl set default/c21 user:ro/reader r

# ---- writers in k processes to one stripe: the write lease ----
race() { # race CONT CLASS K STRIPES
	local w wpids=() rc=0 start=$(($(date +%s) + 2))
	for ((w = 0; w < $3; w++)); do
		RACE_START=$start "$client" race "$a_addr" "$1" "$2" "$w" "$4" >"$dir/race$w.out" 2>&1 &
		wpids+=($!)
	done
	for ((w = 0; w < $3; w++)); do
		wait "${wpids[$w]}" || rc=1
		cat "$dir/race$w.out"
	done
	[ "$rc" -eq 0 ] && echo "ok   $3 $2 writers of one stripe finished" && pass=$((pass + 1)) ||
		failed "a $2 writer failed"
	C "$2: the stripes' parity is the code of what the writers left" parity "$a_addr" "$1" "$2" "$4"
}
race c21 EC_2P1 2 200
race c42 EC_4P2 4 100
# A writer killed while it holds the array's lease (it holds it for most of
# each write): its session closes, and the lease with it. The next writer
# asks for it with a 2 s timeout, so it would give up (-EBUSY) long before
# the dead one's lease (4 timeouts of 8 s) ran out.
"$client" race "$a_addr" c21 EC_2P1 0 100000 >"$dir/killed.out" 2>&1 &
kpid=$!
sleep 1.5
kill -9 "$kpid"
wait "$kpid" 2>/dev/null
LODE_TIMEOUT_MS=2000 C "a writer after one killed holding the lease" race "$a_addr" c21 EC_2P1 1 50

# ---- a writer that dies between data and parity: the next holder mends ----
export RACE_OBJ=2
C "writer 1 of a fresh array, 40 stripes" race "$a_addr" c21 EC_2P1 1 40
C "a writer writes data member 0 of them, no parity, and dies holding the lease" \
	tear "$a_addr" c21 EC_2P1 40
check "... the parity no longer matches the data" 1 "$client" parity "$a_addr" c21 EC_2P1 40
C "the next writer (of one stripe) is told the array is torn, and mends it" \
	race "$a_addr" c21 EC_2P1 1 1
C "every stripe's parity is the code of its data again" parity "$a_addr" c21 EC_2P1 40
# A snapshot mends the container's torn arrays before it is taken, so
# that its view of one has parity that matches its data (a degraded read
# or a rebuild of that view would compute wrong cells from it, after the
# array itself was mended; decision 0012).
export RACE_OBJ=3
C "writer 1 of another fresh array, 40 stripes" race "$a_addr" c21 EC_2P1 1 40
C "... torn by a writer that dies" tear "$a_addr" c21 EC_2P1 40
check "... its parity no longer matches its data" 1 "$client" parity "$a_addr" c21 EC_2P1 40
check "a snapshot of c21" 0 A cont snap create c21
tsnap=$(cat "$dir/out")
EC_EPOCH=$tsnap C "the snapshot's view of it: parity the code of its data" \
	parity "$a_addr" c21 EC_2P1 40
C "... and the array's own (mended once, for both)" parity "$a_addr" c21 EC_2P1 40
check "the snapshot destroyed" 0 A cont snap destroy c21 "$tsnap"
hold_lease() { # hold_lease WHAT [SECS]: ec_client holds that lease (pid in lpid) SECS [60]
	"$client" lease "$a_addr" c21 EC_2P1 "$1" "${2:-60}" >"$dir/lease.out" 2>&1 &
	lpid=$!
	for _ in $(seq 100); do grep -q "^held" "$dir/lease.out" && return; sleep 0.1; done
	failed "the $1 lease was not taken: $(cat "$dir/lease.out")"
}
# Two snapshots taken at once each hold the container while they mend: a
# mend passes every snapshot's hold, not only its taker's (with only its
# own, each waited a request timeout for the other's and left the array
# torn in its view). Another array's lease, held 2 s, keeps both barriers
# waiting, so that both holds are up when the mends start.
export RACE_OBJ=5
C "writer 1 of a third fresh array, 40 stripes" race "$a_addr" c21 EC_2P1 1 40
C "... torn by a writer that dies" tear "$a_addr" c21 EC_2P1 40
check "... its parity no longer matches its data" 1 "$client" parity "$a_addr" c21 EC_2P1 40
RACE_OBJ=6 hold_lease array 2
A cont snap create c21 >"$dir/snap1" 2>"$dir/snap1.err" &
spid=$!
check "a snapshot of c21 while another is taken" 0 A cont snap create c21
tsnap2=$(cat "$dir/out")
check "... and the other" 0 wait "$spid"
tsnap1=$(cat "$dir/snap1")
check "... and the lease that held them both back was given back" 0 wait "$lpid"
for s in "$tsnap1" "$tsnap2"; do
	EC_EPOCH=$s C "snapshot $s's view of it: parity the code of its data" \
		parity "$a_addr" c21 EC_2P1 40
	check "snapshot $s destroyed" 0 A cont snap destroy c21 "$s"
done
# A dkey's or an object's punch holds its dkey's or object's lease, which
# nests with its arrays' (lease.h): each waits for the other, and a
# snapshot's barrier waits for it, so that nothing works on (or keeps)
# stripes punched on some members only. A holder in another process
# (ec_client lease) holds it; the waiting calls give up with -EBUSY after
# a short timeout.
export RACE_OBJ=4
C "an array to punch" race "$a_addr" c21 EC_2P1 0 2
busy() { # busy WHAT: the last check's command gave up on a busy lease
	grep -qiE "busy|-16" "$dir/out" "$dir/err" || failed "$1: not busy: $(cat "$dir/out" "$dir/err")"
}
punch_held() { # punch_held KIND WHOSE [WHERE]: with that punch lease held, a write and a snapshot wait
	hold_lease "$1"
	LODE_TIMEOUT_MS=700 check "with its $2 punch lease held, a write${3:-} waits" 1 \
		"$client" race "$a_addr" c21 EC_2P1 1 1
	busy "the write"
	LODE_TIMEOUT_MS=700 check "... and so does a snapshot of the container" 1 A cont snap create c21
	busy "the snapshot"
	kill -9 "$lpid"
	wait "$lpid" 2>/dev/null
}
punch_held dkey "dkey's" " under the dkey"
C "the punch's holder gone (its session closed), the write goes on" race "$a_addr" c21 EC_2P1 1 1
punch_held obj "object's"
hold_lease array
LODE_TIMEOUT_MS=700 check "with an array's lease held, a punch of its dkey waits" 1 \
	"$client" dpunch "$a_addr" c21 EC_2P1 1
busy "the dkey punch"
LODE_TIMEOUT_MS=700 check "... and a punch of its object" 1 "$client" opunch "$a_addr" c21 EC_2P1 1
busy "the object punch"
kill -9 "$lpid"
wait "$lpid" 2>/dev/null
C "the array's writer gone, the dkey punch goes on" dpunch "$a_addr" c21 EC_2P1 1
C "... and the object punch" opunch "$a_addr" c21 EC_2P1 1
RREAD_GONE=1 C "... and the array is gone" rread "$a_addr" c21 EC_2P1 2
# Every byte range-punched, an array still has extents (all punched): its
# reads give zeros, as a replicated array's do, also where the read goes to
# a member that never held a byte of it (writer 1 wrote, data member 0 is
# read).
RACE_OBJ=7 C "writer 1 of a fresh array, 4 stripes" race "$a_addr" c21 EC_2P1 1 4
RACE_OBJ=7 C "... all its stripes range-punched" rpunch "$a_addr" c21 EC_2P1 4
RACE_OBJ=7 RREAD_ZEROS=1 C "... read back as zeros" rread "$a_addr" c21 EC_2P1 4
# One more, torn and left so, whose data member 0 is on f (engine 5): once
# f is dead, its reads cannot be mended and must fail, not return bytes
# rebuilt from parity that does not match.
RACE_OBJ=$("$client" pick "$a_addr" c21 EC_2P1 5 | tail -n 1)
C "an array with data member 0 on f" race "$a_addr" c21 EC_2P1 1 4
C "... torn by a writer that dies" tear "$a_addr" c21 EC_2P1 4
C "... reads while f lives" rread "$a_addr" c21 EC_2P1 4
torn_obj=$RACE_OBJ
# And one whole, for the reader below to read degraded.
RACE_OBJ=$(RACE_PICK_FROM=$((torn_obj + 1)) "$client" pick "$a_addr" c21 EC_2P1 5 | tail -n 1)
C "another array with data member 0 on f" race "$a_addr" c21 EC_2P1 0 4
read_obj=$RACE_OBJ
unset RACE_OBJ
# Two arrays whose last data member is on f, made so that once f is dead
# only their end marks say where they end (docs/decisions/0018), and one
# whose parity member is on f and data member 1 on e: punched to past its
# end while f is dead, its new parity must have the mark (written there,
# or made again by the rebuild) for its size once e is dead too (the
# parity's bound is a cell further). (The snapshot checks of snp after e
# dies need the rebuild's own: they fail without it.)
ENDS_ALSO=4 C "arrays whose last data member or parity is on f" ends "$a_addr" c21 EC_2P1 5 write
ENDS_OBJS=$(sed -n 's/^ends objects //p' "$dir/out")
export ENDS_OBJS
# Snapshots taken while a writer rewrites a stripe: each one's stripe has
# parity that is the code of its data (without the barrier in
# lode_snap_create, about one snapshot in four cut a write in two).
# (In a container of their own: a snapshot of c21 would mend the torn
# array above, which must stay torn.)
check "container cst of class EC_2P1" 0 A cont create cst --class EC_2P1
C "snapshots during EC writes never cut one in two" straddle "$a_addr" cst EC_2P1 30
check "a container of class EC_8P2 on six engines" 0 A cont create c82 --class EC_8P2
grep -q "until 4 more join" "$dir/err" && echo "ok   ... with a note that it needs 4 more" &&
	pass=$((pass + 1)) || failed "no note on EC_8P2's engines: $(cat "$dir/err")"
check "EC_8P2 on six engines fails" 1 "$client" ops "$a_addr" c21 EC_8P2 9 20
grep -q "No space left" "$dir/out" && echo "ok   ... with -ENOSPC" && pass=$((pass + 1)) ||
	failed "EC_8P2's error is not -ENOSPC: $(cat "$dir/out" "$dir/err")"
XDG_CONFIG_HOME=$dir/xdg A keygen >/dev/null || failed "lode keygen"
export LODE_TENANT_KEY=$dir/xdg/lode/tenant.key
check "an encrypted EC container is refused" 1 A cont create cenc --class EC_2P1 --encrypt
grep -q "erasure-coded" "$dir/err" "$dir/out" && echo "ok   ... saying why" && pass=$((pass + 1)) ||
	failed "no reason given: $(cat "$dir/err" "$dir/out")"

# ---- files in an EC_2P1 container: lode-fuse and lode obj put ----
mkdir -p "$mnt" "$dir/src"
for sz in 0 1 4095 65537 131072 1048577 3145735; do
	head -c "$sz" /dev/urandom >"$dir/src/f$sz"
done
check "lode-fuse mounts the EC_2P1 container" 0 "$lode_fuse" --addr "$a_addr" \
	--log "$dir/fuse.log" --pidfile "$dir/fuse.pid" c21 "$mnt"
pids+=("$(cat "$dir/fuse.pid" 2>/dev/null)")
check "files copied in through the mount" 0 cp -r "$dir/src" "$mnt/tree"
check "and read back byte for byte" 0 diff -r "$dir/src" "$mnt/tree"
check "lode obj put of a 5 MiB file" 0 A obj put c21 blob "$dir/src/f3145735"
check "lode obj get reads it back" 0 A obj get c21 blob "$dir/blob.out"
check "... byte for byte" 0 cmp "$dir/src/f3145735" "$dir/blob.out"

# ---- kill -9 of engine f (5) during an EC_2P1 write stream ----
"$client" stream "$a_addr" c21 EC_2P1 4 >"$dir/stream.out" 2>&1 &
stream=$!
sleep 1.5
kill -9 "${epid[f]}"
wait "${epid[f]}" 2>/dev/null
wait "$stream"
rc=$?
cat "$dir/stream.out"
[ "$rc" -eq 0 ] || failed "EC_2P1 stream across kill -9 exited $rc"
n=$(sed -n 's/^count //p' "$dir/stream.out")
wait_state "killed f is DOWN" 5 DOWN 10
LODE_USER=ro/reader LODE_SECRET=reader-secret-1 RACE_OBJ=$read_obj \
	C "a user who may only read reads an array whose data member is lost" \
	rread "$a_addr" c21 EC_2P1 4
LODE_USER=ro/reader LODE_SECRET=reader-secret-1 RACE_OBJ=$read_obj \
	check "... and may not write it" 1 "$client" race "$a_addr" c21 EC_2P1 1 1
RACE_OBJ=$torn_obj check "a torn array with its data member lost fails to read" 1 \
	"$client" rread "$a_addr" c21 EC_2P1 4
grep -q "Input/output error" "$dir/out" && echo "ok   ... with -EIO" && pass=$((pass + 1)) ||
	failed "not -EIO: $(cat "$dir/out")"

# ---- degraded: five engines, EC_4P2 groups have no replacement ----
C "EC_2P1 reads back degraded" verify "$a_addr" c21 EC_2P1 2 300
C "EC_4P2 reads back degraded" verify "$a_addr" c42 EC_4P2 3 300
C "the arrays ending on f: bytes and exact sizes degraded; one punched" \
	ends "$a_addr" c21 EC_2P1 5 punch
C "the stream's objects read back degraded" check "$a_addr" c21 EC_2P1 "${n:-1}"
snp_check ", f dead"
# snp's array sizes as read degraded (the end marks say them; snp_check's
# verify has checked them against the model).
snp_sizes() { # FILE
	local s
	for s in 20 21 22; do
		EC_EPOCH=$s1 "$client" sizes "$a_addr" snp EC_2P1 $s && "$client" sizes "$a_addr" snp EC_2P1 $s
	done >"$1" 2>&1
}
snp_sizes "$dir/sizes.degraded"
check "the files read back degraded through the mount" 0 diff -r "$dir/src" "$mnt/tree"
check "a file written through the mount degraded" 0 cp "$dir/src/f1048577" "$mnt/tree/g"
check "... reads back" 0 cmp "$dir/src/f1048577" "$mnt/tree/g"
C "EC_2P1 writes and punches go on degraded" dops "$a_addr" c21 EC_2P1 4 300
C "EC_4P2 writes and punches go on degraded" dops "$a_addr" c42 EC_4P2 5 300
[ "$(engine_state 5)" = DOWN ] && echo "ok   f is still DOWN (nothing to rebuild onto)" &&
	pass=$((pass + 1)) || failed "f is $(engine_state 5), expected DOWN"

# ---- f's EC_2P1 cells are rebuilt, f goes OUT ----
# (A new engine would join NEW, and NEW engines are not integrated while
# an engine is DOWN; so the EC_4P2 groups, which have no replacement, go.)
# The rebuild runs while a client writes: the replacements get those writes
# too, and the rebuilt cells must agree with them.
"$client" stream "$a_addr" c21 EC_2P1 6 >"$dir/stream2.out" 2>&1 &
stream=$!
sleep 1
check "destroy the EC_4P2 container" 0 A cont destroy c42
# The torn array whose data member 0 was on f cannot be rebuilt from its
# parity: the pass says so and fails, and f stays DOWN, until it is punched.
for _ in $(seq 150); do grep -q "is torn" "$dir"/*.log && break; sleep 0.2; done
grep -q "is torn (a writer died mid-write) and its data member 0 is lost" "$dir"/*.log &&
	echo "ok   the rebuild leaves the torn array and says so" && pass=$((pass + 1)) ||
	failed "no rebuild message about the torn array"
[ "$(engine_state 5)" = DOWN ] && echo "ok   f stays DOWN meanwhile" && pass=$((pass + 1)) ||
	failed "f is $(engine_state 5) with a torn array not rebuilt"
RACE_OBJ=$torn_obj C "the torn array's akey is punched (under the lease, torn or not)" \
	punch "$a_addr" c21 EC_2P1 1
wait_state "rebuilt f is OUT" 5 OUT 60
wait "$stream"
rc=$?
cat "$dir/stream2.out"
[ "$rc" -eq 0 ] || failed "EC_2P1 stream across the rebuild exited $rc"
n2=$(sed -n 's/^count //p' "$dir/stream2.out")
# The same object index holds the same bytes in both streams.
[ "${n2:-0}" -gt "${n:-0}" ] && n=$n2
grep -q "rebuild for pool map version [0-9]*: done" "$dir/loded.log" &&
	echo "ok   the engines say the rebuild is done" && pass=$((pass + 1)) ||
	failed "no rebuild done in loded.log"
# (Seed 4 was written by dops: EC_DOPS=1 lets its sizes be what its
# punches with a data member lost left, within the model's bound.)
C "EC_2P1 seed 2 reads back after the rebuild" verify "$a_addr" c21 EC_2P1 2 300
EC_DOPS=1 C "EC_2P1 seed 4 reads back after the rebuild" verify "$a_addr" c21 EC_2P1 4 300
C "the stream's objects read back after the rebuild" check "$a_addr" c21 EC_2P1 "${n:-1}"
C "the arrays ending on f: the same sizes after the rebuild" ends "$a_addr" c21 EC_2P1 5 check
snp_check " after the rebuild"
# Every member of snp's arrays, the rebuilt ones included, read alone: a
# rebuilt parity member is read by nothing above while every data member
# lives.
for s in 20 21 22; do
	C "snp seed $s: each member's cells as changed" cells "$a_addr" snp EC_2P1 $s 300
done
EC_EPOCH=$s1 C "snp seed 21: each member's cells as the snapshot saw them" \
	cells "$a_addr" snp EC_2P1 21 150
EC_EPOCH=$s1 check "... the snapshot's cells are not the changed ones" 1 \
	"$client" cells "$a_addr" snp EC_2P1 20 300
# The rebuilt cells end where the arrays did: every size, the snapshot's
# too, the same as read degraded.
snp_sizes "$dir/sizes.rebuilt"
if paste -d' ' "$dir/sizes.degraded" "$dir/sizes.rebuilt" |
	awk 'NF != 8 || $1 != "sizes" { exit 1 } { for (i = 2; i <= 4; i++) if ($(i + 4) != $i) exit 1 }'; then
	echo "ok   snp's array sizes after the rebuild are the ones read degraded"
	pass=$((pass + 1))
else
	failed "snp's sizes changed in the rebuild: $(paste -d' ' "$dir/sizes.degraded" "$dir/sizes.rebuilt")"
fi

# ---- a second failure: the reads need the rebuilt cells ----
kill -9 "${epid[e]}"
wait "${epid[e]}" 2>/dev/null
wait_state "killed e is DOWN" 4 DOWN 10
C "EC_2P1 seed 2 reads back, e dead, f rebuilt" verify "$a_addr" c21 EC_2P1 2 300
EC_DOPS=1 C "EC_2P1 seed 4 reads back, e dead, f rebuilt" verify "$a_addr" c21 EC_2P1 4 300
C "the stream's objects read back, e dead, f rebuilt" check "$a_addr" c21 EC_2P1 "${n:-1}"
C "the arrays ending on f, e dead, f rebuilt" ends "$a_addr" c21 EC_2P1 5 check
snp_check ", e dead, f rebuilt"
check "the files read back, e dead, f rebuilt" 0 diff -r -x g "$dir/src" "$mnt/tree"
check "the file written degraded too" 0 cmp "$dir/src/f1048577" "$mnt/tree/g"
check "unmount" 0 fusermount3 -u "$mnt"
checks_done
