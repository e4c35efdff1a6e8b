#!/usr/bin/env bash
# Installs the Debian packages collie builds and tests with. Idempotent: packages
# already present are not touched, and apt-get update runs only when something is
# missing. Needs root (or sudo) only when a package is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  openmpi-bin libopenmpi-dev
  iproute2 python3 python3-venv
  libucx-dev ucx-utils libibverbs-dev rdma-core ibverbs-utils
  # Peers that bench/compare.py measures collie against.
  mpich libmpich-dev libgloo-dev python3-matplotlib
  # Fuzzers (libFuzzer) and the sanitizer builds.
  clang libclang-rt-14-dev
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q >/dev/null
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
