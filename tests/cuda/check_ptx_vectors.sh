#!/bin/sh
# Compiles the reduce-copy kernel and its streaming form to PTX for sm_80 and fails unless
# every instantiated kernel's body uses 16-byte vector loads and stores (ld/st .v4 of
# 32-bit or .v2 of 64-bit words), i.e. the aligned body really is vectorised, and the
# streaming kernel's carry the streaming cache hint (ld/st.global.cs).
# Usage: check_ptx_vectors.sh <nvcc> <source dir> <work dir>
set -eu
nvcc=$1
src=$2
work=$3
mkdir -p "$work"
ptx="$work/reduce_copy.ptx"
"$nvcc" -ptx -arch=sm_80 -std=c++20 -O3 -I"$src" -I"$src/include" \
  "$src/tests/cuda/reduce_copy_ptx.cu" -o "$ptx"

load='ld(\.global)?(\.nc|\.cs)?(\.volatile)?\.v(4\.[bsuf]32|2\.[bsuf]64)'
store='st(\.global)?(\.cs)?(\.volatile)?\.v(4\.[bsuf]32|2\.[bsuf]64)'
kernels=$(grep -c '^\.visible \.entry .*[rR]educeCopyKernel' "$ptx" || true)
if [ "$kernels" -lt 5 ]; then
  echo "FAIL: expected 5 reduce-copy entries (3 general, 2 streaming) in $ptx, found $kernels"
  exit 1
fi
# Split the PTX into one file per entry and check each.
awk -v dir="$work" '/^\.visible \.entry/ { n++; file = dir "/entry" n ".ptx" } file { print > file }' "$ptx"
status=0
for f in "$work"/entry*.ptx; do
  name=$(head -1 "$f" | sed 's/.*entry //; s/(.*//')
  if ! grep -Eq "$load" "$f"; then
    echo "FAIL: $name has no 16-byte vector load"
    status=1
  elif ! grep -Eq "$store" "$f"; then
    echo "FAIL: $name has no 16-byte vector store"
    status=1
  elif echo "$name" | grep -q streaming &&
    ! { grep -q 'ld\.global\.cs\.v4' "$f" && grep -q 'st\.global\.cs\.v4' "$f"; }; then
    echo "FAIL: $name's body has no streaming-hinted (ld/st.global.cs) 16-byte access"
    status=1
  else
    echo "ok: $name: $(grep -Eo "$load" "$f" | sort -u | tr '\n' ' ')/ $(grep -Eo "$store" "$f" | sort -u | tr '\n' ' ')"
  fi
done
exit $status
