#!/usr/bin/env bash
# README's second command: install what is missing, build, and run every test
# (ctest labels: unit, threads, multiprocess; later multihost, cuda-build, sanitize).
# Extra arguments go to ctest, e.g. `scripts/test.sh -L unit`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900 -j2 "$@"
