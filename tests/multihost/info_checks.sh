#!/bin/sh
# `collie info` lists every built transport with its state on this host, without
# waiting for peers; with UCX_TLS=tcp, ucx reports no RDMA wire (so peers on other
# hosts use tcp). usage: info_checks.sh COLLIE WITH_UCX(0|1)
collie=$1
with_ucx=$2
out=$(UCX_TLS=tcp timeout 20 "$collie" info 2>&1) || { echo "$out"; echo "FAILED: collie info"; exit 1; }
echo "$out"
fail() { echo "FAILED: $1"; exit 1; }
echo "$out" | grep -Eq "^  tcp +priority 200 +usable" || fail "tcp not listed as usable"
echo "$out" | grep -Eq "^  shm +priority 100 +usable" || fail "shm not listed as usable"
if [ "$with_ucx" = 1 ]; then
  echo "$out" | grep -Eq "^  ucx +priority 150 +usable" || fail "ucx not listed as usable"
  echo "$out" | grep -q "RDMA wire: none (peers on other hosts use tcp" ||
    fail "ucx does not report that UCX_TLS=tcp leaves it no RDMA wire"
fi
echo "$out" | grep -Eq "^TCP congestion control: system default [a-z?]+; tcp's and UCX's sockets: cubic" ||
  fail "the congestion control line is missing or does not show the cubic default"
# One-rank probes: no transport waits for (or blames) a peer that does not exist.
if echo "$out" | grep -Eq "did not publish|before the deadline"; then
  fail "a probe waited for a peer"
fi
echo "PASSED: collie info lists the transports"
