#!/usr/bin/env bash
# Installs the Debian 12 packages Shoal builds, tests and benchmarks with,
# when any is missing. Needs root for apt-get; otherwise says what to install.
set -euo pipefail

BUILD_PKGS=(build-essential cmake pkg-config python3 curl
  libnng-dev libprotobuf-c-dev protobuf-c-compiler liblmdb-dev libzstd-dev
  libmicrohttpd-dev libcjson-dev libutf8proc-dev libstemmer-dev libstreamvbyte-dev
  libxxhash-dev libroaring-dev zlib1g-dev libargon2-dev libcurl4-openssl-dev libpcre2-dev)
# The cluster's coordination service: local clusters (local-cluster.sh runs
# this script without --with-tests) and the etcd client's test run it.
RUN_PKGS=(etcd-server)
# Tests also use these (clients, peers for the BM25 check, sanitizer runtime,
# a headless browser for the cluster page; etcd-server from RUN_PKGS for
# coord/ec_test; PyYAML for the conformance runner, tests/conformance/;
# iproute2 and iptables for the fault tests' hosts in network namespaces,
# tests/faults/).
TEST_PKGS=(clang libclang-rt-14-dev python3-elasticsearch python3-yaml default-jdk-headless liblucene8-java
  dict-gcide openssl chromium fonts-dejavu-core iproute2 iptables python3-venv)

want=("${BUILD_PKGS[@]}" "${RUN_PKGS[@]}")
if [ "${1:-}" = "--with-tests" ]; then
  want+=("${TEST_PKGS[@]}")
  # The OpenSearch JS client test needs node and npm; machines that ship
  # them from elsewhere keep theirs.
  command -v npm >/dev/null 2>&1 || want+=(nodejs npm)
fi

missing=()
for p in "${want[@]}"; do
  # captured, not piped into grep -q: under pipefail grep's early exit can
  # fail dpkg-query with SIGPIPE and count an installed package as missing
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "shoal: missing Debian packages: ${missing[*]}" >&2
  echo "shoal: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "shoal: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
