#!/usr/bin/env bash
# `make down`: stop what `make up` started. Data stays in place (a later
# `make up` recovers it); pass PURGE=1 to delete it as well.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${LODE_DATA:-$PWD/lode-data}
[ -f "$data/.up" ] || data=/dev/shm/lode-$(id -u)
if [ ! -f "$data/.up" ]; then
	echo "make down: nothing is up"
	exit 0
fi
read -r tgt _ <"$data/.up"
# No daemon runs yet: a target is held only while a command uses it.
rm -f "$data/.up"
if [ "${PURGE:-0}" = 1 ]; then
	rm -rf "$data"
	echo "Lode is down; removed $data."
else
	echo "Lode is down; data kept in $tgt (PURGE=1 removes it)."
fi
