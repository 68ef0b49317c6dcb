#!/usr/bin/env bash
# lode-agent end to end against a real loded: a process with no credentials
# of its own works through the agent as the Lode user its uid maps to, and
# everything else is refused with a clear message and exit status:
#   - a node credential the service refuses, one others may read, one that
#     is not a node user's, a map that does not parse: the agent exits 1 at
#     start (and with --daemon, the caller sees it);
#   - a uid the map does not name (nobody, 65534), a request naming a user,
#     an oversized request: refused, logged, and the agent goes on serving;
#   - a silent peer does not hold up anyone else;
#   - an agent killed with SIGKILL: `lode status` fails at once, no hang;
#   - SIGTERM: exit 0, the socket and the pidfile removed; SIGHUP rereads
#     the map.
# `lode whoami` is not checked through the agent: it reads the credentials
# file itself (src/cli/admin.c) rather than asking liblode who it is.
#
# Needs root: uid 0 is the mapped user, and setpriv runs a command as nobody.
#
# usage: agent_test.sh LODED LODE LODE_AGENT
set -u
loded=$1
lode=$2
agent_bin=$3
export UCX_NET_DEVICES=lo
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	echo "SKIP: needs root and setpriv (maps uid 0, runs a command as nobody)"
	exit 77
fi
mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-agent-test.XXXXXX")
# nobody must reach the socket and have a HOME it can look into: a world-
# searchable directory of its own under /tmp (whose parents all are)
pub=$(mktemp -d /tmp/lode-agent-pub.XXXXXX)
chmod 755 "$pub"
mkdir -p "$pub/home"
chmod 755 "$pub/home"
sock=$pub/agent.sock
pid=
apid=
cleanup() {
	[ -n "$apid" ] && kill "$apid" 2>/dev/null
	[ -f "$dir/agent.pid" ] && kill "$(cat "$dir/agent.pid")" 2>/dev/null
	[ -f "$dir/fg.pid" ] && kill "$(cat "$dir/fg.pid")" 2>/dev/null
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$dir" "$pub"
}
trap cleanup EXIT
unset LODE_USER LODE_SECRET LODE_POOL LODE_MGMT LODE_TLS_CA LODE_ADDR LODE_ADDR_FILE \
	LODE_AGENT_SOCKET XDG_RUNTIME_DIR
export HOME=$dir/adminhome XDG_CONFIG_HOME=$dir/adminhome/.config
mkdir -p "$HOME"

. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/check.sh"
has() { # has NAME FILE PATTERN: a line of FILE matches the extended regex PATTERN
	grep -Eq -- "$3" "$2" || {
		failed "$1: no line matches '$3' in $2:"
		sed 's/^/    /' "$2"
	}
}
lacks() { # lacks NAME FILE PATTERN
	if grep -Eq -- "$3" "$2"; then
		failed "$1: a line matches '$3' in $2:"
		sed 's/^/    /' "$2"
	fi
}

# ---- loded, and as its administrator: a tenant, a user, a node user ----
. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/loded.sh"
loded_start --ram --transport tcp
A() { "$lode" --addr "$addr" "$@"; }
check tenant-create 0 A tenant create ta
check user-create 0 feed alice-secret A user create ta/alice --secret-stdin
check node-create 0 feed node-secret A user create system/node1 --node --secret-stdin
has node-create "$dir/out" "node1 .*yes"
check acl-set 0 A acl set default tenant:ta rw

# ---- the agent's files ----
cred=$dir/node.credentials
printf '# the node credential of this test\nuser: system/node1\nsecret: node-secret\n' >"$cred"
chmod 600 "$cred"
map=$dir/agent.map
printf '# uid 0 is alice of tenant ta; nobody else\n0: ta/alice\n' >"$map"
# run the agent in the foreground, with a 3 s timeout for whatever it waits on
AG() { timeout 20 "$agent_bin" --addr "$addr" --socket "$sock" --timeout 3000 "$@"; }

