#!/usr/bin/env bash
# Unmodified tools over a lode-fuse mount: what people will do with a Lode
# file system first. A real loded (RAM, three targets) on a free port, one
# container, mounted with lode-fuse; then cp -a, tar, rsync, sqlite3, git
# and fio each do their usual work on it and the results are compared with
# the same work done outside (diff -r, listings of modes, sizes and times)
# or checked by the tool itself (PRAGMA integrity_check, git fsck, fio's
# crc32c verify). Every check prints one PASS or FAIL line; the script
# exits 1 if any failed, 77 (skipped) without /dev/fuse. The mount is
# always unmounted and loded killed on exit, whatever the exit.
#
# usage: tools_test.sh LODED LODE LODE_FUSE
set -u
if [ $# -ne 3 ]; then
	echo "usage: $0 LODED LODE LODE_FUSE" >&2
	exit 2
fi
loded=$1
lode=$2
lode_fuse=$3
if [ ! -c /dev/fuse ]; then
	echo "SKIP no /dev/fuse here"
	exit 77
fi
missing=
for t in fusermount3 mountpoint cp tar rsync sqlite3 git fio diff cmp find; do
	command -v "$t" >/dev/null || missing="$missing $t"
done
if [ -n "$missing" ]; then
	echo "FAIL not installed:$missing (scripts/install-deps.sh installs them)"
	exit 1
fi
export UCX_NET_DEVICES=lo
# git and the others must not read the invoking user's configuration.
export HOME GIT_CONFIG_NOSYSTEM=1 LC_ALL=C
mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-tools-test.XXXXXX")
chmod 755 "$dir"
HOME=$dir/home
mkdir -p "$HOME"
# Under make test's ASan build, two tests at once on two cores, one request
# was seen to wait past liblode's 10 s default and fail lode-fuse's channel
# for the rest of the run (every later call: ENOTCONN). This test is about
# the tools, not about timeouts (fault_test and fuse_test are): give
# requests a minute.
export LODE_TIMEOUT_MS=${LODE_TIMEOUT_MS:-60000}
mnt=$dir/mnt
pid=
mounted=

cleanup() {
	# An exit before the summary (a signal, or the shell itself failing
	# inside a step) says so, with the end of the step's output, before
	# the directory holding it goes.
	if [ -z "${summed:-}" ]; then
		echo "FAIL the script ended before its summary; the end of the step in progress:"
		[ -s "${log:-}" ] && tail -25 "$log" | sed 's/^/    /'
	fi >&3
	if [ -n "$mounted" ]; then
		local i
		for i in 1 2 3 4 5 6 7 8 9 10; do
			fusermount3 -u "$mnt" 2>/dev/null && break
			sleep 0.5
		done
		if mountpoint -q "$mnt" 2>/dev/null; then
			echo "cleanup: $mnt stays busy, unmounting lazily"
			fusermount3 -u -z "$mnt"
		fi
	fi
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	# Never remove through a mount that is still there.
	if ! mountpoint -q "$mnt" 2>/dev/null && [ -z "${LODE_TEST_KEEP:-}" ]; then
		rm -rf "$dir"
	fi
}
trap cleanup EXIT
# A trap runs with the redirections of the step it interrupts (into
# $log): what it says goes to the script's own output, kept on fd 3.
exec 3>&1
for sig in INT TERM HUP; do
	trap "echo 'FAIL tools_test got SIG$sig' >&3; exit 1" "$sig"
done

fails=0
passes=0
log=$dir/step.log
pass() {
	echo "PASS $*"
	passes=$((passes + 1))
}
fail() {
	echo "FAIL $*"
	fails=$((fails + 1))
}
# run NAME FUNCTION: one check; its output goes to a log printed only on failure.
run() {
	local name=$1 t0=$SECONDS
	shift
	if "$@" >"$log" 2>&1; then
		pass "$name ($((SECONDS - t0)) s)"
	else
		fail "$name ($((SECONDS - t0)) s); the end of its output:"
		tail -25 "$log" | sed 's/^/    /'
	fi
	if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
		echo "FAIL loded died; the end of its log:"
		tail -20 "$dir/loded.log"
		exit 1
	fi
	if ! mountpoint -q "$mnt"; then
		echo "FAIL the mount went away; the end of lode-fuse's log:"
		tail -20 "$dir/fuse.log"
		mounted=
		exit 1
	fi
}

# What a tree holds, one line per entry: path, type, mode, size, link target
# (a directory's size is the file system's business).
listing() {
	(cd "$1" && find . \( -type d -printf '%P %y %m\n' \) -o -printf '%P %y %m %s %l\n' | sort)
}
# The same with modification times of files and directories (not symlinks).
listing_times() {
	(cd "$1" && find . ! -type l -printf '%P %T@\n' | sort)
}
# same_tree A B: contents (symlinks compared as links) and the listing agree.
same_tree() {
	diff -r --no-dereference "$1" "$2" || return 1
	diff <(listing "$1") <(listing "$2") || return 1
}

# ---- start loded on a free port ----
. "$(dirname "${BASH_SOURCE[0]}")/../lib/loded.sh"
loded_start --ram --targets 3

if ! "$lode" --addr "$addr" cont create tools >"$log" 2>&1; then
	echo "FAIL lode cont create tools: $(cat "$log")"
	exit 1
fi
mkdir "$mnt"
mounted=1 # from here on, whatever lode-fuse says, the exit handler looks
if ! "$lode_fuse" --addr "$addr" --log "$dir/fuse.log" --pidfile "$dir/fuse.pid" \
	-o allow_other tools "$mnt" \
	>"$log" 2>&1; then
	echo "FAIL lode-fuse did not mount: $(cat "$log")"
	exit 1
fi
if ! mountpoint -q "$mnt"; then
	echo "FAIL lode-fuse exited 0 but $mnt is not a mount point"
	exit 1
fi
echo "mounted container 'tools' of $addr at $mnt"

# ---- a tree to copy: several sizes (up to > 1 MiB chunks), links, an empty dir ----
src=$dir/src
mkdir -p "$src/a/b/c" "$src/empty" "$src/with space"
for s in 0 1 4095 4096 65537 1048576 1048577 3145735; do
	head -c "$s" /dev/urandom >"$src/a/f$s"
done
head -c 2500000 /dev/urandom >"$src/a/b/c/deep"
echo "text" >"$src/with space/name with space"
ln -s f4096 "$src/a/rel-link"
ln -s b "$src/a/dir-link"
ln -s does-not-exist "$src/a/dangling"
chmod 600 "$src/a/f1"
chmod 755 "$src/a/f0"
chmod 750 "$src/a/b"
touch -d '2001-02-03 04:05:06.123456789' "$src/a/f65537"
touch -d '1999-12-31 23:59:59' "$src/a/b/c"

# ---- cp -a ----
check_cp() {
	cp -a "$src" "$mnt/cp" || return 1
	same_tree "$src" "$mnt/cp" || return 1
	# -a keeps modification times, to the nanosecond.
	diff <(listing_times "$src") <(listing_times "$mnt/cp")
}
run "cp -a, diff -r" check_cp

# ---- tar: create into the mount, extract on the mount ----
check_tar() {
	tar -C "$src" -cf "$mnt/tree.tar" . || return 1
	tar -tvf "$mnt/tree.tar" >/dev/null || return 1
	mkdir "$mnt/untar" || return 1
	tar -C "$mnt/untar" -xf "$mnt/tree.tar" || return 1
	same_tree "$src" "$mnt/untar" || return 1
	# What tar read back from the mount is what it wrote.
	cmp <(tar -C "$src" -cf - . | tar -tvf -) <(tar -tvf "$mnt/tree.tar")
}
run "tar c into the mount, tar x on the mount, diff -r" check_tar

# ---- rsync in and back; a second rsync has nothing to do ----
check_rsync() {
	rsync -a "$src/" "$mnt/rs/" || return 1
	same_tree "$src" "$mnt/rs" || return 1
	rsync -a "$mnt/rs/" "$dir/back/" || return 1
	same_tree "$src" "$dir/back" || return 1
	local again
	again=$(rsync -a --itemize-changes "$src/" "$mnt/rs/") || return 1
	if [ -n "$again" ]; then
		echo "the second rsync into the mount transferred:"
		echo "$again"
		return 1
	fi
	again=$(rsync -a --itemize-changes "$mnt/rs/" "$dir/back/") || return 1
	if [ -n "$again" ]; then
		echo "the second rsync out of the mount transferred:"
		echo "$again"
		return 1
	fi
}
run "rsync -a in and back, diff -r, second rsync empty" check_rsync

# ---- sqlite3: transactions, integrity, reopen ----
check_sqlite() {
	local db=$mnt/sql/test.db out i
	mkdir -p "$mnt/sql" || return 1
	sqlite3 "$db" "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, b BLOB);" || return 1
	{
		for i in $(seq 0 9); do
			echo "BEGIN;"
			echo "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000)"
			echo "  INSERT INTO t(id, v, b) SELECT $i * 1000 + x, 'row' || ($i * 1000 + x),"
			echo "  randomblob(100 + x % 300) FROM c;"
			echo "COMMIT;"
		done
	} | sqlite3 "$db" || return 1
	out=$(sqlite3 "$db" "PRAGMA integrity_check;") || return 1
	[ "$out" = ok ] || { echo "integrity_check: $out"; return 1; }
	out=$(sqlite3 "$db" "SELECT count(*) FROM t;") || return 1
	[ "$out" = 10000 ] || { echo "count: $out, want 10000"; return 1; }
	# Reopened by a new process: the rows are there, updates and deletes work.
	out=$(sqlite3 "$db" "SELECT v FROM t WHERE id = 7777;") || return 1
	[ "$out" = row7777 ] || { echo "row 7777: '$out'"; return 1; }
	sqlite3 "$db" "BEGIN; DELETE FROM t WHERE id % 2 = 0; UPDATE t SET v = 'odd'; COMMIT;" ||
		return 1
	out=$(sqlite3 "$db" "SELECT count(*), min(v), max(v) FROM t; PRAGMA integrity_check;") ||
		return 1
	[ "$out" = "$(printf '5000|odd|odd\nok')" ] || { echo "after update: $out"; return 1; }
	sqlite3 "$db" "VACUUM;" || return 1
	out=$(sqlite3 "$db" "PRAGMA integrity_check; SELECT count(*) FROM t;") || return 1
	[ "$out" = "$(printf 'ok\n5000')" ] || { echo "after vacuum: $out"; return 1; }
	# No journal left behind by a clean close.
	[ ! -e "$db-journal" ] || { echo "$db-journal remains"; return 1; }
}
run "sqlite3: 10k rows in transactions, integrity_check, reopen" check_sqlite

# A WAL database needs shared writable mmap of its -shm file.
check_sqlite_wal() {
	local db=$mnt/sql/wal.db out
	out=$(sqlite3 "$db" "PRAGMA journal_mode=WAL;") || return 1
	[ "$out" = wal ] || { echo "journal_mode: $out"; return 1; }
	sqlite3 "$db" "CREATE TABLE t(x); BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL
		SELECT x + 1 FROM c WHERE x < 5000) INSERT INTO t SELECT x FROM c; COMMIT;" ||
		return 1
	out=$(sqlite3 "$db" "PRAGMA integrity_check; SELECT count(*), sum(x) FROM t;") || return 1
	[ "$out" = "$(printf 'ok\n5000|12502500')" ] || { echo "wal: $out"; return 1; }
}
run "sqlite3 in WAL mode" check_sqlite_wal

