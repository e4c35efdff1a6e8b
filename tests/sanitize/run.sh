#!/bin/sh
# Sanitizer runs: builds collie in its own build dir with COLLIE_SANITIZE=address
# (ASan+UBSan) or =thread (TSan) and runs the threads and multiprocess suites there with
# the reduced test matrix (COLLIE_TEST_QUICK=1); any sanitizer report fails the run
# (halt_on_error).
# Usage: tests/sanitize/run.sh address|thread [build-dir]
# Builds only the library, the collie CLI and the test binaries of those suites.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:?usage: run.sh address|thread [build-dir]}
build=${2:-$root/build-$mode}
jobs=${COLLIE_BUILD_JOBS:-2}
case "$mode" in
  address | thread) ;;
  *) echo "run.sh: mode must be address or thread" >&2; exit 2 ;;
esac
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLLIE_SANITIZE="$mode" -DCOLLIE_BUILD_BENCH=OFF -DCOLLIE_WITH_CUDA=OFF >/dev/null
fi
# The labels' test names come from ctest itself; build just their executables.
tests=$(cd "$build" && ctest -N -L '^(threads|multiprocess)$' | sed -n 's/^ *Test *#[0-9]*: //p')
targets="collie collie_cli fault_rank"
for t in $tests; do
  if ninja -C "$build" -t query "$t" >/dev/null 2>&1; then targets="$targets $t"; fi
done
ninja -C "$build" -j"$jobs" $targets >/dev/null
export COLLIE_TEST_QUICK=1
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0"
# Under TSan everything runs ~5-10x slower: give the deadlines room.
export COLLIE_TIMEOUT=${COLLIE_TIMEOUT:-120s}
cd "$build"
# Sanitized multiprocess runs of many ranks are slow on 2 cores: skip the 5..8-rank
# perf checks and the launcher matrix there (threads tests cover those paths), and
# under TSan the 20x kill -9 loops too (ASan runs them).
skip='perf_.*_n[5-8]_|perf_.*_n8_|launchers_test'
[ "$mode" = thread ] && skip="$skip|kill_rank_"
exec ctest --output-on-failure --timeout 600 -L '^(threads|multiprocess)$' -E "$skip" -j1
