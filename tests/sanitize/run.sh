#!/bin/sh
# Sanitizer runs: builds collie in its own build dir with COLLIE_SANITIZE=address
# (ASan+UBSan) or =thread (TSan) and runs the threads and multiprocess suites there with
# the reduced test matrix (COLLIE_TEST_QUICK=1); any sanitizer report fails the run
# (halt_on_error). ASan+UBSan also runs the unit tests labelled asan_unit: the host
# kernels and UCX's reducing receive at every byte address, where UBSan's alignment
# checks matter (about 40 s; single-threaded, so TSan would find nothing there).
# Usage: tests/sanitize/run.sh address|thread [build-dir]
#   COLLIE_SANITIZE_ONLY=regex limits the run (and the build) to matching test names.
# Builds only the library, the collie CLI and the test binaries of those suites.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:?usage: run.sh address|thread [build-dir]}
build=${2:-$root/build-$mode}
mkdir -p "$build"
build=$(cd "$build" && pwd)
jobs=${COLLIE_BUILD_JOBS:-2}
case "$mode" in
  address | thread) ;;
  *) echo "run.sh: mode must be address or thread" >&2; exit 2 ;;
esac
# UCX's libucm hooks madvise() and takes a rwlock in it while a thread exits, after
# TSan has torn down the thread's state: every TSan test then dies with SIGSEGV. So the
# TSan build leaves UCX out (the ASan build keeps it and runs the ucx tests).
ucx=AUTO
[ "$mode" = thread ] && ucx=OFF
# Optimisation and debug info: ASan+UBSan compiles 2.2x faster at -O1 -g1 than at
# RelWithDebInfo's -O2 -g (tools/collie_main.cc: 22.7 against 50.1 s; the whole ASan
# build took 630 s of a 27-minute CI run), and -O1 is what ASan's own documentation
# recommends. -g1 keeps the line tables that the reports' stack traces need. TSan stays
# at -O2, where its tests run (they take three quarters of its time).
opt="-O1 -g1"
[ "$mode" = thread ] && opt="-O2 -g1"
# Unity build (COLLIE_UNITY_BUILD): the library's and the CLI's sources compile in
# batches of 16, which halves the sanitizer build's CPU time for the library (ASan: 143 s
# of user time against 285 s). The normal build stays one file per compile, so it still
# catches a source that does not stand alone.
# Compiler: clang where it is installed (scripts/install-deps.sh installs it), else the
# default. Measured on the 2-core VM (docs/decisions/sanitizer-compiler.md): clang 14
# compiled the ASan build in 0.74x gcc 12's CPU time and its ASan run took 0.71x as long;
# the normal build stays gcc, so CI compiles collie with both. COLLIE_SANITIZE_CC and
# COLLIE_SANITIZE_CXX choose another pair (e.g. gcc g++).
cc=${COLLIE_SANITIZE_CC:-}
cxx=${COLLIE_SANITIZE_CXX:-}
if [ -z "$cc$cxx" ] && command -v clang++ >/dev/null 2>&1 && command -v clang >/dev/null 2>&1; then
  cc=clang
  cxx=clang++
fi
compilers=""
[ -n "$cc" ] && compilers="-DCMAKE_C_COMPILER=$cc"
[ -n "$cxx" ] && compilers="$compilers -DCMAKE_CXX_COMPILER=$cxx"
if [ ! -f "$build/build.ninja" ]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $compilers \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt -DNDEBUG" \
    -DCOLLIE_SANITIZE="$mode" -DCOLLIE_BUILD_BENCH=OFF -DCOLLIE_WITH_CUDA=OFF \
    -DCOLLIE_WITH_UCX="$ucx" -DCOLLIE_UNITY_BUILD=ON >/dev/null
else
  cmake "$build" >/dev/null  # refresh the test list before asking ctest for it
fi
# Build exactly what the selected tests run: each test named after its executable
# target, and every absolute argument of a test command that lies in the build dir (the
# collie CLI, helpers; ninja takes output paths as targets).
# torch_backend loads collie into a stock Python, which cannot host the sanitizer
# runtimes.
# fd_limit_test fills the descriptor table on purpose; the sanitizers' runtime needs
# descriptors of its own (UBSan probes memory through a pipe and then reports a false
# 'invalid vptr'), so it runs in the normal build only.
skip='perf_.*_n[5-8]_|perf_.*_n8_|launchers_test|torch_backend|fd_limit_test'
# Under TSan also registered_test: its ranks are threads that reach each other's
# registered buffers at one address but order those accesses through flags on the shm
# board, which each rank maps at an address of its own. TSan cannot see that
# happens-before edge and reports the (checked, correct) accesses as races. The ASan
# run covers registered_test, and the multiprocess -R 1 runs stay under TSan.
# c_api_test's registered all-reduce is the same case through the C API.
[ "$mode" = thread ] && skip="$skip|kill_rank_|registered_test|c_api_test"
only=${COLLIE_SANITIZE_ONLY:-.}
labels='^(threads|multiprocess)$'
[ "$mode" = address ] && labels='^(threads|multiprocess|asan_unit)$'
[ "$mode" = thread ] && labels='^(threads|multiprocess|tsan_unit)$'
targets=$(cd "$build" && ctest --show-only=json-v1 -L "$labels" -E "$skip" -R "$only" |
  python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
outs = set()
for test in json.load(sys.stdin).get("tests", []):
    outs.add("test:" + test["name"])
    for arg in test.get("command", []):
        path = os.path.realpath(arg)
        if os.path.isabs(arg) and path.startswith(build + os.sep):
            outs.add(os.path.relpath(path, build))
print(" ".join(sorted(outs)))
' "$build")
names=""
for t in $targets; do
  case "$t" in
    test:*) ninja -C "$build" -t query "${t#test:}" >/dev/null 2>&1 && names="$names ${t#test:}" ;;
    # Paths in the build dir that no rule makes (the /dev/shm guards' snapshot files)
    # are data, not targets.
    *) ninja -C "$build" -t query "$t" >/dev/null 2>&1 && names="$names $t" ;;
  esac
done
# Plus every helper program of the multiprocess tests (a CI run once ran the device
# tests without their helper built; building the folder's phony "all" is cheap).
targets="collie collie_cli tests/multiprocess/all $names"
# The build's output only when it fails (its last 60 lines: the compiler's errors).
if ! ninja -C "$build" -j"$jobs" $targets >"$build/sanitize-build.log" 2>&1; then
  tail -n 60 "$build/sanitize-build.log"
  echo "run.sh: the $mode build failed (whole log: $build/sanitize-build.log)" >&2
  exit 1
fi
export COLLIE_TEST_QUICK=1
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0:suppressions=$root/tests/sanitize/tsan.supp"
# Under TSan everything runs ~5-10x slower: give the deadlines room.
export COLLIE_TIMEOUT=${COLLIE_TIMEOUT:-120s}
cd "$build"
# Two tests at a time (COLLIE_SANITIZE_TEST_JOBS): most of them wait on their peers more
# than they compute. The ASan run's 122 tests took 266 s at -j2 where their times add up
# to 530 s, all passing at a load average of 10-20.
# Sanitized multiprocess runs of many ranks are slow on 2 cores: $skip drops the
# 5..8-rank perf checks and the launcher matrix (threads tests cover those paths), and
# under TSan the 20x kill -9 loops too (ASan runs them).
exec ctest --output-on-failure --timeout 600 -L "$labels" -E "$skip" -R "$only" -j"${COLLIE_SANITIZE_TEST_JOBS:-2}"
