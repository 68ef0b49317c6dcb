#!/usr/bin/env bash
# `make up`: bring up a one-node Lode from this checkout, ready to use.
#
# Today Lode is its storage engine: this creates (or recovers) one target
# with a default container under ./lode-data, file-backed, or on tmpfs with
# RAM=1. When loded exists, this script starts it here.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/bin
data=${LODE_DATA:-$PWD/lode-data}
ram=()
if [ "${RAM:-0}" = 1 ]; then
	data=${LODE_DATA:-/dev/shm/lode-$(id -u)}
	ram=(--ram)
fi
tgt=$data/tgt0
mkdir -p "$data"
echo "$tgt ${ram[*]:-}" >"$data/.up" # what make down undoes
"$bin/lode-tgt" "${ram[@]}" "$tgt" init default
echo
echo "Lode is up: one target at $tgt with container 'default'."
"$bin/lode-tgt" "${ram[@]}" "$tgt" status | sed 's/^/  /'
cat <<MSG

Try:
  $bin/lode-tgt ${ram[*]:+${ram[*]} }$tgt put default hello /etc/hostname
  $bin/lode-tgt ${ram[*]:+${ram[*]} }$tgt get default hello
  $bin/lode-engine-bench --help
Stop with: make down
MSG
