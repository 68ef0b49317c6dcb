#!/usr/bin/env bash
# `make down`: stop what `make up` started. The file system mount goes
# first (its daemon exits once unmounted), then loded, which drains what is
# in flight and exits; the data stays (a later `make up` recovers it).
# PURGE=1 also deletes the data.
#
# Credentials stay either way: the CLI's (~/.config/lode/credentials, which
# `lode logout` removes) and the administrator's
# (~/.local/state/lode/admin.credentials), so a later `make up` finds the CLI
# still logged in. After PURGE=1 the management state they were good for is
# gone: the administrator's file goes with it, and the next `make up`, whose
# loded starts afresh, logs the CLI in again as a new default user.
set -euo pipefail
cd "$(dirname "$0")/.."
state=${XDG_STATE_HOME:-$HOME/.local/state}/lode
pidfile=$state/loded.pid
data=$(cat "$state/data" 2>/dev/null || true)

# ---- the lode-fuse mount ----
mnt=$(cat "$state/mnt" 2>/dev/null || true)
fusepid=$(cat "$state/lode-fuse.pid" 2>/dev/null || true)
if [ -n "$mnt" ] && [ -n "$(findmnt -rn -M "$mnt" -o FSTYPE 2>/dev/null || true)" ]; then
	# busy (a shell inside it): detach it lazily rather than fail
	fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt"
	echo "Unmounted $mnt."
fi
# the daemon exits by itself once unmounted; a pid reused by another program is left alone
if [ -n "$fusepid" ] && [ "$(cat "/proc/$fusepid/comm" 2>/dev/null)" = lode-fuse ]; then
	for _ in $(seq 1 100); do
		kill -0 "$fusepid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$fusepid" 2>/dev/null; then
		echo "make down: lode-fuse did not exit within 10 s of the unmount; stopping it" >&2
		kill -TERM "$fusepid"
		sleep 1
		kill -KILL "$fusepid" 2>/dev/null || true
	fi
fi
rm -f "$state/mnt" "$state/lode-fuse.pid"

# ---- loded ----

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
rm -f "$pidfile" "$state/addr" "$state/mgmt-addr"
if [ "${PURGE:-0}" = 1 ] && [ -n "$data" ]; then
	rm -rf "$data"
	rm -f "$state/data" "$state/admin.credentials"
	echo "Removed $data."
elif [ -n "$data" ]; then
	echo "Data kept in $data (PURGE=1 removes it)."
fi
cred=${XDG_CONFIG_HOME:-$HOME/.config}/lode/credentials
if [ -f "$cred" ]; then
	echo "The CLI's credentials stay in $cred (lode logout removes them)."
fi
