#!/usr/bin/env bash
# Installs every Debian package Lode needs to build, test and run. Idempotent:
# packages already present are skipped, and apt is not touched at all when
# nothing is missing. Run as root (or with sudo available).
set -euo pipefail

pkgs=(
	build-essential cmake pkg-config git
	clang libclang-rt-14-dev libfuzzer-14-dev # libFuzzer + sanitizer runtimes
	liburing-dev      # io_uring
	libisal-dev       # CRC32C (and later erasure coding)
	liblmdb-dev librocksdb-dev # measured against the engine's own index
	libcmocka-dev     # unit tests
	libyaml-dev       # loded's configuration files
	libucx-dev ucx-utils # the data plane (UCX: tcp, shared memory, verbs)
	libibverbs-dev librdmacm-dev ibverbs-providers # the rdma transport, where the hardware exists
	python3           # bench/net/run.sh's table
	util-linux e2fsprogs # mount/losetup/mkfs for the full-disk test
	libfuse3-dev fuse3 # lode-fuse (fuse3 also ships fusermount3)
	fio sqlite3 rsync tar attr # the POSIX suite's unmodified tools and benchmarks
	libgrpc-dev libprotobuf-c-dev protobuf-c-compiler # the control plane: gRPC core + protobuf-c
	protobuf-compiler protobuf-compiler-grpc # protoc, for the Python stubs the tests generate
	python3-grpcio python3-grpc-tools python3-protobuf # a gRPC client in Python (the control-plane test)
	libssl-dev openssl # capabilities (HMAC-SHA256), inline encryption (AES-256-GCM), the test CA
	libraft-dev libuv1-dev # the management service's state, replicated with Raft (libuv backend)
	iproute2 # network namespaces and veth pairs for the multi-engine tests
	python3-matplotlib # make eval's plots
)

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
