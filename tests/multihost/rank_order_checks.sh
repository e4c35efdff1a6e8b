#!/bin/sh
# 2 and 3 namespace hosts x 2 ranks, ranks dealt to hosts in block and in cyclic order
# (`collie run --distribution`): every collective with result checking (#wrong 0 on
# every row), flat (in host order) and in two levels (--algo hier; all-reduce, broadcast
# and reduce also with a tree between 3 hosts, COLLIE_HIER_HOSTS=tree), the transport
# between ranks 0 and 1 as the order puts them (block: one host, shm; cyclic: two hosts, tcp),
# and the topology `collie info` prints under the launcher. Exit 77 (skipped) when
# namespaces cannot be created.
# usage: rank_order_checks.sh COLLIE HARNESS
collie=$1
harness=$2
COLLIE_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export COLLIE_JOB_SECRET
# Every run forces its algorithm: known constants spare each job the tuner's probes.
export COLLIE_TUNE_ALPHA_US=20 COLLIE_TUNE_BW_GBPS=2 COLLIE_TUNE_NET_ALPHA_US=50 \
  COLLIE_TUNE_NET_BW_GBPS=1
subnet=$(( $$ % 200 + 10 ))
for hosts in 2 3; do
  for order in block cyclic; do
    subnet=$(( subnet % 250 + 1 ))
    # A fresh port per job: node 0 may still serve the previous job's store.
    cmd="$collie run --nnodes $hosts --node-rank \$COLLIE_NETNS_INDEX \
        --master \$COLLIE_NETNS_MASTER:29700 -n 2 --distribution $order -- $collie info || exit 1
    port=29700; for run in allreduce:ring allreduce:hier allreduce:tree-hier \
        reducescatter:ring reducescatter:hier allgather:ring allgather:hier \
        broadcast:chain broadcast:hier broadcast:tree-hier reduce:chain reduce:hier \
        reduce:tree-hier; do
      port=\$((port + 1)); algo=\${run#*:}; stage=ring
      # A tree of 2 hosts is their chain: the tree runs on 3.
      [ \$algo = tree-hier ] && { [ $hosts -eq 2 ] && continue; algo=hier; stage=tree; }
      COLLIE_HIER_HOSTS=\$stage $collie run --nnodes $hosts --node-rank \$COLLIE_NETNS_INDEX \
        --master \$COLLIE_NETNS_MASTER:\$port -n 2 --distribution $order -- \
        $collie perf \${run%:*} -b 8 -e 256K -f 64 -c 1 -n 1 -w 0 -r 1 --algo \$algo || exit 1
    done"
    out=$("$harness" -k "$hosts" --subnet "$subnet" --timeout 180 -- "$cmd" 2>&1)
    rc=$?
    [ $rc -eq 77 ] && { echo "$out"; exit 77; }
    [ $rc -eq 0 ] || { echo "$out"; echo "FAILED: $hosts hosts, $order: harness exit $rc"; exit 1; }
    tables=$(echo "$out" | grep -c "Out of bounds values : 0 OK")
    runs=13
    [ "$hosts" -eq 2 ] && runs=10
    [ "$tables" -eq "$runs" ] ||
      { echo "$out"; echo "FAILED: $hosts hosts, $order: $tables of $runs runs checked OK"; exit 1; }
    # collie info under the launcher prints the topology: host 0 holds ranks 0,1 in
    # block order and 0,M in cyclic order.
    ranks0="0-1"
    [ "$order" = cyclic ] && ranks0="0,$hosts"
    echo "$out" | grep -q "host 0: ranks $ranks0\$" ||
      { echo "$out"; echo "FAILED: $hosts hosts, $order: collie info shows no 'host 0: ranks $ranks0'"; exit 1; }
    want=shm
    [ "$order" = cyclic ] && want=tcp
    echo "$out" | grep -q "Rank  0 .* transport to rank 1: $want" ||
      { echo "$out"; echo "FAILED: $hosts hosts, $order: rank 0 -> 1 not over $want"; exit 1; }
    echo "ok: $hosts hosts x 2 ranks, $order order: 5 collectives flat and hier ($runs runs), #wrong 0, 0 -> 1 over $want"
  done
done
echo "PASSED: every collective, flat and hier, on 2 and 3 hosts x 2 ranks in block and cyclic order"
