#!/bin/sh
# kill -9 of one rank in the middle of a long all-reduce, N=4, through `collie run`.
# fault: kill -9 of one of 4 ranks mid all-reduce over tcp (collie run, 20 times) | every survivor fails naming the victim; the launcher exits 137 | kill_rank_tcp
# fault: kill -9 of one of 4 ranks mid all-reduce over the shm FIFO ring (20 times) | every survivor fails naming the victim; the launcher exits 137 | kill_rank_shm
# fault: kill -9 of one of 4 ranks mid all-reduce by cross-memory attach (20 times) | every survivor fails naming the victim; the launcher exits 137 | kill_rank_shm_cma
# Usage: kill_rank_test.sh COLLIE FAULT_RANK TRANSPORT [REPS]   (REPS: 20; 8 in the quick matrix)
# Each repetition kills another rank (rep % 4). Passes when, every time: the launcher
# exits 137 naming "rank V killed by signal SIGKILL"; every survivor failed with an
# error naming rank V, within COLLIE_TIMEOUT of the kill; nothing hung. Prints the
# worst and median detection times (ms from the kill to each survivor's error).
set -u
collie=$1
prog=$2
transport=$3
# The sanitizer runs (COLLIE_TEST_QUICK) kill 8 times: every rank twice (under ASan each
# repetition takes about a second).
default_reps=20
case "${COLLIE_TEST_QUICK:-}" in '' | 0) ;; *) default_reps=8 ;; esac
reps=${4:-$default_reps}
timeout_s=5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL ($transport, rep $rep): $*" >&2; failures=$((failures + 1)); }
: >"$tmp/latencies"
rep=0
while [ "$rep" -lt "$reps" ]; do
  victim=$((rep % 4))
  out="$tmp/rep$rep"
  mkdir -p "$out"
  start=$(date +%s)
  COLLIE_TIMEOUT=${timeout_s}s COLLIE_TRANSPORT=$transport COLLIE_DEBUG=NONE \
    timeout 60 "$collie" run -n 4 --grace 10 -- "$prog" "$victim" 150 "$out" 2>"$out/stderr"
  status=$?
  elapsed=$(( $(date +%s) - start ))
  [ "$status" -eq 137 ] || fail "launcher exited $status, expected 137 (SIGKILLed rank)"
  grep -q "rank $victim killed by signal SIGKILL" "$out/stderr" ||
    fail "launcher did not name rank $victim: $(head -5 "$out/stderr")"
  [ "$elapsed" -lt 30 ] || fail "the job took ${elapsed}s"
  if [ -f "$out/killed" ]; then
    killed=$(cat "$out/killed")
    r=0
    while [ "$r" -lt 4 ]; do
      if [ "$r" -ne "$victim" ]; then
        if [ ! -f "$out/rank$r" ]; then
          fail "survivor $r reported nothing (killed by the launcher while still waiting?)"
        else
          at=$(head -1 "$out/rank$r")
          message=$(tail -n +2 "$out/rank$r")
          echo "$message" | grep -q "rank $victim" || fail "survivor $r does not name rank $victim: $message"
          ms=$(( (at - killed) / 1000 ))
          [ "$ms" -le $((timeout_s * 1000)) ] || fail "survivor $r needed ${ms} ms"
          echo "$ms" >>"$tmp/latencies"
        fi
      fi
      r=$((r + 1))
    done
  else
    fail "the victim did not record its kill"
  fi
  rep=$((rep + 1))
done
sort -n "$tmp/latencies" >"$tmp/sorted"
count=$(wc -l <"$tmp/sorted")
if [ "$count" -gt 0 ]; then
  median=$(sed -n "$(( (count + 1) / 2 ))p" "$tmp/sorted")
  worst=$(tail -1 "$tmp/sorted")
  echo "kill_rank_test $transport: $reps runs, $count survivor reports, time to error median ${median} ms, worst ${worst} ms"
fi
[ "$failures" -eq 0 ] && echo "kill_rank_test $transport: all passed"
exit "$failures"
