#!/usr/bin/env bash
# The `lode` command end to end against a real loded over TCP: every
# command once, data round trips compared byte for byte, and bad input
# checked for its exit status (2 usage, 1 failure) and one-line message.
#
# usage: lode_cli_test.sh LODED LODE
set -u
loded=$1
lode=$2
export UCX_NET_DEVICES=lo
mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-cli-test.XXXXXX")
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/check.sh"
# check_err NAME PATTERN: stderr is exactly one line, "lode: ...", matching PATTERN
check_err() {
	if [ "$(wc -l <"$dir/err")" -ne 1 ] || ! grep -q "^lode: .*$2" "$dir/err"; then
		failed "$1: stderr is not one line matching '$2':"
		sed 's/^/    /' "$dir/err"
	fi
}
same() { # same NAME A B: files A and B are byte-for-byte equal
	cmp -s "$2" "$3" || failed "$1: $2 and $3 differ"
}

# ---- start loded on a free port ----
. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/loded.sh"
loded_start --ram --transport tcp
L() { "$lode" --addr "$addr" "$@"; }

# ---- the address found with no --addr: the file make up writes ----
mkdir -p "$dir/xs/lode" "$dir/home/.local/state/lode"
echo "$addr" >"$dir/xs/lode/addr"
echo "127.0.0.1:1" >"$dir/home/.local/state/lode/addr"
check addr-xdg 0 env -u LODE_ADDR -u LODE_ADDR_FILE HOME="$dir/home" XDG_STATE_HOME="$dir/xs" \
	"$lode" status
check addr-home 1 env -u LODE_ADDR -u LODE_ADDR_FILE -u XDG_STATE_HOME HOME="$dir/home" \
	"$lode" --timeout 2000 status
grep -q "Connection refused" "$dir/err" || failed "addr-home: not refused at the address in HOME's file: $(cat "$dir/err")"

# ---- help, version, usage errors ----
check help 0 "$lode" --help
for c in status "cont create" "cont list" "cont destroy" "cont snap create" "cont snap list" \
	"cont snap destroy" "cont aggregate" "obj put" "obj get" "obj ls" "obj rm" "kv put" \
	"kv get" "kv ls" "kv rm" bench help; do
	grep -q "^  $c " "$dir/out" || failed "help does not list '$c'"
done
check help-cmd 0 "$lode" help obj put
grep -q "^usage: lode obj put CONT NAME" "$dir/out" || failed "help obj put: $(head -1 "$dir/out")"
check cmd-help 0 "$lode" kv get --help
grep -q "^usage: lode kv get CONT OBJ KEY" "$dir/out" || failed "kv get --help: $(head -1 "$dir/out")"
check version 0 "$lode" --version
grep -q "^lode [0-9][0-9.]*" "$dir/out" || failed "version: $(cat "$dir/out")"
check no-command 2 "$lode"
check unknown-command 2 L frobnicate
check unknown-subcommand 2 L obj frobnicate
check missing-subcommand 2 L cont
check missing-args 2 L obj put
check missing-args-2 2 L obj put c1
check too-many-args 2 L cont list extra
check unknown-option 2 L cont list --frob
check bad-transport 2 "$lode" --transport carrier-pigeon status
check bad-timeout 2 "$lode" --timeout soon status
check missing-addr 2 "$lode" --addr
check help-unknown 2 "$lode" help frobnicate

# ---- status ----
check status 0 L status
grep -q "^server *$addr\$" "$dir/out" || failed "status server line: $(head -1 "$dir/out")"
grep -q "^transport *tcp\$" "$dir/out" || failed "status transport line"
grep -q "RAM\$" "$dir/out" || failed "status does not show a RAM target"
check status-json 0 L status --json
grep -q '"transport":"tcp"' "$dir/out" || failed "status --json: $(cat "$dir/out")"
grep -q '"ram":true' "$dir/out" || failed "status --json ram: $(cat "$dir/out")"
# ---- the rdma transport: selectable everywhere, usable where the hardware is ----
# This loded offers tcp only, so asking for rdma (or shm) is refused in one line.
check rdma-not-offered 1 L --transport rdma status
check_err rdma-not-offered "Protocol not supported"
check shm-not-offered 1 L --transport shm status
if ucx_info -d 2>/dev/null | grep -Eq 'Transport: (rc|ud|dc)'; then
	echo "rdma devices present: loded --transport rdma must start"
	check loded-rdma-help 0 "$loded" --transport rdma --help
