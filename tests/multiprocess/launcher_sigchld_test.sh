#!/bin/sh
# `collie run` finds its ranks' exits however SIGCHLD reaches it (found on an H200: under
# compute-sanitizer --target-processes all the launcher waited forever on exited ranks).
# Usage: launcher_sigchld_test.sh path/to/collie path/to/sigchld_preload.so
# Each case runs under `timeout 30`: a job of ranks that end at once must not reach it.
set -u
collie=$1
preload=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
# Under an AddressSanitizer build the preloaded library comes before ASan's runtime in the
# library list, which ASan refuses unless told not to check.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# fault: SIGCHLD never reaches collie run (a tool injected into it, compute-sanitizer's, takes it) | the job ends when its ranks do, with their status (before: the launcher waited forever on exited ranks) | launcher_sigchld_test
# fault: collie run started with SIGCHLD ignored | the ranks' status still decides the job's (before: the kernel reaped them and the launcher waited forever, SIGTERM included) | launcher_sigchld_test
# fault: another part of collie run's process reaps the ranks (a library's waitpid(-1)) | the job fails at once naming each rank whose status was lost | launcher_sigchld_test

# 1. SIGCHLD never reaches the launcher's signalfd (a tool's thread took it): the job
#    still ends when its ranks do, with their status.
for tag in "" "--tag-output"; do
  LD_PRELOAD=$preload timeout -k 5 30 "$collie" run -n 3 $tag -- sh -c 'sleep 0.2; exit 0' \
    > "$tmp/out" 2> "$tmp/err"
  status=$?
  [ "$status" -ne 124 ] || fail "no SIGCHLD$tag: collie run still waited after 30 s"
  [ "$status" -eq 0 ] || fail "no SIGCHLD$tag: status $status: $(cat "$tmp/err")"
  LD_PRELOAD=$preload timeout -k 5 30 "$collie" run -n 2 $tag -- sh -c 'test $COLLIE_RANK != 1 || exit 5' \
    > "$tmp/out" 2> "$tmp/err"
  status=$?
  [ "$status" -eq 5 ] || fail "no SIGCHLD$tag: a rank's exit 5 gave status $status"
  grep -q "rank 1 exited with status 5" "$tmp/err" || fail "no SIGCHLD$tag: rank 1 not named: $(cat "$tmp/err")"
done

# 2. Started with SIGCHLD ignored (kept across exec; the kernel would reap the ranks
#    itself): the status still reaches the job.
timeout -k 5 30 python3 -c 'import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.execv(sys.argv[1], sys.argv[1:])' "$collie" run -n 2 -- sh -c 'test $COLLIE_RANK != 0 || exit 3' \
  > "$tmp/out" 2> "$tmp/err"
status=$?
[ "$status" -eq 3 ] || fail "SIGCHLD ignored: expected status 3, got $status: $(cat "$tmp/err")"

# 3. Another part of the launcher's process reaps the ranks: their status is lost, and
#    the job fails naming them instead of waiting.
SIGCHLD_PRELOAD_STEAL=1 LD_PRELOAD=$preload timeout -k 5 30 "$collie" run -n 2 -- sh -c 'sleep 0.2' \
  > "$tmp/out" 2> "$tmp/err"
status=$?
[ "$status" -ne 124 ] || fail "reaped elsewhere: collie run still waited after 30 s"
[ "$status" -ne 0 ] || fail "reaped elsewhere: the job passed with its ranks' status unknown"
grep -q "status was lost" "$tmp/err" || fail "reaped elsewhere: no rank named: $(cat "$tmp/err")"

[ "$failures" -eq 0 ] && echo "launcher_sigchld_test: all checks passed"
exit "$failures"
