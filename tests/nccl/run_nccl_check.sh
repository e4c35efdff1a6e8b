#!/bin/sh
# run_nccl_check.sh COLLIE NPROCS PROGRAM [MODE]: runs PROGRAM under `collie run` with
# a fresh directory for the file through which rank 0 hands out its ncclUniqueId.
set -eu
collie=$1 nprocs=$2 program=$3
mode=${4:-}
dir=$(mktemp -d "${TMPDIR:-/tmp}/nccl_check.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$collie" run -n "$nprocs" -- "$program" "$dir/unique_id" $mode