else
	# No RDMA device here: loded says so and exits 1 rather than serving nothing.
	check loded-rdma-absent 1 "$loded" --transport rdma --listen 127.0.0.1:1 \
		--path "$dir/rdma" --ram
	grep -q "transport rdma is not available on this host" "$dir/err" ||
		failed "loded --transport rdma: $(cat "$dir/err")"
fi
check connect-refused 1 "$lode" --addr 127.0.0.1:1 --timeout 2000 status
check_err connect-refused "connect to 127.0.0.1:1"

# ---- containers ----
check cont-create 0 L cont create c1
check cont-create-dup 1 L cont create c1
check_err cont-create-dup "container c1: "
check cont-create-2 0 L cont create c2
check cont-list 0 L cont list
printf 'c1\nc2\n' | cmp -s - "$dir/out" || failed "cont list: $(cat "$dir/out")"
check cont-destroy 0 L cont destroy c2
check cont-list-2 0 L cont list
printf 'c1\n' | cmp -s - "$dir/out" || failed "cont list after destroy: $(cat "$dir/out")"
check no-such-cont 1 L obj ls nosuch
check_err no-such-cont "container nosuch: no such container"
check cont-destroy-missing 1 L cont destroy nosuch
check_err cont-destroy-missing "no such container"

# ---- objects ----
head -c $((20 << 20)) /dev/urandom >"$dir/big"
head -c $((1 << 20)) /dev/urandom >"$dir/mid"
head -c 12345 /dev/urandom >"$dir/small"
: >"$dir/empty"
check put-big 0 L obj put c1 big "$dir/big"
check get-big 0 L obj get c1 big "$dir/big.out"
same get-big "$dir/big" "$dir/big.out"
ls "$dir" | grep -q 'lode-' && failed "get-big left a temporary file: $(ls "$dir")"
check put-stdin 0 sh -c "'$lode' --addr $addr obj put c1 small < '$dir/small'"
check get-stdout 0 sh -c "'$lode' --addr $addr obj get c1 small > '$dir/small.out'"
same stdin-stdout "$dir/small" "$dir/small.out"
check put-dash 0 sh -c "cat '$dir/mid' | '$lode' --addr $addr obj put c1 'dir/mid name' -"
check get-dash 0 sh -c "'$lode' --addr $addr obj get c1 'dir/mid name' - | cat > '$dir/mid.out'"
same pipe-round-trip "$dir/mid" "$dir/mid.out"
# more than one window of pieces in flight, an unaligned tail, size unknown up front
head -c $((41 << 20 | 7)) /dev/urandom >"$dir/huge"
check put-huge 0 sh -c "cat '$dir/huge' | '$lode' --addr $addr obj put c1 huge"
check get-huge 0 sh -c "'$lode' --addr $addr obj get c1 huge | cat > '$dir/huge.out'"
same huge-round-trip "$dir/huge" "$dir/huge.out"
check rm-huge 0 L obj rm c1 huge
# a shorter file over a longer one shrinks the object
check put-shorter 0 L obj put c1 big "$dir/small"
check get-shorter 0 L obj get c1 big "$dir/short.out"
same put-shorter "$dir/small" "$dir/short.out"
check put-empty 0 L obj put c1 empty "$dir/empty"
check get-empty 0 L obj get c1 empty "$dir/empty.out"
same put-empty "$dir/empty" "$dir/empty.out"
check put-missing-file 1 L obj put c1 x "$dir/does-not-exist"
check_err put-missing-file "No such file"
check obj-ls 0 L obj ls c1
printf '%12d  %s\n' 12345 big 1048576 'dir/mid name' 0 empty 12345 small | cmp -s - "$dir/out" ||
	failed "obj ls: $(cat "$dir/out")"
