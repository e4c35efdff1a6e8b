#!/usr/bin/env bash
# tests/gpu/torch_nccl_dropin.py (PyTorch's NCCL backend on collie's libnccl.so.2, run on
# the GPU by scripts/gpu-check.sh) on CPU tensors through torch_collie, so that its cases
# and checks are exercised where there is no GPU.
#   run_torch_nccl_dropin_cpu.sh <build dir> <nranks> [--fault]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/torch_env.sh" "$1"
exec "$py" "$root/tests/gpu/torch_nccl_dropin.py" --backend collie --device cpu \
  --nranks "$2" --timeout 30 "${@:3}"