# ---- refusals at start ----
printf 'user: system/node1\nsecret: wrong-secret\n' >"$dir/bad.credentials"
chmod 600 "$dir/bad.credentials"
check start-wrong-secret 1 AG --cred "$dir/bad.credentials" --map "$map"
has start-wrong-secret "$dir/err" "^lode-agent: the management service at .* refuses the node credential of system/node1 in $dir/bad.credentials"
check start-wrong-secret-daemon 1 AG --daemon --cred "$dir/bad.credentials" --map "$map"
has start-wrong-secret-daemon "$dir/err" "refuses the node credential"
[ -e "$sock" ] && failed "start-wrong-secret: a socket was left at $sock"
printf 'user: ta/alice\nsecret: alice-secret\n' >"$dir/alice.credentials"
chmod 600 "$dir/alice.credentials"
check start-not-node 1 AG --cred "$dir/alice.credentials" --map "$map"
has start-not-node "$dir/err" "^lode-agent: ta/alice is not a node user"
cp "$cred" "$dir/open.credentials"
chmod 644 "$dir/open.credentials"
check start-cred-readable 1 AG --cred "$dir/open.credentials" --map "$map"
has start-cred-readable "$dir/err" "readable or writable by group or others \(mode 0644\): chmod 600 it"
check start-cred-missing 1 AG --cred "$dir/nothing" --map "$map"
has start-cred-missing "$dir/err" "^lode-agent: node credential $dir/nothing: No such file"
printf '0: alice\n' >"$dir/bad.map"
check start-bad-map 1 AG --cred "$cred" --map "$dir/bad.map"
has start-bad-map "$dir/err" "^lode-agent: map: $dir/bad.map:1: the Lode user must be TENANT/USER"
check start-no-map 2 AG --cred "$cred"
has start-no-map "$dir/err" "no --map FILE"
check start-bad-option 2 AG --cred "$cred" --map "$map" --max-clients 0
check help 0 "$agent_bin" --help
has help "$dir/out" "^usage: lode-agent "

# ---- serving ----
check start 0 AG --daemon --cred "$cred" --map "$map" --pidfile "$dir/agent.pid" \
	--log "$dir/agent.log"
[ -S "$sock" ] || failed "start: no socket at $sock"
[ "$(stat -c %a "$sock")" = 666 ] || failed "start: socket mode $(stat -c %a "$sock"), not 666"
kill -0 "$(cat "$dir/agent.pid" 2>/dev/null)" 2>/dev/null || failed "start: no live pid in the pidfile"
has start-log "$dir/agent.log" "lode-agent: serving $sock for 127\.0\.0\.1:[0-9]+ \(node user system/node1, 1 map entries\)"
check start-again 1 AG --cred "$cred" --map "$map"
has start-again "$dir/err" "another lode-agent serves $sock"

# a process with no credentials: no $LODE_CREDENTIALS, an empty HOME
mkdir -p "$dir/empty"
U() { env -u LODE_CREDENTIALS HOME="$dir/empty" XDG_CONFIG_HOME="$dir/empty/.config" \
	LODE_AGENT_SOCKET="$sock" "$lode" --addr "$addr" "$@"; }
check status 0 U status
check cont-create 0 U cont create c1
check kv-put 0 U kv put c1 o k v1
check kv-get 0 U kv get c1 o k
[ "$(cat "$dir/out")" = v1 ] || failed "kv get: '$(cat "$dir/out")', not v1"
check cont-query 0 U cont query c1
has cont-query "$dir/out" "^owner +tenant ta$"
check cont-query-admin 0 A cont query c1
has cont-query-admin "$dir/out" "^owner +tenant ta$"
has grant-log "$dir/agent.log" "granted uid 0 \(root\) pid [0-9]+ as ta/alice on pool default$"
# without the agent's socket, the same process has no credentials at all
check no-agent-socket 1 env -u LODE_CREDENTIALS LODE_AGENT_SOCKET="$pub/none.sock" \
	HOME="$dir/empty" XDG_CONFIG_HOME="$dir/empty/.config" "$lode" --addr "$addr" status
has no-agent-socket "$dir/err" "authentication failed"
# a pool that does not exist: the service's verdict, passed on
check pool-missing 1 env -u LODE_CREDENTIALS LODE_POOL=nosuch HOME="$dir/empty" \
	XDG_CONFIG_HOME="$dir/empty/.config" LODE_AGENT_SOCKET="$sock" "$lode" --addr "$addr" status
has pool-missing "$dir/agent.log" "refused uid 0 \(root\) pid [0-9]+ as ta/alice on pool nosuch: the service says: no pool nosuch"

# nobody (uid 65534) is not in the map
N() { setpriv --reuid=65534 --regid=65534 --clear-groups env -u LODE_CREDENTIALS \
	HOME="$pub/home" XDG_CONFIG_HOME="$pub/home/.config" LODE_AGENT_SOCKET="$sock" \
	"$lode" --addr "$addr" "$@"; }
check nobody-status 1 N status
has nobody-status "$dir/err" "^lode: connect to $addr \\(uid 65534 \\(nobody\\) has no Lode user on this node.*\\): Permission denied$"
check nobody-pool-list 1 N pool list
has nobody-log "$dir/agent.log" "refused uid 65534 \(nobody\) pid [0-9]+: no Lode user for it in $map"
lacks nobody-log "$dir/agent.log" "granted uid 65534"

