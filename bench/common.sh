# shellcheck shell=bash
# bench/common.sh: what the benchmark drivers (bench/net/run.sh,
# bench/fs/run.sh, bench/eval/run.sh) share. Sourced, never run.
#
# Starting and stopping loded, finding a free loopback port, taking FUSE
# mounts down: each driver used to carry its own copy of these; one copy
# lives here so that a fix (a longer start-up wait, a stuck unmount) reaches
# every driver. Functions print their complaints on stderr, prefixed with
# $BENCH_PROG (the sourcing script's name), and return non-zero; the caller
# decides whether that ends the run.
#
# State: bench_loded_start sets BENCH_LODED_PID; bench_loded_stop clears it.
# One loded at a time per driver.

BENCH_PROG=${BENCH_PROG:-$(basename "$0")}
BENCH_LODED_PID=

bench_free_port() { # print a TCP port on 127.0.0.1 that nobody holds now
	# loded binds it a moment later: a race that only a busy machine could
	# lose, and then loded says so and the run stops.
	"${BENCH_PYTHON:-python3}" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

bench_need() { # bench_need TOOL...: fail (2) naming the first missing tool
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || {
			echo "$BENCH_PROG: $t is needed (scripts/install-deps.sh installs it)" >&2
			return 2
		}
	done
}

# bench_loded_start LODED LODE ADDR LOG [LODED_ARG...]: start
# `LODED --listen ADDR LODED_ARG...` in the background, its output in LOG,
# and wait (30 s at most) until `LODE --addr ADDR status` answers. Returns 1,
# with the log on stderr, if loded exits or does not answer; it is then
# stopped. LODE_CREDENTIALS, when the caller exported it, is what `status`
# connects with.
bench_loded_start() {
	local loded=$1 lode=$2 addr=$3 log=$4
	shift 4
	if [ -n "$BENCH_LODED_PID" ]; then
		echo "$BENCH_PROG: a loded (pid $BENCH_LODED_PID) is already running" >&2
		return 1
	fi
	"$loded" --listen "$addr" "$@" >"$log" 2>&1 &
	BENCH_LODED_PID=$!
	for _ in $(seq 1 300); do
		if ! kill -0 "$BENCH_LODED_PID" 2>/dev/null; then
			echo "$BENCH_PROG: loded exited before serving; its log:" >&2
			cat "$log" >&2
			wait "$BENCH_LODED_PID" 2>/dev/null || true
			BENCH_LODED_PID=
			return 1
		fi
		"$lode" --addr "$addr" status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$BENCH_PROG: loded did not answer 'lode status' within 30 s; its log:" >&2
	cat "$log" >&2
	bench_loded_stop
	return 1
}

bench_loded_stop() { # SIGTERM the loded bench_loded_start started; SIGKILL after 10 s
	local pid=$BENCH_LODED_PID
	[ -n "$pid" ] || return 0
	BENCH_LODED_PID=
	kill -0 "$pid" 2>/dev/null || {
		wait "$pid" 2>/dev/null || true
		return 0
	}
	kill -TERM "$pid" 2>/dev/null || true
	# loded drains what is in flight and exits; give it 10 s.
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "$BENCH_PROG: loded did not stop on SIGTERM; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

bench_unmount() { # bench_unmount DIR...: take down the FUSE mounts among DIRs
	local m
	for m in "$@"; do
		if mountpoint -q "$m" 2>/dev/null; then
			fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null ||
				umount -l "$m" 2>/dev/null || true
		fi
	done
}
