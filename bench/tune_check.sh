#!/bin/sh
# Does the tuner pick well? For 4 ranks and sizes 8 B..64 MiB (x4 steps) runs
# `collie perf allreduce` with --algo ring, tree and auto, and prints the three
# out-of-place times and whether auto is within 10% of the faster of ring and tree.
# Usage: bench/tune_check.sh [path/to/collie] [nranks]
set -eu
COLLIE=${1:-build/bin/collie}
NRANKS=${2:-4}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for algo in ring tree auto; do
  "$COLLIE" run -n "$NRANKS" -- "$COLLIE" perf allreduce --algo "$algo" -b 8 -e 64M -f 4 \
    -w 3 -n 10 -c 0 > "$OUT/$algo.txt"
done
perf_times() { awk '$1 ~ /^[0-9]+$/ {print $1, $6}' "$OUT/$1.txt"; }
perf_times ring > "$OUT/r"; perf_times tree > "$OUT/t"; perf_times auto > "$OUT/a"
printf "%10s %12s %12s %12s  %s\n" bytes "ring(us)" "tree(us)" "auto(us)" "auto<=1.1*best"
join "$OUT/r" "$OUT/t" | join - "$OUT/a" | awk '{
  best = $2 < $3 ? $2 : $3; ok = ($4 <= 1.1 * best) ? "yes" : "NO";
  if (ok == "NO") bad++;
  printf "%10s %12s %12s %12s  %s\n", $1, $2, $3, $4, ok }
  END { exit bad > 0 }'
