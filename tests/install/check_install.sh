#!/usr/bin/env bash
# Installs collie from the build tree into a temporary prefix, checks that the device
# emulation stayed behind, then builds programs against it with find_package(collie) and
# with pkg-config, and runs them.
set -euo pipefail
build="$1"
source_dir="$(cd "$(dirname "$0")" && pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
test -x "$prefix/bin/collie" || { echo "collie CLI not installed"; exit 1; }
"$prefix/bin/collie" info >/dev/null || { echo "installed collie does not run"; exit 1; }
test -f "$prefix/include/collie/collie.h" || { echo "headers not installed"; exit 1; }
libdir=$(dirname "$(find "$prefix" -name 'libcollie.so' | head -1)")
# The emulated GPU is a test component (libcollie_device_emulation.so): not installed, and
# not inside the installed libcollie, so the installed collie says it has none.
if [ -n "$(find "$prefix" -name 'libcollie_device_emulation*')" ]; then
  echo "the device emulation was installed"; exit 1
fi
# (Counted, not grep -q: with pipefail, a grep that stops early fails the pipeline.)
emulated=$(nm -DC --defined-only "$libdir/libcollie.so" | grep -c 'emulation::' || true)
if [ "$emulated" -ne 0 ]; then
  echo "the installed libcollie carries the device emulation ($emulated symbols)"; exit 1
fi
info=$("$prefix/bin/collie" info)
case "$info" in
  *"
device emulation: unavailable: "*) ;;
  *) echo "installed collie info does not say that the device emulation is absent"; exit 1 ;;
esac
cmake -S "$source_dir/consumer" -B "$prefix/consumer-build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
ninja -C "$prefix/consumer-build" >/dev/null
LD_LIBRARY_PATH="$libdir" "$prefix/consumer-build/consumer_c"
LD_LIBRARY_PATH="$libdir" "$prefix/consumer-build/consumer_cxx"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$source_dir/consumer/main.c" -o "$prefix/consumer_pc" $(pkg-config --cflags --libs collie)
LD_LIBRARY_PATH="$libdir" "$prefix/consumer_pc"
echo "install check passed"