check obj-rm 0 L obj rm c1 small
check get-removed 1 L obj get c1 small "$dir/removed.out"
check_err get-removed "object small: No such file"
[ -e "$dir/removed.out" ] && failed "failed get left $dir/removed.out"
ls "$dir" | grep -q 'lode-' && failed "failed get left a temporary file: $(ls "$dir")"
check obj-rm-again 1 L obj rm c1 small
check_err obj-rm-again "object small: No such file"
check obj-ls-after-rm 0 L obj ls c1
grep -q ' small$' "$dir/out" && failed "obj ls still lists small: $(cat "$dir/out")"
grep -q ' big$' "$dir/out" || failed "obj ls lost big: $(cat "$dir/out")"

# ---- key-value ----
head -c 5000 /dev/urandom >"$dir/val"
check kv-put 0 L kv put c1 o1 k1 v1
check kv-put-stdin 0 sh -c "'$lode' --addr $addr kv put c1 o1 k2 - < '$dir/val'"
check kv-put-3 0 L kv put c1 o1 a0 "two words"
check kv-get 0 L kv get c1 o1 k1
printf 'v1' | cmp -s - "$dir/out" || failed "kv get k1: '$(cat "$dir/out")'"
check kv-get-bin 0 L kv get c1 o1 k2
same kv-get-bin "$dir/val" "$dir/out"
check kv-ls 0 L kv ls c1 o1
printf 'a0\nk1\nk2\n' | cmp -s - "$dir/out" || failed "kv ls: $(cat "$dir/out")"
check kv-rm 0 L kv rm c1 o1 k1
check kv-get-removed 1 L kv get c1 o1 k1
check_err kv-get-removed "key k1 of o1: No such file"
check kv-rm-again 1 L kv rm c1 o1 k1
check kv-ls-2 0 L kv ls c1 o1
printf 'a0\nk2\n' | cmp -s - "$dir/out" || failed "kv ls after rm: $(cat "$dir/out")"
check kv-ls-empty 0 L kv ls c1 nothing-here
[ -s "$dir/out" ] && failed "kv ls of an empty object: $(cat "$dir/out")"
check kv-empty-key 1 L kv put c1 o1 "" v

# ---- snapshots and aggregation ----
check snap-create 0 L cont snap create c1
epoch=$(cat "$dir/out")
[[ "$epoch" =~ ^[0-9]+$ ]] || failed "snap create printed '$epoch'"
check snap-list 0 L cont snap list c1
grep -qx "$epoch" "$dir/out" || failed "snap list lacks $epoch: $(cat "$dir/out")"
check snap-destroy 0 L cont snap destroy c1 "$epoch"
check snap-list-2 0 L cont snap list c1
grep -qx "$epoch" "$dir/out" && failed "snap list still has $epoch"
check snap-destroy-again 1 L cont snap destroy c1 "$epoch"
check_err snap-destroy-again "no such snapshot"
check snap-destroy-bad-epoch 2 L cont snap destroy c1 yesterday
check aggregate 0 L cont aggregate c1
check get-after-aggregate 0 L obj get c1 'dir/mid name' "$dir/mid.out2"
same get-after-aggregate "$dir/mid" "$dir/mid.out2"

# ---- bench is reachable (its own tests cover it) ----
check bench-help 0 L bench --help
check bench-crypt-block-bad 2 L bench --encrypt --crypt-block 3000
grep -q "^lode bench: --crypt-block: '3000' is not a power of two" "$dir/err" ||
	failed "bench-crypt-block-bad: $(cat "$dir/err")"
check bench-crypt-block-plain 2 L bench --crypt-block 64k
grep -q "^lode bench: --crypt-block needs --encrypt" "$dir/err" ||
	failed "bench-crypt-block-plain: $(cat "$dir/err")"
check bench-progress 0 L bench --cont pb --rw write --bs 4k --size 1M --runtime 2 --ceiling 0 \
	--json --progress 1
grep -q '^lode bench: 1 job running: 0 s of ramp, then 2 s measured$' "$dir/err" ||
	failed "bench-progress: no start line: $(cat "$dir/err")"
grep -qE '^lode bench: 1 s: [1-9][0-9]* I/Os done, [0-9]+ in the last second$' "$dir/err" ||
	failed "bench-progress: no line a second: $(cat "$dir/err")"