# ---- git: clone into the mount, fsck, log, commit, gc ----
check_git() {
	local g=(git -c user.name=Lode -c user.email=lode@example.invalid -c init.defaultBranch=main)
	local origin=$dir/origin clone=$mnt/clone i
	"${g[@]}" init -q "$origin" || return 1
	for i in 1 2 3 4 5; do
		head -c $((i * 40000)) /dev/urandom | base64 >"$origin/file$i"
		echo "line $i" >>"$origin/README"
		"${g[@]}" -C "$origin" add -A || return 1
		"${g[@]}" -C "$origin" commit -q -m "commit $i" || return 1
	done
	"${g[@]}" clone -q "$origin" "$clone" || return 1
	"${g[@]}" -C "$clone" fsck --full --strict || return 1
	diff <("${g[@]}" -C "$origin" log --format='%H %s') \
		<("${g[@]}" -C "$clone" log --format='%H %s') || return 1
	diff -r --exclude=.git "$origin" "$clone" || return 1
	echo "changed in the mount" >>"$clone/README"
	"${g[@]}" -C "$clone" commit -q -a -m "commit in the clone" || return 1
	[ "$("${g[@]}" -C "$clone" log --oneline | wc -l)" = 6 ] || return 1
	[ -z "$("${g[@]}" -C "$clone" status --porcelain)" ] || return 1
	"${g[@]}" -C "$clone" gc -q || return 1
	"${g[@]}" -C "$clone" fsck --full --strict || return 1
	[ "$("${g[@]}" -C "$clone" log -1 --format=%s)" = "commit in the clone" ]
}
run "git clone into the mount, fsck, log, commit, gc" check_git

