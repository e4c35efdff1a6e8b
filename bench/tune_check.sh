#!/bin/sh
# Does the tuner pick well? For N ranks (default 4) and sizes 8 B..64 MiB (x4 steps) runs
# `collie perf allreduce` with --algo ring, tree and auto, ROUNDS times each and
# interleaved (ring, tree, auto, ring, ...) so that a change in machine load hits all
# three alike, and prints per size the median out-of-place time of each and whether
# auto is within 10% of the faster of ring and tree. Exit status 1 when it is not.
# Usage: bench/tune_check.sh [path/to/collie] [nranks] [rounds]
set -eu
COLLIE=${1:-build/bin/collie}
NRANKS=${2:-4}
ROUNDS=${3:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
round=1
while [ "$round" -le "$ROUNDS" ]; do
  for algo in ring tree auto; do
    "$COLLIE" run -n "$NRANKS" -- "$COLLIE" perf allreduce --algo "$algo" -b 8 -e 64M -f 4 \
      -w 3 -n 10 -c 0 | awk -v a="$algo" '$1 ~ /^[0-9]+$/ {print a, $1, $6}' >> "$OUT/all"
  done
  round=$((round + 1))
done
printf "# allreduce, %s ranks, median of %s interleaved rounds (load: %s)\n" "$NRANKS" "$ROUNDS" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
printf "%10s %12s %12s %12s  %s\n" bytes "ring(us)" "tree(us)" "auto(us)" "auto<=1.1*best"
sort -k2,2n -k1,1 -k3,3g "$OUT/all" | awk '
  function flush(   best, ok, m) {
    if (size == "") return
    for (a in n) { m[a] = v[a, int((n[a] + 1) / 2)] }
    best = m["ring"] < m["tree"] ? m["ring"] : m["tree"]
    ok = (m["auto"] <= 1.1 * best) ? "yes" : "NO"
    if (ok == "NO") bad++
    printf "%10s %12s %12s %12s  %s\n", size, m["ring"], m["tree"], m["auto"], ok
    delete n; delete v
  }
  { if ($2 != size) { flush(); size = $2 } n[$1]++; v[$1, n[$1]] = $3 }
  END { flush(); exit bad > 0 }'