grep -q '"errors":0,' "$dir/out" || failed "bench-progress: $(cat "$dir/out")"
check bench-progress-bad 2 L bench --progress maybe
# --api posix: pread and pwrite on files in a directory, the same loop as --api fs
# (O_DIRECT by default, where the scratch file system takes it)
mkdir "$dir/pb"
direct=1
dd if=/dev/zero of="$dir/pb/probe" bs=4k count=1 oflag=direct status=none 2>/dev/null || direct=0
rm -f "$dir/pb/probe"
check bench-posix-write 0 L bench --api posix --dir "$dir/pb" --rw write --bs 4k --size 256k \
	--numjobs 2 --runtime 0 --ceiling 0 --verify 1 --json --direct "$direct"
grep -q "\"direct\":$([ "$direct" = 1 ] && echo true || echo false)," "$dir/out" ||
	failed "bench-posix-write: direct: $(cat "$dir/out")"
grep -q '"api":"posix"' "$dir/out" && grep -q '"ios":128,' "$dir/out" ||
	failed "bench-posix-write: $(cat "$dir/out")"
[ "$(stat -c %s "$dir/pb/job-0")" = 262144 ] && [ "$(stat -c %s "$dir/pb/job-1")" = 262144 ] ||
	failed "bench-posix-write: files: $(ls -l "$dir/pb")"
check bench-posix-read 0 L bench --api posix --dir "$dir/pb" --rw randread --bs 4k --size 256k \
	--numjobs 2 --runtime 1 --prefill 0 --ceiling 0 --verify 1 --json --direct "$direct"
grep -q '"verify_mismatches":0,' "$dir/out" ||
	failed "bench-posix-read: $(cat "$dir/out")"
# A changed byte is seen (a block of job 1 no longer holds its pattern).
printf 'XXXX' | dd of="$dir/pb/job-1" bs=1 seek=8192 conv=notrunc status=none
check bench-posix-mismatch 1 L bench --api posix --dir "$dir/pb" --rw read --bs 4k --size 256k \
	--numjobs 2 --runtime 0 --prefill 0 --ceiling 0 --verify 1 --direct "$direct"
grep -q "job 1: block 2 differs" "$dir/err" || failed "bench-posix-mismatch: $(cat "$dir/err")"
check bench-posix-nodir 1 L bench --api posix --dir "$dir/none" --rw read --ceiling 0
grep -q "open $dir/none/job-0 (O_DIRECT): No such file or directory" "$dir/err" ||
	failed "bench-posix-nodir: $(cat "$dir/err")"
check bench-posix-no-dir 2 L bench --api posix
grep -q "^lode bench: --api posix needs --dir" "$dir/err" || failed "bench-posix-no-dir: $(cat "$dir/err")"
check bench-posix-dir-alone 2 L bench --dir "$dir/pb"
grep -q "^lode bench: --dir is for --api posix" "$dir/err" ||
	failed "bench-posix-dir-alone: $(cat "$dir/err")"
check bench-posix-depth 2 L bench --api posix --dir "$dir/pb" --iodepth 4
check bench-posix-bs 2 L bench --api posix --dir "$dir/pb" --bs 1000
grep -q "^lode bench: --direct 1: --bs must be a multiple of 512" "$dir/err" ||
	failed "bench-posix-bs: $(cat "$dir/err")"
# With no Lode system at all the files are still measured (no server CPU).
check bench-posix-alone 0 "$lode" bench --addr 127.0.0.1:1 --api posix --dir "$dir/pb" --rw read \
	--bs 4k --size 256k --runtime 0 --prefill 0 --ceiling 0 --direct "$direct"
grep -q "no Lode system at 127.0.0.1:1" "$dir/err" && grep -q "^  server CPU    n/a" "$dir/out" &&
	grep -q "^connection: none" "$dir/out" || failed "bench-posix-alone: $(cat "$dir/err" "$dir/out")"

# ---- a destroyed container is gone ----
check cont-destroy-full 0 L cont destroy c1
check ls-destroyed 1 L obj ls c1
check_err ls-destroyed "no such container"

checks_done