# ---- fio: writes then verifies every block (crc32c) ----
# fio_run NAME ARGS...: exit 0, err=0 in the summary, no verify complaint.
fio_run() {
	local name=$1 out
	shift
	mkdir -p "$mnt/fio"
	out=$(fio --name="$name" --directory="$mnt/fio" --verify=crc32c --do_verify=1 \
		--verify_fatal=1 --verify_state_save=0 "$@" 2>&1)
	local rc=$?
	echo "$out"
	[ $rc -eq 0 ] || { echo "fio exited $rc"; return 1; }
	echo "$out" | grep -q "err= 0" || { echo "no 'err= 0' in fio's summary"; return 1; }
	! echo "$out" | grep -qi "verify.*\(bad\|fail\|mismatch\)" || return 1
	rm -f "$mnt/fio/$name".*
}
run "fio psync random 4k writes, verify crc32c" \
	fio_run rand-psync --ioengine=psync --rw=randwrite --bs=4k --size=32m
run "fio io_uring random 4k writes, verify crc32c" \
	fio_run rand-uring --ioengine=io_uring --iodepth=16 --rw=randwrite --bs=4k --size=32m
run "fio psync sequential 1M writes, verify crc32c" \
	fio_run seq-psync --ioengine=psync --rw=write --bs=1m --size=64m
