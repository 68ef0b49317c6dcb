# Sourced by the shell tests: start a real loded on a free loopback port.
#
# loded_start [LODED ARGS...]: needs $loded and $lode (the binaries) and $dir
# (a scratch directory: data goes to $dir/data, the log to $dir/loded.log).
# Tries up to 5 random ports; sets pid and addr once `lode status` answers
# there. If none comes up it prints the last log and exits 1. It listens on
# $LODED_HOST (default 127.0.0.1).
#
# The management service's first start writes the admin's credentials to
# $dir/admin.credentials; LODE_CREDENTIALS points every client there.
loded_start() {
	local port try _ host=${LODED_HOST:-127.0.0.1}
	addr=
	loded_args=("$@")
	export LODE_CREDENTIALS=$dir/admin.credentials
	for try in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 12000)) # below the ephemeral range
		if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
			continue # something answers there already
		fi
		"$loded" --listen "$host:$port" --path "$dir/data" --admin-cred "$LODE_CREDENTIALS" \
			"$@" >"$dir/loded.log" 2>&1 &
		pid=$!
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break # it exited (port taken after all?)
			if "$lode" --addr "$host:$port" --timeout 2000 status >/dev/null 2>&1; then
				addr=$host:$port
				return 0
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		pid=
	done
	echo "FAIL no loded came up on any of 5 ports; the last one's log:"
	cat "$dir/loded.log"
	exit 1
}

# loded_restart: start loded again after loded_start's died, on the same
# address, data and arguments (its log appended to $dir/loded.log); sets
# pid once `lode status` answers. Fails (returns 1) after 10 s.
loded_restart() {
	local _
	"$loded" --listen "$addr" --path "$dir/data" --admin-cred "$LODE_CREDENTIALS" \
		"${loded_args[@]}" >>"$dir/loded.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 1
		"$lode" --addr "$addr" --timeout 2000 status >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

# cluster_host [LODED ARGS...]: loded_start the engine that hosts the
# management service of a multi-engine test; sets a_addr (its address) and
# mgmt (the service's, for loded_join), and defines A: the CLI against it.
cluster_host() {
	loded_start "$@"
	a_addr=$addr
	mgmt=$(sed -n 's/^mgmt: //p' "$LODE_CREDENTIALS")
	A() { "$lode" --addr "$a_addr" "$@"; }
}

# loded_join NAME [LODED ARGS...]: start an engine that joins the system
# whose management service is at $mgmt (its data in $dir/NAME, its log in
# $dir/NAME.log, RAM targets over tcp), logging in as $LODE_CREDENTIALS.
# Sets jpid and jaddr once `lode status` answers there; exits 1 with the
# log if it never does. It listens on $LODED_HOST (default 127.0.0.1) and
# runs under the words of $LODED_PREFIX, if any (e.g. "ip netns exec NS":
# then jpid is that command's).
loded_join() {
	local name=$1 port try _ host=${LODED_HOST:-127.0.0.1}
	local -a prefix
	read -r -a prefix <<<"${LODED_PREFIX:-}"
	shift
	for try in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 12000)) # below the ephemeral range
		(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && continue
		"${prefix[@]}" "$loded" --listen "$host:$port" --path "$dir/$name" --ram --transport tcp \
			--join "$mgmt" --join-cred "$LODE_CREDENTIALS" "$@" >>"$dir/$name.log" 2>&1 &
		jpid=$!
		jaddr=$host:$port
		for _ in $(seq 100); do
			kill -0 "$jpid" 2>/dev/null || break
			"$lode" --addr "$jaddr" --timeout 2000 status >/dev/null 2>&1 && return 0
			sleep 0.1
		done
		kill "$jpid" 2>/dev/null
		wait "$jpid" 2>/dev/null
	done
	echo "FAIL engine $name did not come up; its log:"
	cat "$dir/$name.log"
	exit 1
}

# engine_state ID: engine ID's state in `lode system engines`, as the
# engine at $a_addr (the service's host) reports it; nothing if unknown.
engine_state() {
	"$lode" --addr "$a_addr" system engines 2>/dev/null | awk -v id="$1" '$1 == id { print $3 }'
}

# wait_state NAME ID STATE SECONDS: a check (check.sh) named NAME that
# engine ID reaches STATE within SECONDS; on failure it shows every engine.
# Returns 0 when it did.
wait_state() {
	local i
	for i in $(seq $(($4 * 10))); do
		[ "$(engine_state "$2")" = "$3" ] && { echo "ok   $1"; pass=$((pass + 1)); return 0; }
		sleep 0.1
	done
	failed "$1: engine $2 is '$(engine_state "$2")', expected $3"
	"$lode" --addr "$a_addr" system engines
	return 1
}

# cluster_of_three TARGETS [GRACE_MS]: the usual three-engine cluster of
# the rebuild tests: cluster_host (RAM, tcp, TARGETS targets, heartbeats
# every 200 ms, DOWN after GRACE_MS, default 3 s), engines b and c joined
# (b_pid, c_pid, both in pids), and checks that both joined UP.
cluster_of_three() {
	cluster_host --ram --transport tcp --targets "$1" --heartbeat-ms 200 --grace-ms "${2:-3000}"
	loded_join b --targets "$1"
	b_pid=$jpid
	pids+=("$b_pid")
	loded_join c --targets "$1"
	c_pid=$jpid
	pids+=("$c_pid")
	wait_state "engine b joins UP" 1 UP 5
	wait_state "engine c joins UP" 2 UP 5
}
