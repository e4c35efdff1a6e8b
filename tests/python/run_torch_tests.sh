#!/usr/bin/env bash
# The PyTorch backend's tests: ensures the Python environment and builds torch_collie
# (torch_env.sh: installs torch on a fresh machine), then runs DDP + collectives vs
# gloo and the ProcessGroupGloo contract (torch_ddp_test.py with
# torch_contract_checks.py), the dead-peer check, point-to-point matched by tag
# (torch_p2p_tags_test.py), torch's flight recorder on collie groups
# (torch_flight_recorder_test.py), a call's heap allocations against torch's fake backend
# (torch_call_allocations_test.py) and the launcher checks (torchrun, collie run).
# Exit 77 (ctest: skipped) only when torch cannot be installed at all.
#   run_torch_tests.sh <path to the collie CLI> <build dir>
set -euo pipefail
collie="$1"
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/torch_env.sh" "$2"

timeout 600 "$py" "$here/torch_ddp_test.py"
timeout 120 "$py" "$here/torch_dead_peer_test.py"
timeout 180 "$py" "$here/torch_p2p_tags_test.py"
timeout 180 "$py" "$here/torch_flight_recorder_test.py"
timeout 300 "$py" "$here/torch_call_allocations_test.py"

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
