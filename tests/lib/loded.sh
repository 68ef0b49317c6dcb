# Sourced by the shell tests: start a real loded on a free loopback port.
#
# loded_start [LODED ARGS...]: needs $loded and $lode (the binaries) and $dir
# (a scratch directory: data goes to $dir/data, the log to $dir/loded.log).
# Tries up to 5 random ports; sets pid and addr once `lode status` answers
# there. If none comes up it prints the last log and exits 1.
#
# The management service's first start writes the admin's credentials to
# $dir/admin.credentials; LODE_CREDENTIALS points every client there.
loded_start() {
	local port try _
	addr=
	export LODE_CREDENTIALS=$dir/admin.credentials
	for try in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 12000)) # below the ephemeral range
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			continue # something answers there already
		fi
		"$loded" --listen "127.0.0.1:$port" --path "$dir/data" --admin-cred "$LODE_CREDENTIALS" \
			"$@" >"$dir/loded.log" 2>&1 &
		pid=$!
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break # it exited (port taken after all?)
			if "$lode" --addr "127.0.0.1:$port" --timeout 2000 status >/dev/null 2>&1; then
				addr=127.0.0.1:$port
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
