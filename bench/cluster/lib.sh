# Sourced by bench/cluster/*.sh: a system of RAM-mode engines on loopback.
# Needs LODE, LODED, BENCH_PROG (bench/common.sh), and A (the first engine's
# address), dir (where logs go) and WORK (where data goes) when called.

PIDS=()
stop_all() { # stop every engine started
	local p
	for p in "${PIDS[@]}"; do
		BENCH_LODED_PID=$p
		bench_loded_stop
	done
	PIDS=()
	BENCH_LODED_PID=
}
state() { "$LODE" --addr "$A" --timeout 2000 system engines 2>/dev/null | awk -v id="$1" '$1 == id { print $3 }'; }
wait_state() { # wait_state ID STATE SECONDS
	for _ in $(seq 1 $(($3 * 50))); do
		[ "$(state "$1")" = "$2" ] && return 0
		sleep 0.02
	done
	echo "$BENCH_PROG: engine $1 is '$(state "$1")' after $3 s, expected $2" >&2
	return 1
}
start() { # start NAME ADDR LODED_ARG...: an engine with 2 RAM targets over tcp
	local name=$1 addr=$2
	shift 2
	BENCH_LODED_PID=
	bench_loded_start "$LODED" "$LODE" "$addr" "$dir/$name.log" --path "$WORK/$name" --ram \
		--capacity 2G --targets 2 --transport tcp "$@" || return 1
	PIDS+=("$BENCH_LODED_PID")
	BENCH_LODED_PID=
}
