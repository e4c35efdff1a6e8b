#!/usr/bin/env bash
# PyTorch's own NCCL backend on collie's libnccl.so.2, the part a machine without a GPU
# can check:
#   1. every nccl* function that the installed torch's libtorch_cuda.so imports is
#      exported by collie's libnccl.so.2 (a missing one ends the process with "symbol
#      lookup error" the first time torch calls it);
#   2. with LD_PRELOAD naming collie's library, torch's own calls reach collie:
#      torch.cuda.nccl.unique_id() (ncclGetUniqueId, no device needed) returns collie's
#      id, which starts with "CLID";
#   3. LD_LIBRARY_PATH alone is reported, not required: pip's torch finds the wheel's
#      libnccl.so.2 through its RPATH, which the loader searches before LD_LIBRARY_PATH.
#   torch_nccl_imports.sh <collie's libnccl.so.2>
# Exit 77 (skipped) when torch cannot be installed or is a CPU-only build (no
# libtorch_cuda.so: it imports no NCCL).
set -euo pipefail
lib="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! venv=$("$root/scripts/python-env.sh"); then
  echo "SKIP: torch could not be installed into the Python environment (see above)"
  exit 77
fi
py="$venv/bin/python"
torch_lib=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
if [[ ! -f "$torch_lib/libtorch_cuda.so" ]]; then
  echo "SKIP: $torch_lib has no libtorch_cuda.so (a CPU-only torch imports no NCCL)"
  exit 77
fi
version=$("$py" -c 'import torch; print(torch.__version__)')

imports=$(nm -D --undefined-only "$torch_lib/libtorch_cuda.so" | awk '$2 ~ /^nccl/ { print $2 }' | sort -u)
exports=$(nm -D --defined-only "$lib" | awk '$2 == "T" && $3 ~ /^nccl/ { print $3 }' | sort -u)
missing=$(comm -23 <(printf '%s\n' "$imports") <(printf '%s\n' "$exports"))
if [[ -n "$missing" ]]; then
  echo "FAIL: torch $version imports NCCL functions that $lib does not export:"
  printf '  %s\n' $missing
  exit 1
fi
echo "ok: $lib exports all $(printf '%s\n' "$imports" | wc -l) nccl* functions torch $version imports"

probe='import torch
try:
    print(bytes(torch.cuda.nccl.unique_id()[:4]).decode("latin-1"))
except RuntimeError as e:
    print("error: " + str(e).splitlines()[0])'
preloaded=$(LD_PRELOAD="$lib" "$py" -c "$probe")
if [[ "$preloaded" != "CLID" ]]; then
  echo "FAIL: with LD_PRELOAD=$lib, torch.cuda.nccl.unique_id() did not come from collie: $preloaded"
  exit 1
fi
echo "ok: with LD_PRELOAD, torch $version calls collie's ncclGetUniqueId"
by_path=$(LD_LIBRARY_PATH="$(dirname "$lib")" "$py" -c "$probe")
if [[ "$by_path" == "CLID" ]]; then
  echo "note: LD_LIBRARY_PATH alone also loads collie's library into this torch"
else
  echo "note: with LD_LIBRARY_PATH alone torch $version keeps the wheel's libnccl.so.2 (RPATH): $by_path"
fi
