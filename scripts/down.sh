#!/usr/bin/env bash
# `make down`: stop what `make up` started. loded drains what is in flight
# and exits; the data stays (a later `make up` recovers it). PURGE=1 also
# deletes the data.
set -euo pipefail
cd "$(dirname "$0")/.."
state=${XDG_STATE_HOME:-$HOME/.local/state}/lode
pidfile=$state/loded.pid
data=$(cat "$state/data" 2>/dev/null || true)

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	pid=$(cat "$pidfile")
	kill -TERM "$pid"
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "make down: loded did not stop within 30 s; killing it" >&2
		kill -KILL "$pid"
	fi
	echo "Lode is down."
else
	echo "make down: nothing is up"
fi
rm -f "$pidfile" "$state/addr"
if [ "${PURGE:-0}" = 1 ] && [ -n "$data" ]; then
	rm -rf "$data"
	rm -f "$state/data"
	echo "Removed $data."
elif [ -n "$data" ]; then
	echo "Data kept in $data (PURGE=1 removes it)."
fi
