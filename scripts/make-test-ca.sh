#!/usr/bin/env bash
# Make a throwaway certificate authority and certificates signed by it, for
# tests and for trying TLS on one machine (`make-test-ca.sh DIR`). Keys are
# unencrypted ECDSA P-256; never use these anywhere that matters.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: make-test-ca.sh DIR

Writes into DIR (created if missing; files already there are kept, so
running it again changes nothing):
  ca.pem, ca-key.pem          a test certificate authority
  server.pem, server-key.pem  a server certificate for 127.0.0.1, ::1 and
                              localhost, signed by the CA
  client.pem, client-key.pem  a client certificate signed by the CA (for
                              servers that ask for one)
Keys are written with mode 0600. Certificates are valid for 10 years.
EOF
}

case ${1-} in
-h | --help)
	usage
	exit 0
	;;
esac
if [[ $# -ne 1 || -z $1 ]]; then
	usage >&2
	exit 2
fi
command -v openssl >/dev/null || {
	echo "make-test-ca.sh: openssl not found (scripts/install-deps.sh installs it)" >&2
	exit 1
}

dir=$1
mkdir -p "$dir"
cd "$dir"
umask 077
days=3650
tmp=$(mktemp -d .make-test-ca.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# newkey OUT: a P-256 private key.
newkey() {
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# Files appear only whole: each pair is made in $tmp and renamed into place.
if [[ ! -s ca.pem || ! -s ca-key.pem ]]; then
	newkey "$tmp/ca-key.pem"
	openssl req -x509 -new -key "$tmp/ca-key.pem" -out "$tmp/ca.pem" -days "$days" \
		-subj "/CN=Lode test CA $(openssl rand -hex 4)" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign"
	mv "$tmp/ca-key.pem" ca-key.pem
	chmod 0644 "$tmp/ca.pem"
	mv "$tmp/ca.pem" ca.pem
fi

# issue NAME CN EXTENSIONS: NAME.pem and NAME-key.pem, signed by the CA.
issue() {
	local name=$1 cn=$2 ext=$3
	[[ -s $name.pem && -s $name-key.pem ]] && return 0
	newkey "$tmp/$name-key.pem"
	openssl req -new -key "$tmp/$name-key.pem" -out "$tmp/$name.csr" -subj "/CN=$cn"
	printf '%s\n' "$ext" >"$tmp/$name.ext"
	openssl x509 -req -in "$tmp/$name.csr" -CA ca.pem -CAkey ca-key.pem \
		-set_serial "0x$(openssl rand -hex 16)" -days "$days" \
		-extfile "$tmp/$name.ext" -out "$tmp/$name.pem" 2>/dev/null
	mv "$tmp/$name-key.pem" "$name-key.pem"
	chmod 0644 "$tmp/$name.pem"
	mv "$tmp/$name.pem" "$name.pem"
}

issue server localhost "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"
issue client lode-test-client "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
