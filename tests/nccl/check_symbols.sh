#!/bin/sh
# check_symbols.sh LIB...: every NCCL entry point collie implements is exported by
# each LIB (nm -D, defined text symbols). Prints the missing ones and fails.
set -eu
symbols="ncclGetVersion ncclGetUniqueId ncclCommInitRank ncclCommInitRankConfig
ncclCommInitAll ncclCommFinalize ncclCommDestroy ncclCommAbort ncclCommGetAsyncError
ncclCommCount ncclCommCuDevice ncclCommUserRank ncclCommSplit ncclGetErrorString
ncclGetLastError ncclAllReduce ncclBroadcast ncclBcast ncclReduce ncclAllGather
ncclReduceScatter ncclSend ncclRecv ncclGroupStart ncclGroupEnd ncclRedOpCreatePreMulSum
ncclRedOpDestroy ncclMemAlloc ncclMemFree ncclCommRegister ncclCommDeregister"
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
