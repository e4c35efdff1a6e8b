#!/bin/sh
# Does the tuner pick well? For N ranks (default 4) and every power of two from 8 B to
# 64 MiB, times `collie perf allreduce` with auto and each forced algorithm of
# TUNE_CHECK_ALGOS (default "ring tree"; e.g. "ring tree board cma"). One cell (size,
# algorithm) is one short `collie run`; a round runs every size, and per size the
# algorithms back to back in an order that rotates from round to round, so that a change
# in machine load hits them alike. Each cell is the median over iterations (the slowest
# rank's median); the table shows per cell the median over ROUNDS rounds, their ratio
# auto / the fastest forced one, and "paired": the median over rounds of the same ratio
# taken within one round (cells run back to back, so load that drifts over minutes
# cancels). A paired ratio above 1.10 is flagged NO; exit status 1 if any is. A forced
# algorithm that cannot run a size (the board above its slot, direct on plain buffers)
# leaves its cell empty ("-"). TUNE_CHECK_STEP (default 2) is the size multiplier.
#
# Like with like: every run of one table uses the same tuning constants (the first run
# probes into a fresh cache, the others read it), so auto's ring or tree runs with the
# chunk and channels the forced one gets. On shm auto may choose a team collective
# (board, direct, cma; docs/decisions/team-collectives.md), which a forced ring or tree
# bypasses: the "auto runs" column shows the plan rank 0 logged ("board",
# "direct>cma>ring/1M/2": the team step's algorithms, then the schedule it falls back to). Warm-up is at least 32 MiB of traffic per cell, so
# that first-touch page faults in the shm FIFOs stay out of the timed iterations.
#
# Usage: bench/tune_check.sh [path/to/collie] [nranks] [rounds] [max bytes: 64M] [min bytes: 8]
# (TUNE_CHECK_RAW=file keeps every cell's figure; TUNE_CHECK_PERF_ARGS adds arguments to
# every `collie perf`, e.g. "-R 1" for registered buffers; TUNE_CHECK_WARMUP the least
# warm-up calls per cell (default 3; 20 keeps the engine's first 12 calls of a size from
# 512 KiB to 8 MiB, which time cma against the ring, out of the timed ones: the choice
# it then keeps, not what exploring it cost); TUNE_CHECK_ALGOS, TUNE_CHECK_STEP above.)
set -eu
COLLIE=${1:-build/bin/collie}
NRANKS=${2:-4}
ROUNDS=${3:-5}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export COLLIE_TUNE_CACHE="$OUT/cache"

bytes_of() {  # 256K -> 262144
  case "$1" in
    *K) echo $((${1%K} * 1024)) ;;
    *M) echo $((${1%M} * 1048576)) ;;
    *) echo "$1" ;;
  esac
}
MAX=$(bytes_of "${4:-64M}")
MIN=$(bytes_of "${5:-8}")
ALGOS="auto ${TUNE_CHECK_ALGOS:-ring tree}"
STEP=${TUNE_CHECK_STEP:-2}
PERF_ARGS=${TUNE_CHECK_PERF_ARGS:-}
WARM_MIN=${TUNE_CHECK_WARMUP:-3}
NALGOS=$(echo "$ALGOS" | wc -w)

