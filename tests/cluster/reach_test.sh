#!/usr/bin/env bash
# A container or a snapshot is made on every engine the pool map has
# serving, or not at all (docs/decisions/0014). Three engines on loopback;
# engine 1 is stopped (SIGSTOP) for less than the grace period, so the map
# keeps it UP while it answers nobody. A client that connects meanwhile
# never reaches it: creating a container or a snapshot then fails with
# -EHOSTDOWN and leaves nothing made (before, both went ahead without
# engine 1, which never got them, and every write placed there failed with
# -LODE_ENOCONT once it answered again). Once engine 1 answers, the same
# container is made and objects of every class read back.
#
# usage: reach_test.sh LODED LODE PLACE_CLIENT
set -u
loded=$1
lode=$2
client=$3
export UCX_NET_DEVICES=lo
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup reach-test

. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

# A long grace: engine 1 must stay UP while it is stopped (15-25 s
# here), however slow the machine.
cluster_of_three 2 60000
check "container base" 0 A cont create base --class RP_3

kill -STOP "$b_pid"
# Short timeouts: the client's connect waits this long for engine 1's
# bootstrap, each creation's try 2 s at most.
export LODE_TIMEOUT_MS=3000
check "container and snapshot refused while engine 1 does not answer" 0 \
	"$client" unreached "$a_addr" base gap
cat "$dir/out"
check "lode cont create says why" 1 A cont create gap2
grep -q "an engine the pool map has serving does not answer" "$dir/err" ||
	failed "lode cont create's error: $(cat "$dir/err")"
sed 's/^/    /' "$dir/err"
check "lode cont snap create says why" 1 A cont snap create base
grep -q "an engine the pool map has serving does not answer" "$dir/err" ||
	failed "lode cont snap create's error: $(cat "$dir/err")"
sed 's/^/    /' "$dir/err"
wait_state "engine b is still UP while stopped" 1 UP 1
kill -CONT "$b_pid"
unset LODE_TIMEOUT_MS
check "snapshots of base" 0 A cont snap list base
[ -s "$dir/out" ] && failed "a refused snapshot is listed: $(cat "$dir/out")"
check "cont list" 0 A cont list
grep -qw "gap2\?" "$dir/out" && failed "a refused container is listed: $(cat "$dir/out")"
check "the refused container is made once engine 1 answers" 0 A cont create gap --class RP_3
check "objects of every class read back" 0 "$client" rw "$a_addr" gap 20
check "a snapshot of base" 0 A cont snap create base
checks_done
