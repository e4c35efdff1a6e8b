#!/bin/sh
# Failed set-ups leave no shared memory behind (issue 22, item 9).
# Usage: shm_leak_test.sh COLLIE FAULT_RANK SHM_CONNECT_RANK
# fault: ranks disagree on COLLIE_NCHANNELS (2 and 4 ranks) or COLLIE_SHM_ONESHOT_MAX (collie run) | the job fails; no collie entry is left in /dev/shm | shm_leak_test
# fault: a rank SIGKILLed while it waits for its peer's shm segment or one-shot board, or the launcher SIGTERMed then | collie run removes the job's leftovers when it exits: nothing is left in /dev/shm (before: a 4 MiB segment or the board) | shm_leak_test
# fault: a rank SIGKILLed mid-collective over shm | nothing is left in /dev/shm | shm_leak_test
# Each job below fails through `collie run`; afterwards /dev/shm must hold no new
# collie-* entry that no process holds (tests/support/shm_leak_check.sh):
#   - 2 ranks disagree on COLLIE_NCHANNELS (a rank's FIFO segment used to stay; since
#     the join agreement they fail before connecting, and this keeps it so);
#   - 4 ranks, one with other COLLIE_NCHANNELS (used to leave ~100 MB);
#   - 2 ranks disagree on COLLIE_SHM_ONESHOT_MAX (its one-shot board used to stay);
#   - a rank SIGKILLed while it waits for its peers' segments, and while it waits for
#     their one-shot boards;
#   - the launcher SIGTERMed while a rank waits for its peers' segments;
#   - a rank SIGKILLed in the middle of 4 MiB all-reduces.
set -u
collie=$1
fault_rank=$2
connect_rank=$3
check="$(dirname "$0")/../support/shm_leak_check.sh"
tmp=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
failures=0
export COLLIE_DEBUG=NONE COLLIE_TRANSPORT=shm

# begin NAME: snapshot /dev/shm before scenario NAME's job.
begin() {
  scenario=$1
  sh "$check" snapshot "$tmp/$scenario.before"
}
finish() {
  # $1: the launcher's exit status (every scenario's job must fail).
  if [ "$1" -eq 0 ]; then
    echo "FAIL ($scenario): the job succeeded; it was meant to fail" >&2
    failures=$((failures + 1))
  fi
  if ! sh "$check" check "$tmp/$scenario.before" "$scenario" 5; then
    failures=$((failures + 1))
    sed 's/^/    /' "$tmp/$scenario.stderr" | head -20 >&2
  fi
}
# Waits up to 20 s for rank 0 (its pid in $tmp/rank0.pid, written by shm_connect_rank)
# to map a /dev/shm/collie-* entry matching $1 (grep pattern). Rank 0's own mappings, not
# any new entry: under ctest -j2 another test's segments come and go in /dev/shm, and
# killing rank 0 before it made its own left it waiting for its peer until COLLIE_TIMEOUT
# (30 s per scenario, seen under ASan).
wait_for_entry() {
  i=0
  while [ "$i" -lt 200 ]; do
    pid=$(sed -n '/^[0-9][0-9]*$/p' "$tmp/rank0.pid" 2>/dev/null)
    if [ -n "$pid" ] && grep -o '/dev/shm/collie-[^ ]*' "/proc/$pid/maps" 2>/dev/null |
      grep -q "$1"; then
      return 0
    fi
    sleep 0.1
    i=$((i + 1))
  done
  echo "FAIL ($scenario): rank 0 mapped no segment matching '$1'" >&2
  failures=$((failures + 1))
  return 1
}
perf="$collie perf allreduce -b 1M -e 1M -n 1 -w 0"

begin nchannels_n2
COLLIE_TIMEOUT=5s timeout 60 "$collie" run -n 2 -- \
  sh -c "COLLIE_NCHANNELS=\$((COLLIE_RANK + 1)) exec $perf" 2>"$tmp/$scenario.stderr"
finish $?

begin nchannels_n4
COLLIE_TIMEOUT=5s timeout 60 "$collie" run -n 4 -- \
  sh -c "COLLIE_NCHANNELS=\$((COLLIE_RANK == 3 ? 3 : 4)) exec $perf" 2>"$tmp/$scenario.stderr"
finish $?

begin oneshot_n2
COLLIE_TIMEOUT=5s timeout 60 "$collie" run -n 2 -- \
  sh -c "COLLIE_SHM_ONESHOT_MAX=\$((COLLIE_RANK * 4096 + 4096)) exec $perf" \
  2>"$tmp/$scenario.stderr"
finish $?

# Rank 0 holds its segment and waits for rank 1's, which never comes (shm_connect_rank
# absent); it is SIGKILLed as soon as the segment exists.
begin kill9_connect
rm -f "$tmp/rank0.pid"
COLLIE_TIMEOUT=30s timeout 60 "$collie" run -n 2 -- "$connect_rank" absent "$tmp/rank0.pid" \
  2>"$tmp/$scenario.stderr" &
job=$!
wait_for_entry . && kill -9 "$(cat "$tmp/rank0.pid")"
wait "$job"
finish $?
# Nobody but the launcher can remove a killed rank's segment: it did so through the shm
# transport's leftovers hook (TransportFactory::removeLauncherLeftovers) and says so.
if ! grep -q "collie run: removed [0-9]* item(s) the ranks left behind (shm): collie-" \
  "$tmp/$scenario.stderr"; then
  echo "FAIL ($scenario): the launcher did not report removing the killed rank's segment" >&2
  sed 's/^/    /' "$tmp/$scenario.stderr" | head -20 >&2
  failures=$((failures + 1))
fi

# Rank 1 connects without a one-shot board, so rank 0 holds its board and waits for
# rank 1's; it is SIGKILLed as soon as the board exists.
begin kill9_board
rm -f "$tmp/rank0.pid"
COLLIE_TIMEOUT=30s timeout 60 "$collie" run -n 2 -- "$connect_rank" noboard "$tmp/rank0.pid" \
  2>"$tmp/$scenario.stderr" &
job=$!
wait_for_entry board && kill -9 "$(cat "$tmp/rank0.pid")"
wait "$job"
finish $?

# As kill9_connect, but the launcher itself gets SIGTERM and forwards it: the ranks die
# by it, no destructor runs.
begin sigterm_launcher
rm -f "$tmp/rank0.pid"
COLLIE_TIMEOUT=30s timeout 60 "$collie" run -n 2 -- "$connect_rank" absent "$tmp/rank0.pid" \
  2>"$tmp/$scenario.stderr" &
job=$!
wait_for_entry . && kill -TERM "$job"
wait "$job"
finish $?

# Mid-collective: every segment was unlinked once connected, so nothing may appear.
begin kill9_collective
mkdir -p "$tmp/fault"
COLLIE_TIMEOUT=5s timeout 60 "$collie" run -n 2 --grace 10 -- "$fault_rank" 1 150 "$tmp/fault" \
  2>"$tmp/$scenario.stderr"
finish $?

if [ "$failures" -ne 0 ]; then
  echo "shm_leak_test: $failures failure(s)" >&2
  exit 1
fi
echo "shm_leak_test: no failed set-up left shared memory behind"
