#!/usr/bin/env bash
# `make up`: start a one-node Lode from this checkout, in the background,
# with a default tenant, user, pool and container, leave the `lode` command
# logged in as that user, and say how to use it.
#
#   RAM=1          targets on tmpfs (/dev/shm) instead of ./lode-data
#   TARGETS=n      number of targets (default 1)
#   LODE_PORT=p    listen port (default 7420; the next free one if taken)
#   LODE_DATA=dir  where the targets live
#
# loded writes its address to $XDG_STATE_HOME/lode/addr (default
# ~/.local/state/lode/addr), which is where
# build/bin/lode looks when it is given no --addr.
#
# Who is who. loded's first start (an empty management state) makes the
# system administrator, system/admin, and writes its credentials to
# ~/.local/state/lode/admin.credentials (mode 0600). With those, this script
# makes tenant "default", user default/$USER with a random secret, and
# gives the tenant read and write on pool "default" (which loded's first
# start made); then it runs `lode login` as that user, which writes
# ~/.config/lode/credentials (or $XDG_CONFIG_HOME/lode/credentials), and
# creates the container "default" as that user. Each step is skipped when
# it is already done, so a second `make up` changes nothing. A CLI that is
# already logged in, as anyone, is left so; one whose credentials no longer
# work (the state was purged, the secret changed) gets default/$USER's
# secret reset and is logged in again. `make down` leaves the credentials.
#
# The default container is also mounted at ./lode-mnt by lode-fuse (where
# /dev/fuse exists); the mountpoint and the daemon's pid and log are kept in
# the state directory, for `make down`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/build/bin
state=${XDG_STATE_HOME:-$HOME/.local/state}/lode
mkdir -p "$state"
pidfile=$state/loded.pid
mnt=$PWD/lode-mnt
admin_cred=$state/admin.credentials
cred=${XDG_CONFIG_HOME:-$HOME/.config}/lode/credentials
# default/$USER, in the letters a Lode name may have
me_user=default/$(printf '%s' "${USER:-$(id -un)}" | tr -c 'A-Za-z0-9._-' '_')

# admin ARGS: lode as the system administrator loded made at its first start.
# me ARGS: lode as the user `lode login` saved, whatever the caller's
# environment says (LODE_CREDENTIALS, LODE_USER, LODE_POOL would override it).
admin() {
	env -u LODE_USER -u LODE_SECRET -u LODE_POOL LODE_CREDENTIALS="$admin_cred" \
		"$bin/lode" --addr "$(cat "$state/addr")" "$@"
}
me() {
	env -u LODE_CREDENTIALS -u LODE_USER -u LODE_SECRET -u LODE_POOL \
		"$bin/lode" --addr "$(cat "$state/addr")" "$@"
}
new_secret() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }
# the first column of a table's rows (its header line skipped)
names() { awk 'NR > 1 { print $1 }'; }

# setup_cli: the tenant, user, ACL, login and container described above.
# Says nothing when all is in place.
setup_cli() {
	local secret=
	if me whoami >/dev/null 2>&1 && me cont list 2>/dev/null | grep -qx default; then
		return 0
	fi
	if [ ! -r "$admin_cred" ]; then
		echo "make up: $admin_cred is missing, so the CLI cannot be set up:" \
			"log in by hand (lode login --help), or start afresh (make down PURGE=1)" >&2
		return 1
	fi
	if ! admin tenant list | names | grep -qx default; then
		admin tenant create default >/dev/null
		echo "Created tenant default."
	fi
	if ! admin user list default | names | grep -qx "$me_user"; then
		secret=$(new_secret)
		printf '%s\n' "$secret" | admin user create "$me_user" --secret-stdin >/dev/null
		echo "Created user $me_user."
	fi
	if ! admin acl get default | awk '$1 == "tenant:default" { print $2 }' | grep -q w; then
		admin acl set default tenant:default rw >/dev/null
		echo "Gave tenant default read and write on pool default."
	fi
	if [ -z "$secret" ] && ! me whoami >/dev/null 2>&1; then
		# the user exists, but the saved credentials are missing or stale
		secret=$(new_secret)
		printf '%s\n' "$secret" | admin user passwd "$me_user" --secret-stdin >/dev/null
		echo "Set a new secret for $me_user."
	fi
	if [ -n "$secret" ]; then
		printf '%s\n' "$secret" | me login --user "$me_user" --secret-stdin >/dev/null
		echo "Logged the CLI in as $me_user ($cred)."
	fi
	# the tenant key that wraps encrypted containers' data keys: made here,
	# kept here (lode cont create --encrypt); loded never sees it
	if [ ! -e "${XDG_CONFIG_HOME:-$HOME/.config}/lode/tenant.key" ]; then
		"$bin/lode" keygen >/dev/null && echo "Created the tenant key (lode keygen)."
	fi
	if ! me cont list | grep -qx default; then
		if ! me cont create default; then
			echo "make up: the container default could not be created as" \
				"$(me whoami | awk '$1 == "user" { print $2 }') (the line above says why)" >&2
			return 1
		fi
		echo "Created container default."
	fi
}

