#!/usr/bin/env bash
# ABI check: a program built against the installed public headers of this commit must
# run unchanged on a libcollie whose internals changed. The internal change is
# simulated: <padded-dir> holds libcollie built with COLLIE_ABI_CHECK_PADDING, which
# adds a member to Communicator::Impl (core/comm/communicator_impl.h). The C++ consumer
# (two ranks as threads) and the NCCL drop-in consumer run on the library they were
# built against, then on the padded one; the C++ consumer also checks that the public
# class is as large as the library allocates it.
# Usage: abi_check.sh <build-dir> <padded-dir>
set -euo pipefail
build="$1"
padded="$(cd "$2" && pwd)"
source_dir="$(cd "$(dirname "$0")/abi" && pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name 'libcollie.so' | head -1)")
test -f "$padded/libcollie.so.0" || { echo "no padded libcollie.so.0 in $padded"; exit 1; }
if cmp -s "$libdir/libcollie.so.0" "$padded/libcollie.so.0"; then
  echo "the padded library is the installed one: COLLIE_ABI_CHECK_PADDING had no effect"
  exit 1
fi
# Only the installed headers: no -I into the source tree.
c++ -std=c++20 -O1 -g -Wall -I"$prefix/include" "$source_dir/consumer.cc" \
  -L"$libdir" -lcollie -pthread -o "$prefix/abi_consumer"
cc -O1 -Wall -I"$prefix/include/collie" "$source_dir/nccl_consumer.c" -pthread \
  -L"$libdir/collie-nccl" -lnccl -o "$prefix/nccl_consumer"

run() {  # run <library path> <program>: fails unless libcollie comes from the first dir
  local loaded
  loaded=$(LD_LIBRARY_PATH="$1" ldd "$2" | awk '/libcollie\.so/ {print $3}')
  if [ "$(dirname "$loaded")" != "${1%%:*}" ]; then
    echo "$2 loads libcollie from '$loaded', not from ${1%%:*}"
    exit 1
  fi
  echo "$(basename "$2") on $loaded:"
  LD_LIBRARY_PATH="$1" "$2"
}
export COLLIE_TIMEOUT=30s
run "$libdir" "$prefix/abi_consumer"
run "$padded" "$prefix/abi_consumer"
run "$libdir:$libdir/collie-nccl" "$prefix/nccl_consumer"
run "$padded:$libdir/collie-nccl" "$prefix/nccl_consumer"
echo "abi check passed"
