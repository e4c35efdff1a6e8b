#!/bin/sh
# Builds the libFuzzer targets with clang in their own build dir and runs each one.
# Usage: tests/fuzz/run_fuzzers.sh [seconds-per-target | -runs=N] [build-dir]
#   default: 20 seconds per target (CI); e.g. -runs=1000000 for the long run.
# Each target starts from its seed corpus (tests/fuzz/corpus/<target>/, read only;
# new inputs go to a scratch dir) and fails the script on any crash, leak or UBSan
# report. Prints the number of executions per target.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
budget=${1:-20}
build=${2:-$root/build-fuzz}
jobs=${COLLIE_BUILD_JOBS:-2}
# One target per core at a time (COLLIE_FUZZ_JOBS, default the build's jobs): each
# libFuzzer run is one process on one core, so two at once on the 2-core VM give each
# target the executions it got alone in half the wall time.
parallel=${COLLIE_FUZZ_JOBS:-$jobs}
case "$parallel" in
  '' | *[!0-9]* | 0)
    echo "run_fuzzers.sh: COLLIE_FUZZ_JOBS must be a positive integer, not '$parallel'" >&2
    exit 2
    ;;
esac
if ! command -v clang++ >/dev/null; then
  echo "run_fuzzers.sh: clang++ not found (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLLIE_BUILD_FUZZERS=ON -DCOLLIE_BUILD_TESTS=OFF -DCOLLIE_BUILD_BENCH=OFF \
    -DCOLLIE_WITH_CUDA=OFF -DCOLLIE_WITH_UCX=OFF -DCOLLIE_WITH_IBVERBS=OFF >/dev/null
fi
targets="store_protocol handshake unique_id shm_segment"
ninja -C "$build" -j"$jobs" $(for t in $targets; do echo "${t}_fuzz"; done) >/dev/null
case "$budget" in
  -*) limit=$budget ;;
  *) limit=-max_total_time=$budget ;;
esac
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
run_target() {
  mkdir -p "$scratch/$1"
  if COLLIE_DEBUG=NONE "$build/tests/fuzz/${1}_fuzz" "$limit" -print_final_stats=1 \
      -artifact_prefix="$scratch/$1-" "$scratch/$1" "$root/tests/fuzz/corpus/$1" \
      >"$scratch/$1.log" 2>&1; then
    echo ok >"$scratch/$1.result"
  else
    echo failed >"$scratch/$1.result"
  fi
}
started=0
for t in $targets; do
  run_target "$t" &
  started=$((started + 1))
  if [ $((started % parallel)) -eq 0 ]; then wait; fi
done
wait
status=0
for t in $targets; do
  log="$scratch/$t.log"
  if [ "$(cat "$scratch/$t.result" 2>/dev/null)" = ok ]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $t: ok, $runs executions"
  else
    echo "fuzz $t: FAILED" >&2
    tail -40 "$log" >&2
    ls "$scratch/$t"-crash-* "$scratch/$t"-leak-* 2>/dev/null >&2 || true
    status=1
  fi
done
exit $status
