#!/usr/bin/env bash
# Compares collie's all-reduce with Open MPI's on 2 local ranks (float sum, out of place).
#
# Usage: bench/compare_mpi.sh [--transport shm|tcp] [--build DIR] [--trials N] [--sizes "8 4K ..."]
#   shm compares against Open MPI's shared-memory btl (self,vader), tcp against self,tcp.
# Each size is measured --trials times (default 5) for each library; a trial's time is
# the slowest rank's average per call, and the table shows the median over trials.
# busbw = size / time * 2(n-1)/n (= algbw for 2 ranks); ratio = collie time / MPI time.
set -euo pipefail

transport=shm
build=build
trials=5
sizes="8 4K 1M 64M"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --transport) transport=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "compare_mpi.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$transport" in
  shm) btl=self,vader ;;
  tcp) btl=self,tcp ;;
  *) echo "compare_mpi.sh: --transport must be shm or tcp" >&2; exit 2 ;;
esac

collie="$build/bin/collie"
[[ -x "$collie" ]] || { echo "compare_mpi.sh: $collie not found; build first (ninja -C $build collie_cli)" >&2; exit 1; }

# Open MPI, installed on demand (idempotent).
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  echo "compare_mpi.sh: installing openmpi-bin libopenmpi-dev" >&2
  apt-get update -qq && apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpibench="$build/bench/mpi_allreduce"
if [[ ! -x "$mpibench" ]]; then
  mpibench="$tmp/mpi_allreduce"
  mpicc -O2 -o "$mpibench" "$(dirname "$0")/mpi_allreduce.c"
fi

bytes_of() {  # 4K -> 4096
  local s=$1
  case "$s" in
    *K) echo $(( ${s%K} << 10 )) ;; *M) echo $(( ${s%M} << 20 )) ;; *G) echo $(( ${s%G} << 30 )) ;;
    *) echo "$s" ;;
  esac
}
iters_for() {  # about 256 MiB moved per trial, between 5 and 1000 calls
  local n=$(( (256 << 20) / $1 ))
  (( n > 1000 )) && n=1000
  (( n < 5 )) && n=5
  echo "$n"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf "# allreduce float sum, 2 ranks, transport %s (Open MPI btl %s), median of %d trials\n" \
  "$transport" "$btl" "$trials"
printf "%12s  %14s %12s  %14s %12s  %8s\n" "size(B)" "collie(us)" "busbw(GB/s)" \
  "OpenMPI(us)" "busbw(GB/s)" "ratio"
for s in $sizes; do
  bytes=$(bytes_of "$s")
  iters=$(iters_for "$bytes")
  warmup=$(( iters / 10 > 2 ? iters / 10 : 2 ))
  : >"$tmp/collie_times"
  for ((t = 0; t < trials; t++)); do
    "$collie" run -n 2 -- "$collie" perf allreduce -b "$bytes" -e "$bytes" -n "$iters" \
      -w "$warmup" -c 0 --transport "$transport" --json "$tmp/perf.json" >/dev/null
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["out_of_place"]["time_us"])' \
      "$tmp/perf.json" >>"$tmp/collie_times"
  done
  collie_us=$(median <"$tmp/collie_times")
  mpi_us=$(mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 --mca btl "$btl" \
      "$mpibench" -b "$bytes" -e "$bytes" -f 2 -n "$iters" -w "$warmup" -t "$trials" 2>/dev/null |
    awk '!/^#/ { print $2 }')
  awk -v b="$bytes" -v c="$collie_us" -v m="$mpi_us" 'BEGIN {
    printf "%12d  %14.2f %12.3f  %14.2f %12.3f  %8.2f\n", b, c, b / c / 1e3, m, b / m / 1e3, c / m }'
done
