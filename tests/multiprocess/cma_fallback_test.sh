#!/bin/sh
# Cross-memory attach between processes: exact all-reduces on plain buffers with it
# allowed, and with one rank denied (seccomp EPERM) every rank falls back to the FIFO
# ring, saying so once in the log.
# Usage: cma_fallback_test.sh COLLIE CMA_RANK
set -u
collie=$1
prog=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
# COLLIE_TUNE_ADAPT_MAX=0: the tuner's plan on every call (no ring calls timed against cma).
# Fixed tuning constants with a slow FIFO (2 GB/s against cma's modelled 37): the model then
# offers cma whatever this machine's probe (or a probe cached under load) would have said.
export COLLIE_SHM_CMA_MAX=1G COLLIE_TIMEOUT=60s COLLIE_TUNE_ADAPT_MAX=0
export COLLIE_TUNE_ALPHA_US=10 COLLIE_TUNE_BW_GBPS=2
for n in 2 3; do
  timeout 120 "$collie" run -n $n -- "$prog" -1 >"$tmp/out" 2>&1 ||
    { echo "FAIL: $n ranks, cross-memory allowed:"; cat "$tmp/out"; failures=$((failures + 1)); }
  timeout 120 "$collie" run -n $n -- "$prog" $((n - 1)) >"$tmp/out" 2>&1 ||
    { echo "FAIL: $n ranks, rank $((n - 1)) denied:"; cat "$tmp/out"; failures=$((failures + 1)); }
  grep -q "cannot use cross-memory attach" "$tmp/out" ||
    { echo "FAIL: $n ranks: no log line about the fallback:"; cat "$tmp/out"; failures=$((failures + 1)); }
done
# An all-reduce that fits the one-shot board (128 KiB) takes cross-memory attach too
# when it is above COLLIE_SHM_CMA_MIN and the ranks do not outnumber the cores.
if [ "$(nproc)" -ge 2 ]; then
  for denied in -1 1; do
    COLLIE_SHM_CMA_MIN=64K timeout 120 "$collie" run -n 2 -- "$prog" $denied 32771 >"$tmp/out" 2>&1 ||
      { echo "FAIL: 128 KiB, 2 ranks, denied rank $denied:"; cat "$tmp/out"; failures=$((failures + 1)); }
  done
else
  echo "skipped the 128 KiB case: needs 2 cores"
fi
echo "cma_fallback_test: $failures failure(s)"
[ "$failures" -eq 0 ]
