#!/usr/bin/env bash
# The job secret never fails open and never reaches a log (issue 22, items 2 and 3):
#  1. ranks started with torchrun variables refuse to start, at once and naming
#     COLLIE_JOB_SECRET and its form, when the secret is missing, malformed, prefixed
#     with 0x or all zeros; the malformed text is not echoed;
#  2. failing jobs (a rank that never arrives, a rank that dies before joining) print
#     errors, TRACE logs and flight-recorder dumps with no trace of the secret: neither
#     its hex nor any 8-digit piece of it.
# Usage: job_secret_test.sh path/to/collie
set -uo pipefail
collie="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
port=$(( 20000 + RANDOM % 12000 ))
perf=(perf allreduce -b 8 -e 8 -n 1 -w 0)

# fault: COLLIE_JOB_SECRET missing, malformed, 0x-prefixed or all zeros (torchrun start) | refused within 5 s naming COLLIE_JOB_SECRET and the form; the text is not echoed | job_secret_test
# 1. No default, zero or malformed secret.
refused() {  # label, then the COLLIE_JOB_SECRET assignment or "unset"
  local label=$1 value=$2 start status elapsed
  start=$(date +%s)
  if [ "$value" = unset ]; then
    env -u COLLIE_JOB_SECRET RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 60 "$collie" "${perf[@]}" >"$tmp/out" 2>&1
  else
    COLLIE_JOB_SECRET=$value RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 60 "$collie" "${perf[@]}" >"$tmp/out" 2>&1
  fi
  status=$?
  elapsed=$(( $(date +%s) - start ))
  [ "$status" -eq 2 ] || fail "$label: exit $status, want 2: $(cat "$tmp/out")"
  [ "$elapsed" -le 5 ] || fail "$label: took ${elapsed}s to refuse"
  grep -q "COLLIE_JOB_SECRET" "$tmp/out" || fail "$label: error does not name COLLIE_JOB_SECRET"
  grep -q "32 hex digits" "$tmp/out" || fail "$label: error does not give the form"
  grep -qi "unauthenticated\|all zeros" "$tmp/out" || fail "$label: error does not say why"
}
refused "missing secret" unset
refused "malformed secret" nothex-but-secret
grep -q "nothex-but-secret" "$tmp/out" && fail "the malformed secret was echoed"
refused "0x-prefixed secret" 0x0123456789abcdef0123456789abcdef
refused "all-zero secret" 00000000000000000000000000000000

# fault: a job fails (absent rank, killed rank) with TRACE logs and flight-recorder dumps | no 8-digit piece of the job secret anywhere in its output | job_secret_test
# 2. Nothing of the secret in what failing jobs print.
leaks() {  # file, secret hex: fails when the file holds the hex or any 8-digit piece
  local file=$1 hex=$2 i
  for ((i = 0; i + 8 <= ${#hex}; i++)); do
    if grep -qi "${hex:i:8}" "$file"; then
      fail "$file holds ${hex:i:8}, a piece of the job secret: $(grep -i "${hex:i:8}" "$file" | head -3)"
      return
    fi
  done
}
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# Rank 1 never arrives: rank 0 times out at creation.
COLLIE_JOB_SECRET=$secret RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  COLLIE_TIMEOUT=2s COLLIE_DEBUG=TRACE COLLIE_TRACE_DUMP=stderr \
  timeout 60 "$collie" "${perf[@]}" >"$tmp/absent.log" 2>&1
[ $? -ne 0 ] || fail "a job whose rank 1 never came succeeded"
grep -qi "timeout\|deadline" "$tmp/absent.log" || fail "no timeout error: $(cat "$tmp/absent.log")"
leaks "$tmp/absent.log" "$secret"
# Under collie run (its own secret, read from the unique id it hands out), rank 1 dies
# after joining and before the collective ends; --keep-going lets rank 0 report it.
COLLIE_TIMEOUT=2s COLLIE_DEBUG=TRACE COLLIE_TRACE_DUMP=stderr timeout 60 \
  "$collie" run --keep-going -n 2 -- sh -c 'echo "${COLLIE_UNIQUE_ID##*:}" >"$0/secret.$COLLIE_RANK";
    if [ "$COLLIE_RANK" = 1 ]; then (sleep 0.5; kill -9 $$) & fi;
    exec "$1" perf allreduce -b 64M -e 64M -n 1000 -w 0 -c 0' "$tmp" "$collie" \
  >"$tmp/killed.log" 2>&1
[ $? -ne 0 ] || fail "a job whose rank 1 was killed succeeded"
run_secret=$(cat "$tmp/secret.0")
[ ${#run_secret} -eq 32 ] || fail "could not read collie run's secret: '$run_secret'"
leaks "$tmp/killed.log" "$run_secret"
grep -q "rank 1 .*is gone\|rank 1 .*closed\|rank 1 .*died\|rank 1 did not join" "$tmp/killed.log" ||
  fail "rank 0's error does not name rank 1: $(grep -v '^#' "$tmp/killed.log" | tail -5)"
grep -q '"error"' "$tmp/killed.log" || fail "no flight-recorder dump in the failing job's output"

[ "$failures" -eq 0 ] && echo "job_secret_test: all passed"
exit "$failures"