# who the CLI is logged in as, and where its credentials are
whoami_line() {
	echo "The CLI is logged in as $(me whoami | awk '$1 == "user" { print $2 }')" \
		"($cred; lode whoami, lode logout)."
	echo "The administrator's credentials: $admin_cred" \
		"(LODE_CREDENTIALS=$admin_cred $bin/lode ...)."
}

# mount_fs: mount the default container at $mnt unless it already is; a
# mount whose daemon died is cleared first. Says nothing when all is well.
mount_fs() {
	local fstype
	rm -f "$state/mnt"
	if [ ! -c /dev/fuse ]; then
		echo "make up: /dev/fuse is missing, so the file system is not mounted at $mnt" >&2
		return 0
	fi
	mkdir -p "$mnt" 2>/dev/null || true # a dead mount there fails mkdir; handled below
	fstype=$(findmnt -rn -M "$mnt" -o FSTYPE 2>/dev/null || true)
	if [ -n "$fstype" ] && [ "$fstype" != fuse.lode ]; then
		echo "make up: $mnt is already a mount point ($fstype); not mounting there" >&2
		return 0
	elif [ -n "$fstype" ]; then
		# A live daemon whose loded was restarted answers again once its
		# connections are back (a second or so): give it that long.
		for _ in $(seq 1 20); do
			if stat "$mnt" >/dev/null 2>&1 && ls "$mnt" >/dev/null 2>&1; then
				echo "$mnt" >"$state/mnt"
				return 0 # already mounted and answering
			fi
			[ -f "$state/lode-fuse.pid" ] && kill -0 "$(cat "$state/lode-fuse.pid")" 2>/dev/null ||
				break
			sleep 0.25
		done
		echo "make up: clearing a dead Lode mount at $mnt" >&2
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
	fi
	if env -u LODE_CREDENTIALS -u LODE_USER -u LODE_SECRET -u LODE_POOL \
		"$bin/lode-fuse" --addr "$(cat "$state/addr")" --pidfile "$state/lode-fuse.pid" \
		--log "$state/lode-fuse.log" default "$mnt"; then
		echo "$mnt" >"$state/mnt"
	else
		echo "make up: the file system is not mounted at $mnt (the line above says why)" >&2
	fi
}

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	setup_cli
	echo "Lode is already up (loded pid $(cat "$pidfile"), $(cat "$state/addr"))."
	me status
	mount_fs
	if [ -f "$state/mnt" ]; then
		echo "The default container is mounted at $mnt."
	fi
	whoami_line
	exit 0
fi

ram=()
data=${LODE_DATA:-$PWD/lode-data}
if [ "${RAM:-0}" = 1 ]; then
	data=${LODE_DATA:-/dev/shm/lode-$(id -u)}
	ram=(--ram)
fi
port=${LODE_PORT:-7420}
# Take the first free port from there: another program may hold 7420.
while (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
	port=$((port + 1))
done
rm -f "$state/addr" "$state/mgmt-addr"
nohup "$bin/loded" --listen "127.0.0.1:$port" --path "$data" --targets "${TARGETS:-1}" \
	"${ram[@]}" --pidfile "$pidfile" --addrfile "$state/addr" \
	--admin-cred "$admin_cred" --mgmt-addrfile "$state/mgmt-addr" \
	>>"$state/loded.log" 2>&1 </dev/null &
echo "$data" >"$state/data"

# Answering `status` needs credentials: the administrator's, which the
# management service writes on its first start before it serves.
for _ in $(seq 1 300); do
	[ -f "$state/addr" ] && admin status >/dev/null 2>&1 && break
	if ! kill -0 $! 2>/dev/null; then
		echo "make up: loded exited; the end of $state/loded.log says why:" >&2
		tail -n 5 "$state/loded.log" >&2
		exit 1
	fi
	sleep 0.1
done
if ! admin status >/dev/null 2>&1; then
	echo "make up: loded did not answer within 30 s; see $state/loded.log" >&2
	exit 1
fi
setup_cli
mount_fs

echo "Lode is up: loded (pid $(cat "$pidfile")) serves $data${ram:+ (RAM)} on 127.0.0.1:$port."
echo
me status | sed 's/^/  /'
echo
whoami_line
cat <<MSG

Try:
  $bin/lode obj put default hello /etc/hostname
  $bin/lode obj get default hello
  $bin/lode kv put default settings color blue && $bin/lode kv get default settings color
  $bin/lode bench --rw randread --bs 4k --iodepth 32 --runtime 5
MSG
if [ -f "$state/mnt" ]; then
	cat <<MSG
  echo hi > lode-mnt/hello; cat lode-mnt/hello    # the container as files (lode-fuse)
MSG
fi
cat <<MSG
Log: $state/loded.log    Stop with: make down
MSG
