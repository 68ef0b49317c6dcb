#!/usr/bin/env bash
# The control-plane commands of `lode` end to end against a real loded:
# login and logout, whoami, pools, containers with properties, tenants,
# users, groups, ACLs, system status, the engines of the pool map (listed,
# and the refusals of exclude, drain and reintegrate on a single-engine
# system), key rotation, and restarts (the management service keeps its
# port, or takes another when it is taken). Every success path
# has its output checked; the refusals are checked for their exit status
# (1 failure, 2 usage) and their one-line message, and what a refused
# request would have changed is read back.
#
# Nothing here reads or writes the real ~/.config: HOME and
# XDG_CONFIG_HOME point into the scratch directory.
#
# usage: lode_admin_test.sh LODED LODE
set -u
loded=$1
lode=$2
export UCX_NET_DEVICES=lo
mkdir -p "${LODE_TEST_TMP:-/tmp}"
dir=$(mktemp -d "${LODE_TEST_TMP:-/tmp}/lode-admin-test.XXXXXX")
pid=
squatter=
cleanup() {
	[ -n "$squatter" ] && kill "$squatter" 2>/dev/null
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

export HOME=$dir/home XDG_CONFIG_HOME=$dir/xdg
mkdir -p "$HOME"
unset LODE_USER LODE_SECRET LODE_POOL LODE_MGMT LODE_TLS_CA LODE_ADDR LODE_ADDR_FILE
cred=$XDG_CONFIG_HOME/lode/credentials

. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/check.sh"
# check_err NAME PATTERN: stderr is exactly one line, "lode: ...", matching PATTERN
check_err() {
	if [ "$(wc -l <"$dir/err")" -ne 1 ] || ! grep -q "^lode: .*$2" "$dir/err"; then
		failed "$1: stderr is not one line matching '$2':"
		sed 's/^/    /' "$dir/err"
	fi
}
# check_usage NAME PATTERN: a usage error: "lode: ..." matching PATTERN, then the synopsis
check_usage() {
	if [ "$(wc -l <"$dir/err")" -ne 2 ] || ! head -1 "$dir/err" | grep -q "^lode: .*$2" ||
		! tail -1 "$dir/err" | grep -q "^usage: lode "; then
		failed "$1: stderr is not a usage error matching '$2':"
		sed 's/^/    /' "$dir/err"
	fi
}
# has NAME PATTERN: stdout has a line matching the extended regex PATTERN
has() {
	grep -Eq -- "$2" "$dir/out" || {
		failed "$1: no line matches '$2' in:"
		sed 's/^/    /' "$dir/out"
	}
}
# lacks NAME PATTERN: no line of stdout matches PATTERN
lacks() {
	if grep -Eq -- "$2" "$dir/out"; then
		failed "$1: a line matches '$2' in:"
		sed 's/^/    /' "$dir/out"
	fi
}

# ---- start loded on a free port (LODE_CREDENTIALS: its admin) ----
. "$(dirname "${BASH_SOURCE[0]}")/../../tests/lib/loded.sh"
loded_start --ram --transport tcp
admin_cred=$LODE_CREDENTIALS
A() { "$lode" --addr "$addr" "$@"; }                          # the system administrator
me() { env -u LODE_CREDENTIALS "$lode" --addr "$addr" "$@"; } # whoever lode login saved
B() { LODE_USER=t2/bob LODE_SECRET=bob-secret "$lode" --addr "$addr" "$@"; }
BOSS() { LODE_USER=t1/boss LODE_SECRET=boss-secret "$lode" --addr "$addr" "$@"; }
no_tty() { "$@" </dev/null; }

# ---- help and usage ----
check help 0 "$lode" --help
for c in login logout whoami "pool create" "pool list" "pool query" "pool destroy" \
	"cont create" "cont query" "tenant create" "tenant list" "tenant destroy" "user create" \
	"user list" "user revoke" "user restore" "user passwd" "group create" "group add" \
	"group remove" "group list" "acl set" "acl get" "system status" "system engines" \
	"system exclude" "system drain" "system reintegrate" "key rotate"; do
	grep -q "^  $c " "$dir/out" || failed "help does not list '$c'"
done
check help-pool-create 0 "$lode" help pool create
has help-pool-create "^usage: lode pool create NAME"
has help-pool-create "--size SIZE"
check pool-create-help 0 "$lode" pool create --help
has pool-create-help "^usage: lode pool create NAME"
check help-acl-set 0 "$lode" acl set -h
has help-acl-set "^RIGHTS "
check help-json 0 "$lode" help pool list
has help-json "--json"
check user-needs-sub 2 A user
check missing-args 2 A pool create
check_usage missing-args "pool create: missing arguments"
check too-many-args 2 A pool query a b
check unknown-option 2 A pool list --frob
check_usage unknown-option "unknown option --frob"
check option-no-value 2 A pool create p2 --size
check flag-with-value 2 A pool destroy p2 --force=yes
check no-json-here 2 A key rotate --json

# ---- the system administrator ----
check whoami-admin 0 A whoami
has whoami-admin "^user +system/admin$"
has whoami-admin "^tenant +system$"
has whoami-admin "^pool +default$"
has whoami-admin "^rights +rwa$"
has whoami-admin "^expires +[0-9]{4}-"
has whoami-admin "^credentials +$admin_cred$"
check whoami-json 0 A whoami --json
has whoami-json '"user":"system/admin".*"tenant":"system".*"rights":"rwa"'
check system-status 0 A system status
has system-status "^signing key +[0-9]+$"
has system-status "^pools +1$"
has system-status "^containers +0$"
has system-status "^capacity +"
has system-status "^engine 0: 127\.0\.0\.1:[0-9]+, UP$"
has system-status "^ +0 +UP .* RAM$"
key1=$(awk '/^signing key/ { print $3 }' "$dir/out")
check system-status-json 0 A system status --json
has system-status-json '"signing_key_id":[0-9]+'
has system-status-json '"engines":\[\{"id":0,'
has system-status-json '"state":"STATE_UP"'

# ---- the pool map: one engine, the host, which cannot be taken out ----
check help-exclude 0 "$lode" help system exclude
has help-exclude "^usage: lode system exclude ID"
check help-pool-query 0 "$lode" help pool query
has help-pool-query "--watch"
check system-engines 0 A system engines
has system-engines "^pool map version [0-9]+, heartbeat every 500 ms, DOWN after 3000 ms of silence$"
has system-engines "^ +id +address +state +targets +heartbeat$"
has system-engines "^ +0 +127\.0\.0\.1:[0-9]+ +UP +[0-9]+/[0-9]+ UP +host$"
check system-engines-json 0 A system engines --json
has system-engines-json '"engines":\[\{"id":0,"address":"127\.0\.0\.1:[0-9]+","state":"STATE_UP"'
check exclude-host 1 A system exclude 0
check_err exclude-host "exclude engine 0: engine 0 hosts the management service: it cannot be set DOWN$"
check drain-host 1 A system drain 0
check_err drain-host "drain engine 0: engine 0 hosts the management service: it cannot be set DRAIN$"
check reintegrate-host 1 A system reintegrate 0
check_err reintegrate-host "reintegrate engine 0: engine 0 is UP: it cannot go UP$"
check exclude-missing 1 A system exclude 7
check_err exclude-missing "exclude engine 7: no engine 7$"
check exclude-bad-id 2 A system exclude x1
check_usage exclude-bad-id "ID is an engine's id, a number like 1"
check exclude-negative-id 2 A system exclude -- -1
check_usage exclude-negative-id "not '-1'"
check exclude-huge-id 2 A system reintegrate 4294967296
check_usage exclude-huge-id "not '4294967296'"
check exclude-no-id 2 A system exclude
check_usage exclude-no-id "system exclude: missing arguments"
check system-engines-after 0 A system engines
has system-engines-after "^ +0 +127\.0\.0\.1:[0-9]+ +UP "
check pool-query-map 0 A pool query default
has pool-query-map "^pool map +version [0-9]+, 1 engine$"
has pool-query-map "^ +0 +127\.0\.0\.1:[0-9]+ +UP +[0-9]+/[0-9]+ UP +host$"
has pool-query-map "^rebuild +none has run$"
# Nothing is due: --watch shows it once and ends.
check pool-query-watch 0 timeout 20 "$lode" --addr "$addr" pool query default --watch
has pool-query-watch "^rebuild +none has run$"
check pool-query-watch-json 2 A pool query default --watch --json
check_usage pool-query-watch-json "--watch and --json do not go together"
check pool-query-map-json 0 A pool query default --json
has pool-query-map-json '"map":\{"version":[0-9]+,"engines":\[\{"id":0,'
has pool-query-map-json '"rebuild":\{'

# ---- pools ----
check pool-list 0 A pool list
has pool-list "^default +"
check pool-create 0 A pool create p1 --size 64M --targets 0
has pool-create "^pool +p1$"
has pool-create "^size +64\.0 MiB$"
has pool-create "^targets +0$"
has pool-create "^uuid +[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
check pool-create-dup 1 A pool create p1
check_err pool-create-dup "pool p1: pool p1 exists"
check pool-query 0 A pool query p1
has pool-query "^pool +p1$"
has pool-query "^containers +0$"
check pool-query-json 0 A pool query p1 --json
has pool-query-json '"label":"p1".*"size":67108864.*"targets":\[0\]'
check pool-list-2 0 A pool list
has pool-list-2 "^p1 +64\.0 MiB "
check pool-list-json 0 A pool list --json
has pool-list-json '"pools":\[\{"label":"default"'
check pool-query-missing 1 A pool query nosuch
check_err pool-query-missing "pool nosuch: no pool nosuch$"
check pool-bad-size 2 A pool create p2 --size 12X
check_usage pool-bad-size "--size needs a size"
check pool-bad-size-2 2 A pool create p2 --size=-1
check pool-bad-targets 2 A pool create p2 --targets 0,x
check pool-bad-targets-2 2 A pool create p2 --targets ,
check pool-no-such-target 1 A pool create p2 --targets 7
check_err pool-no-such-target "no target 7"
check pool-bad-name 1 A pool create "bad name"
check_err pool-bad-name "bad pool label"
check pool-destroy 0 A pool destroy p1
has pool-destroy "^Destroyed pool p1\.$"
check pool-list-3 0 A pool list
lacks pool-list-3 "^p1 "
check pool-destroy-missing 1 A pool destroy p1
check_err pool-destroy-missing "pool p1: no pool p1"

# ---- tenants and users ----
check tenant-create 0 A tenant create t1
has tenant-create "^Created tenant t1\.$"
check tenant-create-2 0 A tenant create t2
check tenant-dup 1 A tenant create t1
check_err tenant-dup "tenant t1: tenant t1 exists"
check tenant-list 0 A tenant list
has tenant-list "^system +[0-9]{4}-"
has tenant-list "^t1 +"
has tenant-list "^t2 +"
check tenant-list-json 0 A tenant list --json
has tenant-list-json '"name":"t1"'
check user-create-gen 0 A user create t1/alice
has user-create-gen "^t1/alice +no +no +no +-$"
has user-create-gen "^secret: [0-9a-f]{64}$"
alice=$(sed -n 's/^secret: //p' "$dir/out")
check user-create-stdin 0 feed bob-secret A user create t2/bob --secret-stdin
has user-create-stdin "^t2/bob +no"
lacks user-create-stdin "^secret:"
printf 'carol-secret\n' >"$dir/carol.secret"
check user-create-file 0 A user create t1/carol --secret-file "$dir/carol.secret"
check carol-works 0 env LODE_USER=t1/carol LODE_SECRET=carol-secret "$lode" --addr "$addr" whoami
has carol-works "^user +t1/carol$"
check user-create-admin 0 feed boss-secret A user create t1/boss --admin --secret-stdin
has user-create-admin "^t1/boss +yes +no +no"
check user-dup 1 feed x A user create t1/alice --secret-stdin
check_err user-dup "user t1/alice: user t1/alice exists"
check user-two-secrets 2 A user create t1/x --secret-file "$dir/carol.secret" --secret-stdin
check user-empty-secret 1 feed "" A user create t1/x --secret-stdin
check_err user-empty-secret "secret"
check user-missing-file 1 A user create t1/x --secret-file "$dir/nothing"
check_err user-missing-file "No such file"
check user-no-tenant 1 feed x A user create nosuch/x --secret-stdin
check_err user-no-tenant "no tenant nosuch"
check user-list 0 A user list t1
has user-list "^user +admin +node +revoked +groups$"
has user-list "^t1/alice +no"
has user-list "^t1/boss +yes"
has user-list "^t1/carol +no"
lacks user-list "bob"
check user-list-own 0 A user list
has user-list-own "^system/admin +yes"
check user-list-json 0 A user list t2 --json
has user-list-json '"users":\[\{"tenant":"t2","name":"bob"'

# ---- groups ----
check group-create 0 A group create t1/devs
has group-create "^t1/devs +-$"
check group-add 0 A group add t1/devs alice
has group-add "^t1/devs +alice$"
check group-add-2 0 A group add t1/devs t1/carol
has group-add-2 "^t1/devs +(alice,carol|carol,alice)$"
check group-remove 0 A group remove t1/devs carol
has group-remove "^t1/devs +alice$"
check group-remove-again 1 A group remove t1/devs carol
check_err group-remove-again "carol is not in group devs"
check group-cross-tenant 1 A group add t1/devs t2/bob
check_err group-cross-tenant "own tenant"
check group-list 0 A group list t1
has group-list "^t1/devs +alice$"
check group-list-json 0 A group list t1 --json
has group-list-json '"name":"devs","members":\["alice"\]'
check user-groups 0 A user list t1
has user-groups "^t1/alice +no +no +no +devs$"

# ---- ACLs ----
check acl-set 0 A acl set default tenant:t1 rw
has acl-set "^default +tenant:t1 +rw$"
check acl-set-2 0 A acl set default tenant:t2 rw
check acl-get 0 A acl get default
has acl-get "^principal +rights$"
has acl-get "^tenant:t1 +rw$"
has acl-get "^tenant:t2 +rw$"
check acl-get-json 0 A acl get default --json
has acl-get-json '"principal":"tenant:t1","rights":3'
check acl-bad-rights 2 A acl set default tenant:t1 rwx
check_usage acl-bad-rights "RIGHTS is some of r, w, a"
check acl-dup-rights 2 A acl set default tenant:t1 rr
check acl-empty-rights 2 A acl set default tenant:t1 ""
check acl-bad-principal 2 A acl set default t1 rw
check_usage acl-bad-principal "PRINCIPAL is user:NAME"
check acl-missing-args 2 A acl set default tenant:t1
check acl-no-pool 1 A acl set nosuch tenant:t1 r
check_err acl-no-pool "acl on nosuch: no pool nosuch"
check acl-no-user 1 A acl set default user:t1/nobody r
check_err acl-no-user "no user t1/nobody"

# ---- lode login ----
check login-wrong 1 feed wrong me login --user t1/alice --secret-stdin
check_err login-wrong "login as t1/alice (wrong user name or secret): "
[ -e "$cred" ] && failed "a failed login wrote $cred"
[ -n "$(ls -A "$XDG_CONFIG_HOME/lode" 2>/dev/null)" ] &&
	failed "a failed login left files: $(ls -A "$XDG_CONFIG_HOME/lode")"
check login-no-tty 2 no_tty me login --user t1/alice
check_usage login-no-tty "not a terminal"
check login-no-user 2 no_tty me login --secret-stdin
check_usage login-no-user "no user: give --user NAME"
check login-two-secrets 2 me login --user t1/alice --secret-stdin --secret-file /dev/null
[ -e "$cred" ] && failed "a refused login wrote $cred"
check login 0 feed "$alice" me login --user t1/alice --secret-stdin
has login "^Logged in as t1/alice \(tenant t1\) on pool default\.$"
has login "^Credentials saved in $cred\.$"
[ "$(stat -c %a "$cred" 2>/dev/null)" = 600 ] || failed "login: $cred is not mode 0600"
grep -qx "user: t1/alice" "$cred" || failed "login: $cred lacks the user line"
grep -qx "secret: $alice" "$cred" || failed "login: $cred lacks the secret line"
check login-note 0 feed "$alice" env XDG_CONFIG_HOME="$dir/xdg2" "$lode" --addr "$addr" \
	login --user t1/alice --secret-stdin
grep -q "note: \$LODE_CREDENTIALS is set" "$dir/err" || failed "login-note: $(cat "$dir/err")"
# on a terminal: the user typed back, the secret not (echo off), then restored
cat >"$dir/login_on_terminal.py" <<'PY'
import os, pty, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
def wait_for(what):
    global out
    end = time.time() + 20
    while what not in out and time.time() < end:
        try:
            out += os.read(fd, 4096)
        except OSError:
            break
wait_for(b"user: ")
os.write(fd, b"t1/carol\n")
wait_for(b"secret: ")
time.sleep(0.2)  # let it turn echo off before the secret is typed
os.write(fd, b"carol-secret\n")
wait_for(b"Credentials saved")
try:
    while True:
        b = os.read(fd, 4096)
        if not b:
            break
        out += b
except OSError:
    pass
_, st = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace").replace("\r", ""))
sys.exit(os.waitstatus_to_exitcode(st))
PY
check login-tty 0 env XDG_CONFIG_HOME="$dir/xdg-tty" /usr/bin/python3 \
	"$dir/login_on_terminal.py" "$lode" --addr "$addr" login
has login-tty "^user: t1/carol$"
has login-tty "^secret: $"
lacks login-tty "carol-secret"
has login-tty "^Logged in as t1/carol "
grep -qx "secret: carol-secret" "$dir/xdg-tty/lode/credentials" 2>/dev/null ||
	failed "login-tty: the typed secret is not in the credentials file"
check whoami-alice 0 me whoami
has whoami-alice "^user +t1/alice$"
has whoami-alice "^tenant +t1$"
has whoami-alice "^rights +rw$"
has whoami-alice "^credentials +$cred$"

# ---- containers, as alice ----
check cont-create 0 me cont create c1
check kv-put 0 me kv put c1 o k v1
check kv-get 0 me kv get c1 o k
[ "$(cat "$dir/out")" = v1 ] || failed "kv get as alice: '$(cat "$dir/out")'"
# --encrypt needs the tenant key, which stays on this side (lode keygen)
check cont-create-nokey 1 me cont create c2 --encrypt
check cont-create-nokey-gone 1 me cont query c2
check keygen 0 me keygen
has keygen "^$XDG_CONFIG_HOME/lode/tenant\.key$"
[ "$(stat -c %a "$XDG_CONFIG_HOME/lode/tenant.key")" = 600 ] || failed "keygen: not mode 0600"
check keygen-again 1 me keygen
check keygen-force 0 me keygen --force
check cont-create-props 0 me cont create c2 --class S1 --chunk-size 64K --checksum none --encrypt
check cont-query 0 me cont query c2
has cont-query "^container +c2$"
has cont-query "^pool +default$"
has cont-query "^owner +tenant t1$"
has cont-query "^class +S1$"
has cont-query "^chunk size +64\.0 KiB$"
has cont-query "^checksum +none$"
has cont-query "^encryption +AES-256-GCM"
has cont-query "^crypt block +4\.0 KiB$"
has cont-query "^uuid +[0-9a-f]{8}-"
check cont-query-default 0 me cont query c1
has cont-query-default "^chunk size +1\.0 MiB$"
has cont-query-default "^checksum +crc32c$"
has cont-query-default "^encryption +off$"
check cont-query-json 0 me cont query c2 --json
has cont-query-json '"chunk_size":65536,"checksum":"none","encryption":true'
has cont-query-json '"tenant":"t1"'
has cont-query-json '"wrapped_key":""'
check cont-props-used 0 me kv put c2 o k v2
check cont-props-read 0 me kv get c2 o k
[ "$(cat "$dir/out")" = v2 ] || failed "kv get on the encrypted c2: '$(cat "$dir/out")'"
check cont-create-props-dup 1 me cont create c2 --checksum none
check_err cont-create-props-dup "container c2: container default/c2 exists"
check cont-query-missing 1 me cont query nosuch
check_err cont-query-missing "container nosuch: no container default/nosuch"
check cont-bad-checksum 2 me cont create c3 --checksum md5
check_usage cont-bad-checksum "--checksum is crc32c or none"
check cont-bad-chunk 2 me cont create c3 --chunk-size lots
check cont-bad-class 1 me cont create c3 --class Q9
check_err cont-bad-class "container c3: object class"
check cont-bad-chunk-2 1 me cont create c3 --chunk-size 1000
check_err cont-bad-chunk-2 "chunk size 1000"
check cont-crypt-block-plain 2 me cont create c3 --crypt-block 64K
check_usage cont-crypt-block-plain "--crypt-block needs --encrypt"
check cont-crypt-block-bad 2 me cont create c3 --encrypt --crypt-block 6K
check_usage cont-crypt-block-bad "--crypt-block is a power of two from 4K to 1M"
check cont-list 0 me cont list
printf 'c1\nc2\n' | cmp -s - "$dir/out" || failed "cont list as alice: $(cat "$dir/out")"
check alice-pool-create 1 me pool create p9
check_err alice-pool-create "pool p9: permission denied: "
check alice-tenant-create 1 me tenant create t9
check_err alice-tenant-create "permission denied"
check alice-user-create 1 feed x me user create t1/x --secret-stdin
check_err alice-user-create "permission denied"
check alice-key-rotate 1 me key rotate
check_err alice-key-rotate "permission denied"
check alice-pools 0 me pool list
has alice-pools "^default "
check alice-system-status 0 me system status
has alice-system-status "^pools +1$"

# ---- another tenant's user sees and touches nothing of t1 ----
check bob-whoami 0 B whoami
has bob-whoami "^user +t2/bob$"
has bob-whoami "^credentials +\\\$LODE_USER and \\\$LODE_SECRET$"
check bob-cont-list 0 B cont list
lacks bob-cont-list "^c[12]$"
check bob-kv-put 1 B kv put c1 o k stolen
check_err bob-kv-put "container c1: "
check bob-kv-get 1 B kv get c1 o k
check bob-obj-put 1 feed data B obj put c1 x
check bob-cont-query 1 B cont query c1
check_err bob-cont-query "permission denied: no rights on container default/c1"
check bob-cont-destroy 1 B cont destroy c1
check bob-acl-grab 1 B acl set default/c1 user:t2/bob rwa
check_err bob-acl-grab "permission denied"
check bob-user-list 1 B user list t1
check alice-unchanged 0 me kv get c1 o k
[ "$(cat "$dir/out")" = v1 ] || failed "after bob's attempts, kv get: '$(cat "$dir/out")'"
check cont-still-there 0 me cont list
printf 'c1\nc2\n' | cmp -s - "$dir/out" || failed "cont list after bob: $(cat "$dir/out")"
check cont-crypt-block 0 me cont create c4 --encrypt --crypt-block 64K
check cont-crypt-block-query 0 me cont query c4
has cont-crypt-block-query "^crypt block +64\.0 KiB$"
check cont-crypt-block-put 0 me kv put c4 o k v4
check cont-crypt-block-get 0 me kv get c4 o k
[ "$(cat "$dir/out")" = v4 ] || failed "kv get on c4: '$(cat "$dir/out")'"
check cont-crypt-block-destroy 0 me cont destroy c4
# alice's tenant owns c1 (admin on it), so she may share it, read-only
check acl-share 0 me acl set default/c1 user:t2/bob r
has acl-share "^default/c1 +user:t2/bob +r$"
check acl-get-cont 0 me acl get default/c1
has acl-get-cont "^tenant:t1 +rwa$"
has acl-get-cont "^user:t2/bob +r$"
check bob-shared-list 0 B cont list
has bob-shared-list "^c1$"
lacks bob-shared-list "^c2$"
check bob-shared-get 0 B kv get c1 o k
[ "$(cat "$dir/out")" = v1 ] || failed "bob's shared read: '$(cat "$dir/out")'"
check bob-read-only 1 B kv put c1 o k stolen
check alice-unchanged-2 0 me kv get c1 o k
[ "$(cat "$dir/out")" = v1 ] || failed "after bob's read-only put, kv get: '$(cat "$dir/out")'"
check acl-unshare 0 me acl set default/c1 user:t2/bob none
has acl-unshare "^Removed user:t2/bob's entry on default/c1\.$"
check bob-unshared 1 B kv get c1 o k

# ---- a tenant administrator ----
check boss-user-create 0 feed dave-secret BOSS user create dave --secret-stdin
has boss-user-create "^t1/dave +no"
check boss-other-tenant 1 feed x BOSS user create t2/eve --secret-stdin
check_err boss-other-tenant "permission denied: creating users of tenant t2"
check boss-user-list 0 BOSS user list
has boss-user-list "^t1/dave "
check boss-node 1 feed x BOSS user create t1/agent --node --secret-stdin
check_err boss-node "permission denied"

# ---- revocation ----
check revoke 0 A user revoke t1/alice
has revoke "^t1/alice +no +no +yes"
check revoked-whoami 1 me whoami
check_err revoked-whoami "whoami"
check revoked-kv-get 1 me kv get c1 o k
check revoked-listed 0 A user list t1
has revoked-listed "^t1/alice +no +no +yes"
check revoke-missing 1 A user revoke t1/nobody
check_err revoke-missing "user t1/nobody: no user t1/nobody"
check restore 0 A user restore t1/alice
has restore "^t1/alice +no +no +no"
check restored-whoami 0 me whoami
has restored-whoami "^user +t1/alice$"

# ---- secrets ----
check passwd 0 feed alice-new A user passwd t1/alice --secret-stdin
has passwd "^Set a new secret for t1/alice\.$"
check old-secret 1 me whoami
check relogin 0 feed alice-new me login --user t1/alice --secret-stdin
check relogin-works 0 me kv get c1 o k
[ "$(cat "$dir/out")" = v1 ] || failed "after relogin, kv get: '$(cat "$dir/out")'"
check passwd-generated 0 A user passwd t1/carol
has passwd-generated "^secret: [0-9a-f]{64}$"
carol=$(sed -n 's/^secret: //p' "$dir/out")
check carol-new 0 env LODE_USER=t1/carol LODE_SECRET="$carol" "$lode" --addr "$addr" whoami
check passwd-self 0 feed alice-self me user passwd alice --secret-stdin
check passwd-self-login 0 feed alice-self me login --user t1/alice --secret-stdin

# ---- signing keys ----
check key-rotate 0 A key rotate
key2=$(sed -n 's/^Signing key \([0-9]*\) signs.*/\1/p' "$dir/out")
[ -n "$key2" ] && [ -n "$key1" ] && [ "$key2" -gt "$key1" ] ||
	failed "key rotate: key '$key2' after '$key1': $(cat "$dir/out")"
check status-after-rotate 0 A system status
has status-after-rotate "^signing key +$key2$"
check whoami-after-rotate 0 me whoami
has whoami-after-rotate "^signing key +$key2$"
check data-after-rotate 0 me kv get c1 o k

# ---- the default file under $HOME when $XDG_CONFIG_HOME is unset ----
check login-home 0 feed alice-self env -u XDG_CONFIG_HOME "$lode" --addr "$addr" \
	login --user t1/alice --secret-stdin
[ "$(stat -c %a "$HOME/.config/lode/credentials" 2>/dev/null)" = 600 ] ||
	failed "login without XDG_CONFIG_HOME: no 0600 $HOME/.config/lode/credentials"
check whoami-home 0 env -u XDG_CONFIG_HOME -u LODE_CREDENTIALS "$lode" --addr "$addr" whoami
has whoami-home "^credentials +$HOME/\.config/lode/credentials$"
check logout-home 0 env -u XDG_CONFIG_HOME "$lode" logout
[ -e "$HOME/.config/lode/credentials" ] && failed "logout left $HOME/.config/lode/credentials"

# ---- lode logout ----
check logout 0 me logout
has logout "^Logged out: removed $cred\.$"
[ -e "$cred" ] && failed "logout left $cred"
check logout-again 0 me logout
has logout-again "^Not logged in"
check logged-out-whoami 1 me whoami
check_err logged-out-whoami "whoami: not logged in"
check logged-out-data 1 me cont list
check logged-out-admin 1 me pool list

# ---- engines: a system administrator's business ----
check bob-exclude 1 B system exclude 0
check_err bob-exclude "exclude engine 0: permission denied: changing an engine's state needs a system administrator$"
check bob-engines 0 B system engines
has bob-engines "^ +0 +127\.0\.0\.1:[0-9]+ +UP "

# ---- tenants go ----
check tenant-destroy-busy 1 A tenant destroy t1
check_err tenant-destroy-busy "tenant t1: tenant t1 owns containers"
check tenant-destroy 0 A tenant destroy t2
has tenant-destroy "^Destroyed tenant t2\.$"
check tenant-list-after 0 A tenant list
lacks tenant-list-after "^t2 "
check bob-gone 1 B whoami
check tenant-destroy-missing 1 A tenant destroy t2
check_err tenant-destroy-missing "no tenant t2"
check system-status-end 0 A system status
has system-status-end "^containers +2$"

# ---- restarts: the management service keeps its port, or says why not ----
mport() { sed -n 's/^mgmt: .*:\([0-9]*\)$/\1/p' "$admin_cred"; }
port0=$(mport)
kill "$pid" && wait "$pid"
loded_restart || failed "loded did not restart"
[ -n "$port0" ] && [ "$(mport)" = "$port0" ] ||
	failed "restart: the management service moved from port '$port0' to '$(mport)'"
check restart-status 0 A system status
kill "$pid" && wait "$pid"
# its port taken meanwhile: another one, and the log says so
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1)
open(sys.argv[2], "w").close(); time.sleep(60)' "$port0" "$dir/squatting" &
squatter=$!
for _ in $(seq 50); do [ -e "$dir/squatting" ] && break; sleep 0.1; done
[ -e "$dir/squatting" ] || failed "port taken: nothing could listen on port $port0 to take it"
loded_restart || failed "loded did not start with its old management port taken"
kill "$squatter" 2>/dev/null
wait "$squatter" 2>/dev/null
squatter=
[ -n "$(mport)" ] && [ "$(mport)" != "$port0" ] ||
	failed "port taken: the credentials name port '$(mport)', the old one was $port0"
grep -q "port $port0, its port before, is not free" "$dir/loded.log" ||
	failed "port taken: the log does not say so"
check restart-moved-status 0 A system status

checks_done
