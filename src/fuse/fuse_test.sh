#!/usr/bin/env bash
# lode-fuse end to end against a real loded over TCP: the command line
# (help, usage errors, mounts that cannot happen), bytes written and read
# back through the kernel, directories, the mount xattr, a clean unmount on
# SIGTERM, and a server that dies under a mount (I/O fails, nothing hangs,
# the daemon lives on) and comes back (the same mount serves again).
#
# usage: fuse_test.sh LODED LODE LODE_FUSE
# Exits 77 (skipped) where FUSE cannot be used.
set -u
loded=$1
lode=$2
lfuse=$3
export UCX_NET_DEVICES=lo

if [ ! -c /dev/fuse ] || [ ! -r /dev/fuse ] || [ ! -w /dev/fuse ]; then
	echo "SKIP: /dev/fuse is missing or not usable here"
	exit 77
fi
if ! command -v fusermount3 >/dev/null; then
	echo "SKIP: fusermount3 is not installed"
	exit 77
fi

mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-fuse-test.XXXXXX")
dir=$(realpath "$dir")
chmod 755 "$dir" # another user must reach the mount inside
mnt=$dir/mnt
mkdir "$mnt"
pid=  # loded
fpid= # a lode-fuse run in the foreground by this script

mounted() { # mounted: the fstype and source of the mount at $mnt, if any
	awk -v m="$mnt" '$5 == m { for (i = 7; i <= NF; i++) if ($i == "-") { print $(i + 1), $(i + 2); exit } }' \
		/proc/self/mountinfo
}
unmount() {
	if [ -n "$(mounted)" ]; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
	fi
}
cleanup() {
	exec 5<&- # the descriptor kept across loded's restart, if still open
	unmount
	if [ -n "$fpid" ]; then
		kill "$fpid" 2>/dev/null
		wait "$fpid" 2>/dev/null
	fi
	if [ -f "$dir/fuse.pid" ]; then
		kill "$(cat "$dir/fuse.pid")" 2>/dev/null
	fi
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	# never through a mount that is still there
	[ -z "$(mounted)" ] && rm -rf --one-file-system "$dir"
}
trap cleanup EXIT

nbad=0
ngood=0
bad() { # bad WHAT: one bad expectation
	echo "FAIL $*"
	nbad=$((nbad + 1))
}
# expect WANT NAME COMMAND...: run COMMAND (output kept in $dir/out and
# $dir/err) and complain unless it exits with WANT
expect() {
	local want=$1 name=$2 rc
	shift 2
	"$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	if [ "$rc" = "$want" ]; then
		ngood=$((ngood + 1))
		return 0
	fi
	bad "$name: exit status $rc instead of $want"
	sed 's/^/    stderr: /' "$dir/err"
	return 1
}
# said NAME REGEX: the last command wrote one line, "lode-fuse: ..." matching REGEX
said() {
	if [ "$(wc -l <"$dir/err")" != 1 ] || ! grep -q "^lode-fuse: .*$2" "$dir/err"; then
		bad "$1: wanted one line matching '$2', got:"
		sed 's/^/    stderr: /' "$dir/err"
	fi
}
wait_for() { # wait_for SECONDS COMMAND...: true as soon as COMMAND is
	local n=$(($1 * 10))
	shift
	while [ "$n" -gt 0 ]; do
		"$@" && return 0
		sleep 0.1
		n=$((n - 1))
	done
	return 1
}
not_mounted() { [ -z "$(mounted)" ]; }
is_mounted() { [ -n "$(mounted)" ]; }
# gone PID: exited (a zombie waiting for its reaper, pid 1, counts: that can take seconds here)
gone() {
	local st
	st=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
	[ -z "$st" ] || [ "$st" = Z ]
}
log_tail() { [ -f "$dir/fuse.log" ] && tail -20 "$dir/fuse.log" | sed 's/^/    log: /'; }

