#!/bin/sh
# Compiles every kernel of kernels/cuda (cuda_kernels.cu instantiates them all) to PTX
# for sm_80 and fails when an entry keeps a local-memory frame (a __local_depot): an
# argument array indexed at run time lands there, and a reduce-copy whose source and
# destination pointers were read from local memory in its loop ran at 0.66-0.69x of the
# register version on an H200 (kernels/cuda/reduce_copy.cuh, reduceCopyBody).
# Usage: check_ptx_local_memory.sh <nvcc> <source dir> <work dir> [ptx]
#   ptx: the sm_80 PTX the build kept (kernels/cuda/CMakeLists.txt, nvcc --keep); when
#   it is not given or missing, the kernels are compiled to PTX here.
set -eu
nvcc=$1
src=$2
work=$3
mkdir -p "$work"
ptx=${4:-}
if [ -z "$ptx" ] || [ ! -s "$ptx" ] || [ "$ptx" -ot "$src/kernels/cuda/cuda_kernels.cu" ]; then
  ptx="$work/cuda_kernels.ptx"
  "$nvcc" -ptx -arch=sm_80 -std=c++20 -O3 -I"$src" -I"$src/include" \
    "$src/kernels/cuda/cuda_kernels.cu" -o "$ptx"
fi
echo "checking $ptx"

entries=$(grep -c '^\.visible \.entry' "$ptx" || true)
if [ "$entries" -lt 100 ]; then
  echo "FAIL: expected every kernel instantiation in $ptx, found $entries entries"
  exit 1
fi
awk '/^\.visible \.entry/ { name = $3; sub(/\(.*/, "", name) }
     /__local_depot[0-9]*\[/ && name != "" { print name; name = "" }' "$ptx" > "$work/local.txt"
if [ -s "$work/local.txt" ]; then
  echo "FAIL: $(wc -l < "$work/local.txt") of $entries kernels keep a local-memory frame, e.g.:"
  head -5 "$work/local.txt"
  exit 1
fi
echo "ok: none of $entries kernels has a local-memory frame"