# the raw protocol: what liblode never sends
P() { /usr/bin/python3 - "$sock" "$@" <<'PY'
import socket, struct, sys, time
path, what = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(path)
def field(num, data):  # a length-delimited protobuf field
    return bytes([num << 3 | 2, len(data)]) + data
if what == "user":      # a ConnectRequest naming a user: refused
    body = field(1, b"system/admin") + field(3, b"default")
    s.sendall(struct.pack("<I", len(body)) + body)
elif what == "big":     # a length over the limit: refused unread
    s.sendall(struct.pack("<I", 1 << 20))
elif what == "garbage": # not a protobuf message
    body = b"\xff\xff\xff\xff"
    s.sendall(struct.pack("<I", len(body)) + body)
elif what == "silent":  # says nothing: dropped after the agent's wait
    t = time.time()
    hdr = s.recv(4)
    print("closed after %.1f s, %d bytes" % (time.time() - t, len(hdr)))
    sys.exit(0)
hdr = b""
while len(hdr) < 4:
    more = s.recv(4 - len(hdr))
    if not more:
        sys.exit("closed without a reply")
    hdr += more
n = struct.unpack("<I", hdr)[0]
data = b""
while len(data) < n:
    data += s.recv(n - len(data))
print("status %d: %s" % (data[0], data[1:].decode(errors="replace")))
PY
}
check raw-user 0 P user
has raw-user "$dir/out" "^status 3: only the pool may be set: the agent says who you are$"
check raw-big 0 P big
has raw-big "$dir/out" "^status 3: a request over 4096 bytes$"
check raw-garbage 0 P garbage
has raw-garbage "$dir/out" "^status 3: the request is not a ConnectRequest$"
# a silent peer holds its own thread only: others are served meanwhile
P silent >"$dir/silent.out" 2>&1 &
silent=$!
sleep 0.5
start=$(date +%s%N)
check status-beside-silent 0 U status
took=$((($(date +%s%N) - start) / 1000000))
[ "$took" -lt 4000 ] || failed "status-beside-silent: took $took ms beside a silent peer"
wait "$silent"
has silent "$dir/silent.out" "^closed after [45]\.[0-9] s, 0 bytes$"
has silent-log "$dir/agent.log" "dropped uid 0 \(root\) pid [0-9]+: no whole request in time"
# many at once
jobs=
for i in 1 2 3 4 5 6 7 8; do
	U status >"$dir/par.$i" 2>&1 &
	jobs="$jobs $!"
done
bad=0
for job in $jobs; do
	wait "$job" || bad=$((bad + 1))
done
[ "$bad" = 0 ] && { echo "ok   parallel-status (8 at once)"; pass=$((pass + 1)); } ||
	failed "parallel-status: $bad of 8 failed: $(cat "$dir"/par.*)"

# SIGHUP rereads the map: nobody becomes alice too (a control-plane command,
# which needs no data-plane transport across users)
printf '0: ta/alice\nnobody: ta/alice\n' >"$map"
kill -HUP "$(cat "$dir/agent.pid")"
for _ in $(seq 50); do
	grep -q "SIGHUP: reread" "$dir/agent.log" && break
	sleep 0.1
done
has sighup-log "$dir/agent.log" "SIGHUP: reread $map \(2 entries\)"
check nobody-after-sighup 0 N cont query c1
has nobody-after-sighup "$dir/out" "^owner +tenant ta$"
printf '0 ta/alice\n' >"$map"
kill -HUP "$(cat "$dir/agent.pid")"
sleep 0.5
has sighup-bad-log "$dir/agent.log" "SIGHUP: kept the old map: $map:1: expected"
check status-after-bad-sighup 0 U status

# ---- the agent killed: a clear error at once, not a hang ----
kill -KILL "$(cat "$dir/agent.pid")"
sleep 0.2
[ -S "$sock" ] || failed "kill: the socket file should outlive a SIGKILLed agent"
start=$(date +%s%N)
check status-agent-dead 1 U status
took=$((($(date +%s%N) - start) / 1000000))
has status-agent-dead "$dir/err" "^lode: connect to $addr \\(lode-agent at .* is not running.*\\): authentication failed"
[ "$took" -lt 3000 ] || failed "status-agent-dead: took $took ms"
rm -f "$dir/agent.pid"

# ---- a new agent replaces the stale socket; SIGTERM removes it ----
printf '0: ta/alice\n' >"$map"
"$agent_bin" --addr "$addr" --socket "$sock" --cred "$cred" --map "$map" \
	--pidfile "$dir/fg.pid" >"$dir/fg.log" 2>&1 &
apid=$!
for _ in $(seq 100); do
	grep -q "serving" "$dir/fg.log" 2>/dev/null && break
	sleep 0.1
done
check status-new-agent 0 U status
kill -TERM "$apid"
wait "$apid"
rc=$?
apid=
[ "$rc" = 0 ] && { echo "ok   sigterm (exit 0)"; pass=$((pass + 1)); } || failed "sigterm: exit $rc"
[ -e "$sock" ] && failed "sigterm: the socket $sock is still there"
[ -e "$dir/fg.pid" ] && failed "sigterm: the pidfile is still there"
has sigterm-log "$dir/fg.log" "signal Terminated: stopped accepting"
has sigterm-log "$dir/fg.log" "lode-agent: stopped$"
check status-no-agent 1 U status
has status-no-agent "$dir/err" "authentication failed"

checks_done
