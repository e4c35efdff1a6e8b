#!/bin/sh
# 2 namespace hosts x 2 ranks: every collective through `collie run --nnodes 2` with
# result checking, over the transport given ("tcp", "ucx" or "auto" = shm in a host;
# between hosts ucx when both have an RDMA wire in UCX, else tcp); then all-reduce with 1 rank per host (the tuner's 2-rank one-shot
# schedule up to 64 KiB, ring above), avg and min included. Exit 77 (skipped) when
# namespaces cannot be created.
# usage: netns_perf_checks.sh COLLIE HARNESS TRANSPORT
collie=$1
harness=$2
transport=$3
COLLIE_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export COLLIE_JOB_SECRET
# UCX would take shared memory between namespaces of one machine: keep it on the wire.
UCX_TLS=${UCX_TLS:-tcp}
export UCX_TLS
if [ "$transport" = tcp ]; then
  # To check below that tcp advertises the namespace's own address (COLLIE_SOCKET_IFNAME
  # unset: the first up non-loopback interface, the veth).
  COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=NET
  export COLLIE_DEBUG COLLIE_DEBUG_SUBSYS
fi
force=""
[ "$transport" = auto ] || force="--transport $transport"
subnet=$(( $$ % 200 + 10 ))
# A fresh port per job: a host that is quick to start the next job must not find the
# previous job's store (same secret) still serving on node 0.
cmd="port=29500; for coll in allreduce reducescatter allgather broadcast reduce; do
  port=\$((port + 1))
  $collie run --nnodes 2 --node-rank \$COLLIE_NETNS_INDEX --master \$COLLIE_NETNS_MASTER:\$port \
    -n 2 -- $collie perf \$coll -b 8 -e 1M -f 8 -c 1 -n 2 -w 1 $force || exit 1
done
for op in sum avg min; do
  port=\$((port + 1))
  $collie run --nnodes 2 --node-rank \$COLLIE_NETNS_INDEX --master \$COLLIE_NETNS_MASTER:\$port \
    -n 1 -- $collie perf allreduce -o \$op -b 8 -e 1M -f 8 -c 1 -n 2 -w 1 $force || exit 1
done"
out=$("$harness" --subnet "$subnet" --timeout 240 -- "$cmd" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAILED: harness exit $rc"; exit 1; }
# Every collective printed its table, with #wrong 0 everywhere.
tables=$(echo "$out" | grep -c "Out of bounds values : 0 OK")
[ "$tables" -eq 8 ] || { echo "FAILED: $tables of 8 collective runs passed"; exit 1; }
if [ "$transport" != auto ]; then
  echo "$out" | grep -q "transport to rank 1: $transport" || { echo "FAILED: not over $transport"; exit 1; }
else
  # The table names each rank's transport to the next: 0 -> 1 within a host (shm),
  # 1 -> 2 across hosts: ucx only with an RDMA wire; the namespaces have sockets only.
  echo "$out" | grep -q "Rank  0 .* transport to rank 1: shm" || { echo "FAILED: 0-1 not over shm"; exit 1; }
  echo "$out" | grep -q "Rank  1 .* transport to rank 2: tcp" || { echo "FAILED: 1-2 not over tcp"; exit 1; }
fi
if [ "$transport" = tcp ]; then
  for host in 0 1; do
    echo "$out" | grep "^\[host $host\]" | grep -q "tcp: rank .* listens on 10\.213\.$subnet\.$((host + 1)):" ||
      { echo "FAILED: tcp on host $host did not listen on 10.213.$subnet.$((host + 1))"; exit 1; }
  done
fi
echo "PASSED: 5 collectives over $transport, 2 hosts x 2 ranks; all-reduce 2 hosts x 1 rank"
