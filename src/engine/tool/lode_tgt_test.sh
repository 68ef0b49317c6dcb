#!/usr/bin/env bash
# lode-tgt end to end: a file goes in and comes back byte for byte, listing
# and status work, and bad input gets a clear error and the right exit code.
set -u
bin=$1
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-tgt-test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fails=0
pass=0
check() { # check NAME EXPECTED_RC COMMAND...
	local name=$1 want=$2 got
	shift 2
	"$@" >"$dir/out" 2>"$dir/err"
	got=$?
	if [ "$got" -ne "$want" ]; then
		echo "FAIL $name: exit $got, expected $want"; cat "$dir/err"; fails=$((fails + 1))
	else
		pass=$((pass + 1))
	fi
}
t=$dir/tgt
head -c 3000000 /dev/urandom >"$dir/in"

check help 0 "$bin" --help
grep -q "usage: lode-tgt" "$dir/out" || { echo "FAIL help text"; fails=$((fails + 1)); }
check not-a-target 1 "$bin" "$t" status
grep -q "is not a target" "$dir/err" || { echo "FAIL not-a-target message"; fails=$((fails + 1)); }
check init 0 "$bin" "$t" init
check init-again 0 "$bin" "$t" init
check put 0 "$bin" "$t" put default f1 "$dir/in"
check get 0 "$bin" "$t" get default f1 "$dir/back"
cmp -s "$dir/in" "$dir/back" || { echo "FAIL round trip differs"; fails=$((fails + 1)); }
check put-stdin 0 sh -c "'$bin' '$t' put default f2 < '$dir/in'"
check get-stdout 0 sh -c "'$bin' '$t' get default f2 > '$dir/back2'"
cmp -s "$dir/in" "$dir/back2" || { echo "FAIL stdin/stdout round trip differs"; fails=$((fails + 1)); }
check ls 0 "$bin" "$t" ls default
[ "$(wc -l <"$dir/out")" -eq 2 ] || { echo "FAIL ls lists $(wc -l <"$dir/out") objects, expected 2"; fails=$((fails + 1)); }
check missing-object 1 "$bin" "$t" get default nope
grep -q "no such object" "$dir/err" || { echo "FAIL missing-object message"; fails=$((fails + 1)); }
check unknown-command 2 "$bin" "$t" frobnicate
check missing-args 2 "$bin" "$t" put default
check bad-container-name 1 "$bin" "$t" cont create "a-name-longer-than-sixteen-bytes"
check unknown-container 1 "$bin" "$t" ls nosuch
grep -q "no such container" "$dir/err" || { echo "FAIL unknown-container message"; fails=$((fails + 1)); }
check cont-create 0 "$bin" "$t" cont create second
check cont-create-twice 1 "$bin" "$t" cont create second
check aggregate 0 "$bin" "$t" aggregate default
check status-json 0 "$bin" --json "$t" status
grep -q '"containers":2' "$dir/out" || { echo "FAIL status json: $(cat "$dir/out")"; fails=$((fails + 1)); }
check get-after-aggregate 0 "$bin" "$t" get default f1 "$dir/back3"
cmp -s "$dir/in" "$dir/back3" || { echo "FAIL data changed by aggregation"; fails=$((fails + 1)); }
check bad-capacity 2 "$bin" --capacity lots "$t" status
echo "$pass passed, $fails failed"
[ "$fails" -eq 0 ]
