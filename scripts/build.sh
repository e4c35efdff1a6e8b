#!/usr/bin/env bash
# Installs missing packages, then configures and builds collie into build/ (or
# $COLLIE_BUILD_DIR). Extra arguments go to cmake's configure step.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${COLLIE_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh"
# RelWithDebInfo at -g1 (line tables: backtraces, perf and the flight recorder's symbols)
# rather than -g: the full debug info took a fifth of every compile (kernels/cpu/reduce.cc
# 24.7 s against 19.6 s), and the build is most of CI's 30 minutes. Configure with
# -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG" to debug with variables.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  "$@" >/dev/null
ninja -C "$build" -j"$(nproc)"