# ---- a loded of our own, on a port nobody answers on ----
. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/loded.sh"
loded_start --targets 2 --transport tcp # disk targets: the data outlives a kill
"$lode" --addr "$addr" cont create c1 >/dev/null || { echo "FAIL cont create c1"; exit 1; }
F() { "$lfuse" --addr "$addr" --transport tcp "$@"; }

# ---- the command line ----
expect 0 help "$lfuse" --help
for o in --addr --transport --timeout -f --pidfile attr_timeout=S entry_timeout=S \
	negative_timeout=S cache=auto writeback pollers=N max_idle_threads=N allow_other; do
	grep -q -- "$o" "$dir/out" || bad "help does not mention $o"
done
expect 0 version "$lfuse" --version
grep -q "^lode-fuse [0-9]" "$dir/out" || bad "version: $(cat "$dir/out")"
expect 2 no-args "$lfuse"
said no-args "missing CONTAINER and MOUNTPOINT"
expect 2 one-arg "$lfuse" c1
said one-arg "missing MOUNTPOINT"
expect 2 three-args "$lfuse" c1 "$mnt" extra
said three-args "too many arguments"
expect 2 unknown-option "$lfuse" --frob c1 "$mnt"
said unknown-option "unknown option '--frob'"
expect 2 bad-transport "$lfuse" --transport pigeon c1 "$mnt"
said bad-transport "--transport needs"
expect 2 bad-timeout "$lfuse" --timeout soon c1 "$mnt"
expect 2 missing-addr "$lfuse" c1 "$mnt" --addr
expect 2 bad-cache "$lfuse" -o cache=sometimes c1 "$mnt"
said bad-cache "cache needs none, auto or always"
expect 2 bad-attr-timeout "$lfuse" -o attr_timeout=-1 c1 "$mnt"
expect 2 bad-threads "$lfuse" -o max_idle_threads=0 c1 "$mnt"
expect 2 bad-pollers "$lfuse" -o pollers=65 c1 "$mnt"
said bad-pollers "pollers needs a count, 0 to 64"
expect 2 bad-pollers-word "$lfuse" -o pollers=some c1 "$mnt"
expect 2 subtype "$lfuse" -o subtype=other c1 "$mnt"
# an option neither lode-fuse nor libfuse knows, found before any connection
expect 2 bad-kernel-opt "$lfuse" --addr 127.0.0.1:1 -o frobnicate c1 "$mnt"
said bad-kernel-opt "bad mount options: .*frobnicate"

# ---- mounts that cannot happen: exit 1, one line, nothing mounted ----
expect 1 no-mountpoint F c1 "$dir/nowhere"
said no-mountpoint "mountpoint .*nowhere: No such file or directory"
touch "$dir/plain"
expect 1 file-mountpoint F c1 "$dir/plain"
said file-mountpoint "Not a directory"
expect 1 no-container F nosuch "$mnt"
said no-container "container nosuch at $addr: no such container"
expect 1 no-server "$lfuse" --addr 127.0.0.1:1 --transport tcp c1 "$mnt"
said no-server "container c1 at 127.0.0.1:1: "
not_mounted || bad "a bad mount left $(mounted) at $mnt"

