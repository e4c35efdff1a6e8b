#!/usr/bin/env bash
# README's first command: install what is missing, build, and run the main job — a
# 2-rank all-reduce benchmark on this machine with every result checked (-c 1).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh"
collie="$root/build/bin/collie"
exec "$collie" run -n 2 -- "$collie" perf allreduce -b 8 -e 64M -f 4 -c 1 "$@"
