#!/usr/bin/env bash
# Erasure-coded writes on full targets (src/client/ec_io.c): three engines
# of one small RAM target each, an EC_2P1 container. A file that fits is
# stored and read back; one larger than the pool's space fails with ENOSPC,
# and says so; what was stored before still reads back, byte for byte; the
# engines keep serving; and the failed put removes what it wrote, so its
# space comes back (aggregation on a full target) and a new file is stored.
#
# usage: ec_full_test.sh LODED LODE
set -u
loded=$1
lode=$2
export UCX_NET_DEVICES=lo LODE_TIMEOUT_MS=8000
. "$(dirname "${BASH_SOURCE[0]}")/../lib/scratch.sh"
scratch_setup ec-full-test
. "$(dirname "${BASH_SOURCE[0]}")/../lib/check.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"

cap=24M
cluster_host --ram --transport tcp --targets 1 --capacity "$cap" --heartbeat-ms 200 --grace-ms 3000
loded_join b --targets 1 --capacity "$cap"
b_pid=$jpid
pids+=("$b_pid")
loded_join c --targets 1 --capacity "$cap"
c_pid=$jpid
pids+=("$c_pid")
wait_state "engine b joins UP" 1 UP 10
wait_state "engine c joins UP" 2 UP 10
check "container of class EC_2P1" 0 A cont create full --class EC_2P1

head -c $((8 << 20)) /dev/urandom >"$dir/fits"
head -c $((80 << 20)) /dev/urandom >"$dir/big"
head -c $((6 << 20)) /dev/urandom >"$dir/after"
check "a file that fits is stored" 0 A obj put full fits "$dir/fits"
check "a file larger than the pool fails" 1 A obj put full big "$dir/big"
cp "$dir/err" "$dir/big.err"
check "... with ENOSPC" 0 grep -qi "no space" "$dir/big.err"
cat "$dir/big.err"
check "the file stored before reads back" 0 A obj get full fits "$dir/fits.back"
check "... byte for byte" 0 cmp "$dir/fits" "$dir/fits.back"
for p in "$b_pid" "$c_pid"; do
	check "engine $p still runs" 0 kill -0 "$p"
done
check "the failed object is not listed" 1 A obj get full big "$dir/big.back"
# What the failed put wrote is punched (lode obj put): without that, its
# space would stay used and this put would keep failing.
ok=1
for _ in $(seq 20); do
	A obj put full after "$dir/after" >"$dir/out" 2>&1 && ok=0 && break
	sleep 0.5
done
check "with the failed object gone, a new file is stored" 0 test "$ok" = 0
check "and reads back" 0 A obj get full after "$dir/after.back"
check "... byte for byte" 0 cmp "$dir/after" "$dir/after.back"
check "the first file still reads back" 0 A obj get full fits "$dir/fits.back2"
check "... byte for byte" 0 cmp "$dir/fits" "$dir/fits.back2"
checks_done
