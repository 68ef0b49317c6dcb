#!/usr/bin/env bash
# `make up`: start a one-node Lode from this checkout, in the background,
# with a default container, and say how to use it.
#
#   RAM=1          targets on tmpfs (/dev/shm) instead of ./lode-data
#   TARGETS=n      number of targets (default 1)
#   LODE_PORT=p    listen port (default 7420; the next free one if taken)
#   LODE_DATA=dir  where the targets live
#
# loded writes its address to ~/.local/state/lode/addr, which is where
# build/bin/lode looks when it is given no --addr.
#
# The default container is also mounted at ./lode-mnt by lode-fuse (where
# /dev/fuse exists); the mountpoint and the daemon's pid and log are kept in
# the state directory, for `make down`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/build/bin
state=${XDG_STATE_HOME:-$HOME/.local/state}/lode
mkdir -p "$state"
pidfile=$state/loded.pid
mnt=$PWD/lode-mnt

# mount_fs: mount the default container at $mnt unless it already is; a
# mount whose daemon died is cleared first. Says nothing when all is well.
mount_fs() {
	local fstype
	rm -f "$state/mnt"
	if [ ! -c /dev/fuse ]; then
		echo "make up: /dev/fuse is missing, so the file system is not mounted at $mnt" >&2
		return 0
	fi
	mkdir -p "$mnt" 2>/dev/null || true # a dead mount there fails mkdir; handled below
	fstype=$(findmnt -rn -M "$mnt" -o FSTYPE 2>/dev/null || true)
	if [ -n "$fstype" ] && [ "$fstype" != fuse.lode ]; then
		echo "make up: $mnt is already a mount point ($fstype); not mounting there" >&2
		return 0
	elif [ -n "$fstype" ]; then
		if stat "$mnt" >/dev/null 2>&1; then
			echo "$mnt" >"$state/mnt"
			return 0 # already mounted and answering
		fi
		echo "make up: clearing a dead Lode mount at $mnt" >&2
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
	fi
	if "$bin/lode-fuse" --addr "$(cat "$state/addr")" --pidfile "$state/lode-fuse.pid" \
		--log "$state/lode-fuse.log" default "$mnt"; then
		echo "$mnt" >"$state/mnt"
	else
		echo "make up: the file system is not mounted at $mnt (the line above says why)" >&2
	fi
}

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	echo "Lode is already up (loded pid $(cat "$pidfile"), $(cat "$state/addr"))."
	"$bin/lode" status
	mount_fs
	if [ -f "$state/mnt" ]; then
		echo "The default container is mounted at $mnt."
	fi
	exit 0
fi

ram=()
data=${LODE_DATA:-$PWD/lode-data}
if [ "${RAM:-0}" = 1 ]; then
	data=${LODE_DATA:-/dev/shm/lode-$(id -u)}
	ram=(--ram)
fi
port=${LODE_PORT:-7420}
# Take the first free port from there: another program may hold 7420.
while (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
	port=$((port + 1))
done
rm -f "$state/addr"
nohup "$bin/loded" --listen "127.0.0.1:$port" --path "$data" --targets "${TARGETS:-1}" \
	"${ram[@]}" --pidfile "$pidfile" --addrfile "$state/addr" \
	>>"$state/loded.log" 2>&1 </dev/null &
echo "$data" >"$state/data"

for _ in $(seq 1 300); do
	[ -f "$state/addr" ] && "$bin/lode" status >/dev/null 2>&1 && break
	if ! kill -0 $! 2>/dev/null; then
		echo "make up: loded exited; the end of $state/loded.log says why:" >&2
		tail -n 5 "$state/loded.log" >&2
		exit 1
	fi
	sleep 0.1
done
if ! "$bin/lode" status >/dev/null 2>&1; then
	echo "make up: loded did not answer within 30 s; see $state/loded.log" >&2
	exit 1
fi
"$bin/lode" cont create default 2>/dev/null || true
"$bin/lode" cont list | grep -qx default
mount_fs

echo "Lode is up: loded (pid $(cat "$pidfile")) serves $data${ram:+ (RAM)} on 127.0.0.1:$port."
echo
"$bin/lode" status | sed 's/^/  /'
cat <<MSG

Try:
  $bin/lode obj put default hello /etc/hostname
  $bin/lode obj get default hello
  $bin/lode kv put default settings color blue && $bin/lode kv get default settings color
  $bin/lode bench --rw randread --bs 4k --iodepth 32 --runtime 5
MSG
if [ -f "$state/mnt" ]; then
	cat <<MSG
  echo hi > lode-mnt/hello; cat lode-mnt/hello    # the container as files (lode-fuse)
MSG
fi
cat <<MSG
Log: $state/loded.log    Stop with: make down
MSG
