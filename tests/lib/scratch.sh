# Sourced by the multi-engine shell tests: a scratch directory and a home
# of their own, and every process they start stopped at exit.
#
# scratch_setup NAME: makes $dir under $LODE_TEST_TMP (or /tmp), points
# HOME and XDG_CONFIG_HOME into it (nothing touches the real ~/.config),
# clears the LODE_* variables a user may have set, and installs an EXIT
# trap that stops $pid and every pid in the array pids (resuming stopped
# ones first) and removes $dir. When a check failed ($fails, from
# check.sh), the end of every log in $dir is printed first: a failure seen
# only under CI's load leaves its evidence in the test's output. With
# LODE_TEST_KEEP=1 a failed test's $dir is kept, and its path printed;
# with LODE_TEST_KEEP=all, every test's.
scratch_setup() {
	mkdir -p "${LODE_TEST_TMP:-/tmp}"
	dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-$1.XXXXXX")
	pid=
	pids=()
	trap scratch_cleanup EXIT
	export HOME=$dir/home XDG_CONFIG_HOME=$dir/xdg
	mkdir -p "$HOME"
	unset LODE_USER LODE_SECRET LODE_POOL LODE_MGMT LODE_TLS_CA LODE_ADDR LODE_ADDR_FILE
}

scratch_cleanup() {
	local p log
	for p in "${pids[@]}" $pid; do
		kill -CONT "$p" 2>/dev/null
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ "${fails:-0}" -ne 0 ]; then
		for log in "$dir"/*.log; do
			[ -f "$log" ] || continue
			echo "---- the end of ${log##*/}"
			tail -40 "$log"
		done
	fi
	if [ "${LODE_TEST_KEEP:-0}" = all ] || { [ "${LODE_TEST_KEEP:-0}" = 1 ] && [ "${fails:-0}" -ne 0 ]; }; then
		echo "---- kept $dir"
		return
	fi
	rm -rf "$dir"
}
