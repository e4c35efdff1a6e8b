#!/bin/sh
# check_symbols.sh LIB...: every entry point of NCCL 2.28, and those of later NCCL that
# programs built against it import (PyTorch 2.15 imports each of the second list), is
# exported by each LIB with its pnccl* name (nm -D, defined text symbols). Prints the
# missing ones and fails. tests/python/torch_nccl_imports.sh checks against the imports
# of the torch that is installed.
set -eu
# NCCL 2.28's entry points, each also under its profiling name pnccl*.
entry_points="ncclGetVersion ncclGetUniqueId ncclCommInitRank ncclCommInitRankConfig
ncclCommInitRankScalable ncclCommInitAll ncclCommFinalize ncclCommDestroy ncclCommAbort
ncclCommRevoke ncclCommSplit ncclCommShrink ncclCommGetAsyncError ncclCommCount
ncclCommCuDevice ncclCommUserRank ncclCommRegister ncclCommDeregister
ncclCommWindowRegister ncclCommWindowDeregister ncclGetErrorString ncclGetLastError
ncclMemAlloc ncclMemFree ncclRedOpCreatePreMulSum ncclRedOpDestroy ncclAllReduce
ncclBroadcast ncclBcast ncclReduce ncclAllGather ncclReduceScatter ncclAlltoAll
ncclGather ncclScatter ncclSend ncclRecv ncclGroupStart ncclGroupEnd ncclGroupSimulateEnd
ncclWinGetUserPtr ncclCommGetUniqueId ncclCommGrow ncclCommSuspend ncclCommResume
ncclCommMemStats ncclPutSignal ncclSignal ncclWaitSignal ncclDevCommCreate
ncclDevCommDestroy ncclGetLsaMultimemDevicePointer ncclGetPeerDevicePointer"
symbols=""
for name in $entry_points; do symbols="$symbols $name p$name"; done
status=0
for lib in "$@"; do
  exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }')
  for symbol in $symbols; do
    if ! printf '%s\n' "$exported" | grep -qx "$symbol"; then
      echo "$lib does not export $symbol"
      status=1
    fi
  done
  [ $status -eq 0 ] && echo "$lib exports all $(echo $symbols | wc -w) NCCL symbols"
done
exit $status