# ---- mount: the exit status says "mounted" ----
# as root, let other users in, so that the kernel's own permission checks can be seen
others=()
[ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && others=(-o allow_other)
expect 0 mount F --pidfile "$dir/fuse.pid" --log "$dir/fuse.log" "${others[@]}" c1 "$mnt"
[ "$(mounted)" = "fuse.lode lode:c1" ] || bad "mountinfo shows '$(mounted)', not 'fuse.lode lode:c1'"
daemon=$(cat "$dir/fuse.pid" 2>/dev/null)
[ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null || bad "no daemon from the pidfile ('$daemon')"
expect 1 busy F c1 "$mnt"
said busy "already a mount point"

# ---- bytes through the kernel ----
echo hello >"$mnt/hello" || bad "write hello"
[ "$(cat "$mnt/hello" 2>&1)" = hello ] || bad "read hello: '$(cat "$mnt/hello" 2>&1)'"
printf ' world' >>"$mnt/hello" || bad "append"
[ "$(cat "$mnt/hello")" = "hello
 world" ] || bad "after append: '$(cat "$mnt/hello")'"
head -c $((3 << 20 | 4321)) /dev/urandom >"$dir/big"
cp "$dir/big" "$mnt/big" || bad "cp big"
cmp "$dir/big" "$mnt/big" || bad "big differs after cp"
[ "$(stat -c %s "$mnt/big")" = $((3 << 20 | 4321)) ] || bad "size of big: $(stat -c %s "$mnt/big")"
dd if="$dir/big" of="$mnt/big2" bs=1M iflag=fullblock status=none || bad "dd 1 MiB blocks"
dd if="$mnt/big2" of="$dir/big2" bs=1M status=none || bad "dd read back"
cmp "$dir/big" "$dir/big2" || bad "big2 differs"
# a write into an existing file, across a chunk boundary
printf 'XYZ' | dd of="$mnt/big" bs=1 seek=$(((1 << 20) - 1)) conv=notrunc status=none
printf 'XYZ' | dd of="$dir/big" bs=1 seek=$(((1 << 20) - 1)) conv=notrunc status=none
cmp "$dir/big" "$mnt/big" || bad "big differs after an overwrite across chunks"
truncate -s 10 "$mnt/big" || bad "truncate"
[ "$(stat -c %s "$mnt/big")" = 10 ] || bad "size after truncate: $(stat -c %s "$mnt/big")"
cmp -n 10 "$dir/big" "$mnt/big" || bad "bytes after truncate"

# ---- directories and names ----
mkdir "$mnt/d" || bad "mkdir"
touch "$mnt/d/b" "$mnt/d/a" || bad "touch in d"
[ "$(ls "$mnt/d" | tr '\n' ' ')" = "a b " ] || bad "ls d: $(ls "$mnt/d" | tr '\n' ' ')"
[ "$(ls -a "$mnt/d" | tr '\n' ' ')" = ". .. a b " ] || bad "ls -a d: $(ls -a "$mnt/d" | tr '\n' ' ')"
rmdir "$mnt/d" 2>/dev/null && bad "rmdir of a non-empty directory succeeded"
mv "$mnt/d/a" "$mnt/d/c" || bad "mv"
[ -e "$mnt/d/a" ] && bad "mv left the old name"
ln -s ../hello "$mnt/d/link" || bad "symlink"
[ "$(readlink "$mnt/d/link")" = ../hello ] || bad "readlink: $(readlink "$mnt/d/link")"
[ "$(head -c 5 "$mnt/d/link")" = hello ] || bad "read through the symlink"
ln "$mnt/hello" "$mnt/d/hard" || bad "link"
[ "$(stat -c %h "$mnt/hello")" = 2 ] || bad "link count: $(stat -c %h "$mnt/hello")"
rm "$mnt/d/hard" "$mnt/d/b" "$mnt/d/c" "$mnt/d/link" || bad "rm"
rmdir "$mnt/d" || bad "rmdir"
[ -e "$mnt/d" ] && bad "rmdir left d"
# more entries than one readdir reply holds, plain and with attributes
mkdir "$mnt/many"
for i in $(seq -w 1 400); do : >"$mnt/many/file-$i"; done
[ "$(ls "$mnt/many" | wc -l)" = 400 ] || bad "ls many: $(ls "$mnt/many" | wc -l) entries"
[ "$(ls -f "$mnt/many" | sort | uniq | wc -l)" = 402 ] || bad "ls -f many: not 402 distinct names"
[ "$(ls -l "$mnt/many" | grep -c ' file-')" = 400 ] || bad "ls -l many"
# chmod, and permissions checked for another user (default_permissions)
chmod 600 "$mnt/hello" && [ "$(stat -c %a "$mnt/hello")" = 600 ] || bad "chmod"
if [ ${#others[@]} -gt 0 ]; then
	nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
	nobody cat "$mnt/hello" >/dev/null 2>&1 && bad "nobody read a mode 600 file of root's"
	chmod 644 "$mnt/hello"
	[ "$(nobody cat "$mnt/hello" 2>&1)" = "hello
 world" ] || bad "nobody cannot read a mode 644 file: $(nobody cat "$mnt/hello" 2>&1)"
	nobody sh -c "echo x >> '$mnt/hello'" 2>/dev/null && bad "nobody appended to a mode 644 file"
	# a setuid file anyone may write: the write clears setuid, as on any Linux file system
	echo s >"$mnt/suid" && chmod 4777 "$mnt/suid"
	nobody sh -c "echo t >> '$mnt/suid'" || bad "nobody cannot write a mode 4777 file"
	[ "$(cat "$mnt/suid")" = "s
t" ] || bad "suid file: $(cat "$mnt/suid")"
	sleep 1.1 # past attr_timeout
	[ "$(stat -c %a "$mnt/suid")" = 777 ] || bad "setuid kept after a write by nobody: $(stat -c %a "$mnt/suid")"
	nobody chmod 777 "$mnt/suid" 2>/dev/null && bad "nobody changed the mode of root's file"
	rm -f "$mnt/suid"
fi

# ---- the mount xattr, and the invalidation hook ----
if command -v getfattr >/dev/null; then
	[ "$(getfattr --only-values -n user.lode.mount "$mnt" 2>/dev/null)" = "$addr c1" ] ||
		bad "user.lode.mount: '$(getfattr --only-values -n user.lode.mount "$mnt" 2>&1)'"
	getfattr -d -m - "$mnt" 2>/dev/null | grep -q user.lode.mount && bad "listxattr shows user.lode.mount"
	setfattr -n user.lode.mount -v x "$mnt" 2>/dev/null && bad "user.lode.mount could be set"
	setfattr -n user.lode.invalidate -v 1 "$mnt/hello" || bad "user.lode.invalidate"
	getfattr -n user.lode.invalidate "$mnt/hello" >/dev/null 2>&1 && bad "user.lode.invalidate was stored"
	setfattr -n user.color -v blue "$mnt/hello" || bad "setfattr user.color"
	[ "$(getfattr --only-values -n user.color "$mnt/hello" 2>/dev/null)" = blue ] || bad "getfattr user.color"
	[ "$(cat "$mnt/hello")" = "hello
 world" ] || bad "after invalidate: '$(cat "$mnt/hello")'"
else
	echo "note: getfattr is not installed; xattr checks skipped"
fi

# ---- SIGTERM to the daemon: unmounted, gone, pidfile removed ----
kill -TERM "$daemon"
wait_for 20 gone "$daemon" || bad "the daemon is still running 20 s after SIGTERM"
not_mounted || bad "still mounted after SIGTERM: $(mounted)"
[ -e "$dir/fuse.pid" ] && bad "the pidfile outlived the daemon"

# ---- in the foreground: the data is still there; SIGTERM exits 0 ----
# (served by libfuse's thread pool this time: -o pollers=0)
"$lfuse" --addr "$addr" --transport tcp -f -o pollers=0 c1 "$mnt" >"$dir/fg.log" 2>&1 &
fpid=$!
wait_for 20 is_mounted || bad "the foreground mount did not appear"
[ "$(cat "$mnt/hello" 2>&1)" = "hello
 world" ] || bad "hello after remount: '$(cat "$mnt/hello" 2>&1)'"
cmp "$dir/big2" "$mnt/big2" || bad "big2 after remount"
kill -TERM "$fpid"
wait "$fpid"
rc=$?
fpid=
[ "$rc" = 0 ] || { bad "foreground lode-fuse exited $rc after SIGTERM"; sed 's/^/    /' "$dir/fg.log"; }
not_mounted || bad "still mounted after SIGTERM in the foreground"

# ---- the server dies: I/O fails with an error, the daemon lives ----
# requests to a dead server must fail within seconds, not the default 10
expect 0 mount-2 env LODE_TIMEOUT_MS=3000 "$lfuse" --addr "$addr" --transport tcp \
	-o pollers=4 -o cache=none --pidfile "$dir/fuse.pid" --log "$dir/fuse.log" c1 "$mnt"
daemon=$(cat "$dir/fuse.pid" 2>/dev/null)
[ "$(cat "$mnt/hello" 2>&1)" = "hello
 world" ] || bad "hello on the second mount"
exec 5<"$mnt/hello" # kept open across the server's death and return
kill -KILL "$pid"
wait "$pid" 2>/dev/null
pid=
start=$SECONDS
fails_io() { # fails_io NAME COMMAND...: COMMAND fails with an I/O error, within 2 minutes
	local name=$1 rc
	shift
	timeout 120 "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	if [ "$rc" = 0 ] || [ "$rc" = 124 ]; then
		bad "$name: exit status $rc"
	elif ! grep -Eq "Input/output error|Transport endpoint is not connected" "$dir/err"; then
		bad "$name: not an I/O error: $(cat "$dir/err")"
	else
		ngood=$((ngood + 1))
	fi
}
fails_io read-dead cat "$mnt/hello"
fails_io create-dead sh -c "echo x > '$mnt/new'"
fails_io mkdir-dead mkdir "$mnt/newdir"
[ $((SECONDS - start)) -lt 60 ] || bad "failing took $((SECONDS - start)) s"
kill -0 "$daemon" 2>/dev/null || { bad "the daemon died with the server"; log_tail; }

# ---- the server comes back: the same mount serves again ----
# loded on the same address and data; the daemon's connections connect it
# again on their own, and a file it had open reads on.
loded_restart 5<&- || { bad "loded did not restart"; tail -20 "$dir/loded.log"; }
# first the descriptor, before anything opens the file again (cache=none:
# its reads reach the daemon; a failed read does not move its offset)
fd5_reads() { [ "$(cat <&5 2>/dev/null)" = "hello
 world" ]; }
if wait_for 30 fd5_reads; then
	ngood=$((ngood + 1))
else
	bad "the descriptor opened before the kill does not read on within 30 s of the restart"
	log_tail
fi
exec 5<&-
hello_back() { [ "$(cat "$mnt/hello" 2>/dev/null)" = "hello
 world" ]; }
if wait_for 30 hello_back; then
	ngood=$((ngood + 1))
else
	bad "hello did not read back through the mount within 30 s of the restart: $(cat "$mnt/hello" 2>&1)"
fi
# each of the daemon's connections (one per poller) comes back on its own:
# a create may meet one that has not yet
back_made() { sh -c "echo back > '$mnt/back'" 2>/dev/null && [ "$(cat "$mnt/back" 2>&1)" = back ]; }
if wait_for 30 back_made; then
	ngood=$((ngood + 1))
else
	bad "no file could be made and read back within 30 s of the restart"
fi

# ---- fusermount3 -u: unmounted, and the daemon exits ----
expect 0 fusermount fusermount3 -u "$mnt"
wait_for 20 gone "$daemon" || bad "the daemon is still running 20 s after fusermount3 -u"
not_mounted || bad "still mounted after fusermount3 -u"

# a sanitizer's report from a detached daemon lands only in its log
if grep -Eq "Sanitizer|runtime error" "$dir/fuse.log" "$dir/fg.log" 2>/dev/null; then
	bad "a sanitizer reported in the daemon's log:"
	grep -hE -A20 "Sanitizer|runtime error" "$dir/fuse.log" "$dir/fg.log" | head -60
fi

echo "$ngood passed, $nbad failed"
if [ "$nbad" -ne 0 ]; then
	log_tail
fi
[ "$nbad" -eq 0 ]
