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
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/build/bin
state=${XDG_STATE_HOME:-$HOME/.local/state}/lode
mkdir -p "$state"
pidfile=$state/loded.pid

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	echo "Lode is already up (loded pid $(cat "$pidfile"), $(cat "$state/addr"))."
	"$bin/lode" status
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

echo "Lode is up: loded (pid $(cat "$pidfile")) serves $data${ram:+ (RAM)} on 127.0.0.1:$port."
echo
"$bin/lode" status | sed 's/^/  /'
cat <<MSG

Try:
  $bin/lode obj put default hello /etc/hostname
  $bin/lode obj get default hello
  $bin/lode kv put default settings color blue && $bin/lode kv get default settings color
  $bin/lode bench --rw randread --bs 4k --iodepth 32 --runtime 5
Log: $state/loded.log    Stop with: make down
MSG
