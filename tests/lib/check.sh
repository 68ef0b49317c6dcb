# Sourced by the shell tests: count checks and say which failed.
#
# Needs $dir (scratch: each command's stdout goes to $dir/out, its stderr to
# $dir/err) and, when a loded runs, $pid and $dir/loded.log. Sets fails and
# pass; end a test with checks_done.

fails=0
pass=0

failed() { # failed WHAT: count and say which check failed
	echo "FAIL $*"
	fails=$((fails + 1))
}

check() { # check NAME EXPECTED_RC COMMAND...: stdout in $dir/out, stderr in $dir/err
	local name=$1 want=$2 got
	shift 2
	"$@" >"$dir/out" 2>"$dir/err"
	got=$?
	if [ -n "${pid:-}" ] && ! kill -0 "$pid" 2>/dev/null; then
		# every later check would fail for the same reason
		echo "FAIL $name: loded died (exit $got, expected $want); the end of its log:"
		tail -20 "$dir/loded.log"
		sed 's/^/    stderr: /' "$dir/err"
		exit 1
	fi
	if [ "$got" -ne "$want" ]; then
		failed "$name: exit $got, expected $want"
		sed 's/^/    /' "$dir/err" "$dir/out"
	else
		echo "ok   $name (exit $got)"
		pass=$((pass + 1))
	fi
}

feed() { # feed TEXT COMMAND...: run COMMAND with TEXT and a newline on stdin
	local text=$1
	shift
	printf '%s\n' "$text" | "$@"
}

bench_started() { # bench_started NAME ERRFILE PID: wait for `lode bench --progress 1`'s start
	local i
	for i in $(seq 600); do
		grep -q "job.* running" "$2" 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || break
		sleep 0.1
	done
	failed "$1: bench did not start its jobs: $(cat "$2")"
	return 1
}

checks_done() { # the summary line; the exit status says whether all passed
	echo "$pass passed, $fails failed"
	[ "$fails" -eq 0 ]
}
