#!/bin/sh
# `collie run --nnodes` without namespaces: argument errors, and a 2-node job whose two
# launchers run on this host (loopback master), checked end to end.
# usage: launcher_multinode_checks.sh COLLIE
collie=$1
fail() { echo "FAILED: $*"; exit 1; }

unset COLLIE_JOB_SECRET
out=$("$collie" run --nnodes 2 --node-rank 0 --master 127.0.0.1:29999 -n 1 -- true 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q COLLIE_JOB_SECRET || fail "missing secret not refused: $out"
export COLLIE_JOB_SECRET=0123456789abcdef0123456789abcdef
out=$("$collie" run --nnodes 2 --node-rank 0 --master 127.0.0.1 -n 1 -- true 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "HOST:PORT" || fail "master without port not refused: $out"
out=$("$collie" run --nnodes 2 --node-rank 2 --master 127.0.0.1:29999 -n 1 -- true 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "node-rank" || fail "bad node rank not refused: $out"
COLLIE_JOB_SECRET=xyz "$collie" run --nnodes 2 --master 127.0.0.1:29999 -n 1 -- true 2>/dev/null
[ $? -eq 2 ] || fail "malformed secret not refused"
# fault: collie run --nnodes on node 0 with a --master address that is not this host's | refused
# naming COLLIE_STORE_BIND, nothing listens (before: the store listened on every interface) |
# launcher_multinode_checks
# (Only a bind is tried, on an address of the project's test range that no interface here has;
# nothing is sent.)
out=$(COLLIE_TIMEOUT=5s "$collie" run --nnodes 2 --node-rank 0 --master 10.213.255.254:29999 -n 1 \
  -- true 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "COLLIE_STORE_BIND" ||
  fail "non-local master not refused: $out"

# Two launchers on this host: global ranks 0..3, every element checked.
COLLIE_JOB_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export COLLIE_JOB_SECRET
# Below the kernel's ephemeral range (32768-60999 by default): a port in it may be held
# by another test's outgoing connection, and node 1 would then wait out COLLIE_TIMEOUT.
port=$(( 20000 + $$ % 12000 ))
"$collie" run --nnodes 2 --node-rank 1 --master 127.0.0.1:$port -n 2 -- \
  "$collie" perf allreduce -b 8 -e 64K -f 8 -n 1 -w 1 -c 1 > /tmp/collie_mn_$$.1 2>&1 &
node1=$!
out=$("$collie" run --nnodes 2 --node-rank 0 --master 127.0.0.1:$port -n 2 -- \
  "$collie" perf allreduce -b 8 -e 64K -f 8 -n 1 -w 1 -c 1 2>&1)
rc0=$?
wait $node1
rc1=$?
cat /tmp/collie_mn_$$.1; rm -f /tmp/collie_mn_$$.1
echo "$out"
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "2-node job failed ($rc0, $rc1)"
echo "$out" | grep -q "nranks 4" || fail "not 4 ranks"
echo "$out" | grep -q "Out of bounds values : 0 OK" || fail "wrong results"
echo PASSED
