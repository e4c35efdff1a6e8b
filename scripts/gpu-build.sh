#!/bin/sh
# Builds, here (no GPU needed), what scripts/gpu-check.sh runs on a GPU machine, and
# puts it in a carry folder that travels without this machine's paths or libraries:
#   BUILD/carry/bin: collie, gpu_collectives_test, device_rank, gpu_reduce_copy_bench,
#                    nccl_device_check (an NCCL program, linked with -lnccl)
#   BUILD/carry/lib: libcollie.so.0, libnccl.so.2 (collie's drop-in, which
#                    nccl_device_check loads from there), libgpu_streaming_variants.so
#                    (the streaming kernel's shapes, for bench/gpu_streaming_variants.py)
#   BUILD/carry/MANIFEST: commit, options, CUDA toolkit, sizes, each binary's ldd and
#                         newest GLIBC/GLIBCXX symbol version
# Release, CUDA for sm_90 only (H100/H200), no UCX or verbs, stripped; the CUDA runtime
# is linked statically everywhere. Fails when a binary needs a shared library other
# than libc, libstdc++, libgcc_s, libm (and glibc's own libdl/librt/libpthread stubs,
# the loader, the vDSO), libcollie itself and collie's libnccl.so.2.
#
# Usage: scripts/gpu-build.sh [BUILD_DIR]   (default build-gpu; JOBS=2 by default)
# Then carry BUILD_DIR/carry and run scripts/gpu-check.sh OUTDIR on the GPU machine.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
carry=$build/carry

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLIE_WITH_CUDA=ON \
  -DCOLLIE_WITH_UCX=OFF -DCOLLIE_WITH_IBVERBS=OFF -DCOLLIE_CUDA_ARCHITECTURES=90
ninja -C "$build" -j "${JOBS:-2}" collie_cli gpu_collectives_test device_rank \
  gpu_reduce_copy_bench gpu_streaming_variants nccl nccl_device_check

rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib"
cp "$build/bin/collie" "$build/tests/gpu/gpu_collectives_test" \
  "$build/tests/multiprocess/device_rank" "$build/bench/gpu_reduce_copy_bench" \
  "$build/tests/gpu/nccl_device_check" "$carry/bin/"
cp -L "$build/libcollie.so.0" "$carry/lib/libcollie.so.0"
cp -L "$build/lib/collie-nccl/libnccl.so.2" "$carry/lib/libnccl.so.2"
cp "$build/bench/libgpu_streaming_variants.so" "$carry/lib/"
strip --strip-unneeded "$carry"/bin/* "$carry"/lib/*

allowed='^(linux-vdso\.so|libc\.so|libstdc\+\+\.so|libgcc_s\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libcollie\.so\.0|libnccl\.so\.2|/lib64/ld-linux|ld-linux)'
{
  echo "commit=$(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!build*' || echo '+dirty')"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "options=Release COLLIE_WITH_CUDA=ON COLLIE_WITH_UCX=OFF COLLIE_WITH_IBVERBS=OFF COLLIE_CUDA_ARCHITECTURES=90"
  echo "cuda_toolkit=CUDA $(cat "$build"/CMakeFiles/[0-9]*/CMakeCUDACompiler.cmake |
    sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' | head -1)"
  echo "bytes=$(du -sb "$carry" | cut -f1)"
} > "$carry/MANIFEST.tmp"
status=0
for f in "$carry"/bin/* "$carry"/lib/*; do
  name=$(basename "$f")
  deps=$(LD_LIBRARY_PATH="$carry/lib" ldd "$f" | awk '{print $1}')
  glibc=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  glibcxx=$(objdump -T "$f" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
  echo "ldd_$name=$(echo $deps) newest=$glibc $glibcxx size=$(stat -c %s "$f")" >> "$carry/MANIFEST.tmp"
  for d in $deps; do
    if ! echo "$d" | grep -Eq "$allowed"; then
      echo "gpu-build: $name needs $d, which the GPU machine may not have" >&2
      status=1
    fi
  done
done
mv "$carry/MANIFEST.tmp" "$carry/MANIFEST"
cat "$carry/MANIFEST"
echo "gpu-build: carry $carry ($(du -sh "$carry" | cut -f1)); on the GPU machine: scripts/gpu-check.sh OUTDIR"
exit $status