# One cell: prints "algo size median_us".
cell() {
  algo=$1 size=$2
  iters=$((256 * 1048576 / size)); [ "$iters" -gt 200 ] && iters=200; [ "$iters" -lt 10 ] && iters=10
  warm=$((32 * 1048576 / size)); [ "$warm" -gt 1000 ] && warm=1000; [ "$warm" -lt "$WARM_MIN" ] && warm=$WARM_MIN
  COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=TUNE "$COLLIE" run -n "$NRANKS" -- "$COLLIE" perf allreduce \
    --algo "$algo" -b "$size" -e "$size" -w "$warm" -n "$iters" -c 0 $PERF_ARGS --json "$OUT/cell.json" \
    > "$OUT/cell.log" 2>&1 || {
    [ "$algo" = auto ] && { cat "$OUT/cell.log" >&2; exit 2; }
    return 0  # a forced algorithm that cannot run this size: no cell
  }
  median=$(awk '/"out_of_place"/ {o = 1} o && /"median_us"/ {gsub(/[^0-9.eE+-]/, "", $2); print $2; exit}' \
    "$OUT/cell.json")
  echo "$algo $size $median $round" >> "$OUT/all"
  if [ "$algo" = auto ]; then  # the plan rank 0 logged for this size
    plan=$(sed -n "s/.*rank 0: allreduce of $size bytes on [0-9]* ranks -> \([^ ]*\) (chunk.*/\1/p" \
      "$OUT/cell.log" | head -n 1)
    echo "$size ${plan:-?}" >> "$OUT/plans"
  fi
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
round=0
while [ "$round" -lt "$ROUNDS" ]; do
  size=$MIN
  while [ "$size" -le "$MAX" ]; do
    # rotate the order by the round number
    shift_by=$((round % NALGOS))
    order=$(echo "$ALGOS" | awk -v k="$shift_by" '{ for (i = 1; i <= NF; i++) printf "%s ", $(((i + k - 1) % NF) + 1) }')
    for algo in $order; do cell "$algo" "$size"; done
    size=$((size * STEP))
  done
  round=$((round + 1))
done

[ -n "${TUNE_CHECK_RAW:-}" ] && cp "$OUT/all" "$TUNE_CHECK_RAW"  # every cell: algo bytes us round
printf "# allreduce%s, %s ranks, median of %s interleaved rounds; load %s before, %s after\n" \
  "${PERF_ARGS:+ ($PERF_ARGS)}" "$NRANKS" "$ROUNDS" "$LOAD_BEFORE" "$(cut -d' ' -f1-3 /proc/loadavg)"
"$COLLIE" info --tuning | sed -n 's/^tuning constants: /# tuning constants: /p' | head -n 1
sort -u -k1,1n "$OUT/plans" > "$OUT/plans.sorted"
sort -k2,2n -k1,1 -k3,3g "$OUT/all" | awk -v plans="$OUT/plans.sorted" -v algos="$ALGOS" '
  BEGIN {
    while ((getline line < plans) > 0) { split(line, f, " "); plan[f[1]] = f[2] }
    na = split(algos, name, " ")
    printf "%10s", "bytes"
    for (a = 2; a <= na; a++) printf " %11s", name[a] "(us)"
    printf " %11s %9s %9s  %-22s %s\n", "auto(us)", "auto/best", "paired", "auto runs", "<=1.10"
  }
  function median(x, k,   i, j, t) {  # x[1..k], sorted here
    for (i = 2; i <= k; i++) for (j = i; j > 1 && x[j - 1] > x[j]; j--) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
    return k % 2 ? x[(k + 1) / 2] : (x[k / 2] + x[k / 2 + 1]) / 2
  }
  function column(a,   i, x) { for (i = 1; i <= n[a]; i++) x[i] = v[a, i]; return median(x, n[a]) }
  function flush(   a, best, c, u, k, x, round, best1, key, ratio, ok) {
    if (size == "") return
    best = -1
    printf "%10s", size
    for (a = 2; a <= na; a++) {
      if (n[name[a]] == 0) { printf " %11s", "-"; continue }
      c = column(name[a]); printf " %11.1f", c
      if (best < 0 || c < best) best = c
    }
    u = column("auto")
    k = 0  # auto over the fastest forced algorithm of the same round, cells run back to back
    for (round in seen) {
      if (!(("auto", round) in at)) continue
      best1 = -1
      for (a = 2; a <= na; a++) {
        key = name[a] SUBSEP round
        if ((key in at) && (best1 < 0 || at[key] < best1)) best1 = at[key]
      }
      if (best1 > 0) x[++k] = at["auto", round] / best1
    }
    ratio = k > 0 ? median(x, k) : 0
    ok = ratio <= 1.10 ? "yes" : "NO"
    if (ok == "NO") bad++
    printf " %11.1f %9.2f %9.2f  %-22s %s\n", u, (best > 0 ? u / best : 0), ratio, plan[size], ok
    delete n; delete v; delete at; delete seen
  }
  { if ($2 != size) { flush(); size = $2 } n[$1]++; v[$1, n[$1]] = $3; at[$1, $4] = $3; seen[$4] = 1 }
  END { flush(); printf "# %d of the sizes have auto more than 10%% slower than the best (paired ratio)\n", bad; exit bad > 0 }'
