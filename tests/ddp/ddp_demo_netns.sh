#!/bin/sh
# `collie ddp-demo` across 2 namespace hosts x 1 rank (`collie run --nnodes 2`): it
# finishes, prints the overlap figures and the bytes each rank sent. Exit 77 (skipped)
# when namespaces cannot be created.
# usage: ddp_demo_netns.sh COLLIE HARNESS
collie=$1
harness=$2
COLLIE_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
UCX_TLS=${UCX_TLS:-tcp}  # keep UCX on the wire between namespaces of one machine
export COLLIE_JOB_SECRET UCX_TLS
subnet=$(( $$ % 200 + 10 ))
port=$(( 30000 + $$ % 20000 ))
cmd="$collie run --nnodes 2 --node-rank \$COLLIE_NETNS_INDEX --master \$COLLIE_NETNS_MASTER:$port \
  -n 1 -- $collie ddp-demo --layers 4 --params-per-layer 65536 --ms-per-layer 3 --steps 3 \
  --bucket-cap-mb 0.3 --first-bucket-mb 0.1"
out=$("$harness" --subnet "$subnet" --timeout 120 -- "$cmd" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAILED: harness exit $rc"; exit 1; }
echo "$out" | grep -q "2 ranks, 4 layers" || { echo "FAILED: no header"; exit 1; }
echo "$out" | grep -q "communication hidden per step" || { echo "FAILED: no summary"; exit 1; }
# Between hosts the bytes go through sockets, so they are measured.
echo "$out" | grep -E "^\[host 0\] +2 " | grep -qv "n/a" || { echo "FAILED: bytes not measured"; exit 1; }
echo "PASSED: ddp-demo on 2 namespace hosts"
