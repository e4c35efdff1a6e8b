#!/usr/bin/env bash
# The PyTorch backend's tests: ensures the Python environment (scripts/python-env.sh,
# installs torch on a fresh machine), builds torch_collie against this build's
# libcollie, then runs DDP + collectives vs gloo, the dead-peer check and the
# launcher checks (torchrun, collie run). Exit 77 (ctest: skipped) only when torch
# cannot be installed at all.
#   run_torch_tests.sh <path to the collie CLI> <build dir>
set -euo pipefail
collie="$1"
build="$(cd "$2" && pwd)"
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/python"

if ! venv=$("$root/scripts/python-env.sh"); then
  echo "SKIP: torch could not be installed into the Python environment (see above)"
  exit 77
fi
py="$venv/bin/python"
(cd "$root/python" && MAX_JOBS=2 COLLIE_BUILD_DIR="$build" "$py" setup.py -q build \
  --build-base "$build/python" --build-lib "$build/python/lib" >"$build/python-build.log" 2>&1) ||
  { cat "$build/python-build.log"; exit 1; }
export PYTHONPATH="$build/python/lib${PYTHONPATH:+:$PYTHONPATH}"
export COLLIE_TIMEOUT="${COLLIE_TIMEOUT:-20s}"
export OMP_NUM_THREADS=1

timeout 600 "$py" "$here/torch_ddp_test.py"
timeout 120 "$py" "$here/torch_dead_peer_test.py"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
timeout 180 "$collie" run -n 2 -- "$py" "$here/torch_launch_check.py" >"$tmp/collie_run.log" 2>&1 ||
  { cat "$tmp/collie_run.log"; echo "FAIL: under collie run"; exit 1; }
[[ $(grep -o "launch check ok" "$tmp/collie_run.log" | wc -l) == 2 ]] ||
  { cat "$tmp/collie_run.log"; echo "FAIL: under collie run"; exit 1; }
echo "collie run: ok"
timeout 180 "$py" -m torch.distributed.run --standalone --nproc_per_node 2 \
  "$here/torch_launch_check.py" >"$tmp/torchrun.log" 2>&1 ||
  { cat "$tmp/torchrun.log"; echo "FAIL: under torchrun"; exit 1; }
[[ $(grep -o "launch check ok" "$tmp/torchrun.log" | wc -l) == 2 ]] ||
  { cat "$tmp/torchrun.log"; echo "FAIL: under torchrun"; exit 1; }
echo "torchrun: ok"