run "fio io_uring sequential 1M writes, verify crc32c" \
	fio_run seq-uring --ioengine=io_uring --iodepth=8 --rw=write --bs=1m --size=64m

# ---- the mount is still whole: everything written above reads back ----
check_final() {
	same_tree "$src" "$mnt/cp" && same_tree "$src" "$mnt/untar" && same_tree "$src" "$mnt/rs"
}
run "earlier copies unchanged at the end" check_final

# ---- a clean end: the mount goes, the daemon and loded exit cleanly ----
# (a sanitizer's report lands in the daemon's or loded's log: that fails too)
sanitizer_clean() {
	! grep -E "ERROR: (Address|Leak|Thread)Sanitizer|runtime error:" "$@"
}
# running PID: it exists and is not a zombie (an exited daemon waits for
# its reaper, pid 1, which can take seconds here).
running() {
	local st
	st=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null)
	[ -n "$st" ] && [ "$st" != Z ]
}
check_unmount() {
	local fpid i
	fpid=$(cat "$dir/fuse.pid" 2>/dev/null)
	fusermount3 -u "$mnt" || return 1
	mounted=
	for i in $(seq 100); do
		[ -n "$fpid" ] && running "$fpid" || break
		sleep 0.1
	done
	if [ -n "$fpid" ] && running "$fpid"; then
		echo "lode-fuse (pid $fpid) still runs 10 s after the unmount"
		return 1
	fi
	sanitizer_clean "$dir/fuse.log"
}
t0=$SECONDS
if check_unmount >"$log" 2>&1; then
	pass "fusermount3 -u, lode-fuse exits, its log clean ($((SECONDS - t0)) s)"
else
	fail "fusermount3 -u, lode-fuse exits, its log clean:"
	tail -25 "$log" | sed 's/^/    /'
fi
kill "$pid"
wait "$pid"
rc=$?
pid=
if [ "$rc" -eq 0 ] && sanitizer_clean "$dir/loded.log" >"$log" 2>&1; then
	pass "loded stops cleanly on SIGTERM, its log clean"
else
	fail "loded exit status $rc on SIGTERM, or its log has a sanitizer report:"
	tail -25 "$log" "$dir/loded.log" | sed 's/^/    /'
fi

summed=1
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
