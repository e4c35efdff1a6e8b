#!/usr/bin/env bash
# Starting a job cannot be taken over by another local user, and bad launch variables
# are refused at once, naming the variable and the accepted form (issue 51):
#  1. the single-host rendezvous file (mpirun/srun on one host) lives in a 0700
#     directory of the job's user: a directory another uid planted, a file of the wrong
#     mode or owner, or a symlink are refused naming them; nothing temporary is left;
#  2. MASTER_PORT outside 1..65534 (it would wrap onto another port) and a bad
#     COLLIE_MASTER_ADDR port are refused;
#  3. a 120 KB knob value is refused with a short echo on every rank.
# The planted-directory case runs the intruder as another uid (setpriv) and needs root;
# without root it is skipped with the reason.
# Usage: launch_hardening_test.sh path/to/collie
set -uo pipefail
collie="$1"
tmp=$(mktemp -d)
chmod 755 "$tmp"  # the intruder uid below must reach its scratch directory
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
perf=(perf allreduce -b 8 -e 64K -f 64 -n 2 -w 1 -c 1)
ms() { echo $(( $(date +%s%N) / 1000000 )); }
# A shared scratch directory like /tmp: world-writable and sticky.
shared="$tmp/shared"
mkdir -m 1777 "$shared"
me=$(id -u)
job=$RANDOM$RANDOM

# Runs rank $1 of 2 with Open MPI's variables (no mpirun needed: collie reads the
# variables), the job id $job and COLLIE_TMPDIR=$shared; output in $tmp/rank$1.log.
ompi_rank() {
  OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=$1 \
    OMPI_MCA_ess_base_jobid=$job COLLIE_TMPDIR=$shared COLLIE_TIMEOUT=${2:-30s} \
    timeout 60 "$collie" "${perf[@]}" >"$tmp/rank$1.log" 2>&1
}

# expect_refusal label file words...: the run failed and its output names every word.
expect_refusal() {
  local label=$1 file=$2 status=$3 elapsed=$4
  shift 4
  [ "$status" -ne 0 ] || fail "$label: exit 0, want a refusal: $(head -c 600 "$file")"
  [ "$elapsed" -le 2000 ] || fail "$label: took ${elapsed} ms to refuse"
  local word
  for word in "$@"; do
    grep -qF -- "$word" "$file" || fail "$label: output does not name '$word': $(head -c 600 "$file")"
  done
  echo "$label: refused in ${elapsed} ms"
}

# 1a. The ordinary case: both ranks meet through the private directory.
ompi_rank 0 & ompi_rank 1 & wait
grep -q "Out of bounds values : 0 OK" "$tmp/rank0.log" ||
  fail "OMPI-variable job did not run: $(head -c 800 "$tmp/rank0.log" "$tmp/rank1.log")"
dir="$shared/collie-$me"
[ "$(stat -c %a "$dir" 2>/dev/null)" = 700 ] || fail "$dir is not a 0700 directory: $(ls -ld "$dir")"
leftover=$(find "$shared" -name '*.tmp*' -o -name '*.id' | head -3)
[ -z "$leftover" ] || fail "left behind: $leftover"
echo "rendezvous in a private directory: ok"

# fault: the rendezvous id file (mpirun/srun on one host) has the wrong mode or owner, or is a
# symlink | every rank refuses at once naming the file and the owner/mode it must have (before:
# any readable file was trusted) | launch_hardening_test
# 1b. A file in the private directory that is not this user's 0600 file.
for kind in mode owner symlink; do
  rm -f "$dir/ompi-$job.id"
  case $kind in
    mode) echo "collie1:127.0.0.1:1:$(printf '%032d' 1)" >"$dir/ompi-$job.id"
          chmod 644 "$dir/ompi-$job.id" ;;
    owner) [ "$me" = 0 ] || { echo "not root: the foreign-owner file is not checked"; continue; }
           echo "collie1:127.0.0.1:1:$(printf '%032d' 1)" >"$dir/ompi-$job.id"
           chmod 600 "$dir/ompi-$job.id"; chown 4242:4242 "$dir/ompi-$job.id" ;;
    symlink) ln -s "$tmp/elsewhere" "$dir/ompi-$job.id" ;;
  esac
  start=$(ms); ompi_rank 1 5s; status=$?; elapsed=$(( $(ms) - start ))
  expect_refusal "rank 1 given an id file with the wrong $kind" "$tmp/rank1.log" "$status" \
    "$elapsed" "$dir/ompi-$job.id"
done
rm -f "$dir/ompi-$job.id"

# fault: another local user plants the rendezvous directory before the job starts | every rank
# refuses at once naming the directory, its owner and mode, and what it must be (before: the
# other user's rank 0 took over rank 1) | launch_hardening_test
# 1c. Another uid made this user's rendezvous directory first.
if [ "$me" = 0 ] && setpriv --reuid=4242 --regid=4242 --clear-groups true 2>/dev/null; then
  planted="$tmp/planted"
  mkdir -m 1777 "$planted"
  setpriv --reuid=4242 --regid=4242 --clear-groups sh -c \
    "mkdir -m 777 '$planted/collie-0' && echo 'collie1:127.0.0.1:1:$(printf '%032d' 1)' >'$planted/collie-0/ompi-$job.id'"
  for rank in 0 1; do
    start=$(ms)
    OMPI_COMM_WORLD_RANK=$rank OMPI_COMM_WORLD_SIZE=2 OMPI_MCA_ess_base_jobid=$job \
      COLLIE_TMPDIR=$planted COLLIE_TIMEOUT=5s timeout 60 "$collie" "${perf[@]}" \
      >"$tmp/planted$rank.log" 2>&1
    status=$?; elapsed=$(( $(ms) - start ))
    expect_refusal "rank $rank in a directory planted by uid 4242" "$tmp/planted$rank.log" \
      "$status" "$elapsed" "$planted/collie-0" "owned by uid 4242" "mode 0700"
  done
else
  echo "not root or setpriv unusable: the planted-directory case (another uid) is not checked"
fi

# fault: MASTER_PORT outside 1..65534, or a COLLIE_MASTER_ADDR port outside 1..65535 | refused at
# once naming the variable and the accepted range (before: the store port wrapped, e.g. 100000 ->
# 34465, 65535 -> 0) | launch_hardening_test
# 2. Ports.
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
for port in 0 65535 65536 100000 -1 29500x 99999999999999999999; do
  start=$(ms)
  COLLIE_JOB_SECRET=$secret RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    COLLIE_TIMEOUT=5s timeout 60 "$collie" "${perf[@]}" >"$tmp/port.log" 2>&1
  status=$?; elapsed=$(( $(ms) - start ))
  expect_refusal "MASTER_PORT=$port" "$tmp/port.log" "$status" "$elapsed" "MASTER_PORT" "1..65534"
done
for address in 127.0.0.1:0 127.0.0.1:65536 127.0.0.1:80x; do
  start=$(ms)
  COLLIE_JOB_SECRET=$secret COLLIE_MASTER_ADDR=$address OMPI_COMM_WORLD_RANK=0 \
    OMPI_COMM_WORLD_SIZE=1 COLLIE_TIMEOUT=5s timeout 60 "$collie" "${perf[@]}" \
    >"$tmp/addr.log" 2>&1
  status=$?; elapsed=$(( $(ms) - start ))
  expect_refusal "COLLIE_MASTER_ADDR=$address" "$tmp/addr.log" "$status" "$elapsed" \
    "COLLIE_MASTER_ADDR" "1..65535"
done

# fault: a knob given a 120 KB value under collie run -n 2 | every rank (or the launcher)
# refuses with the first 64 characters and the length: under 4 KB of output in all (before: the
# whole value echoed by every rank) | launch_hardening_test
# 3. Over-long values.
long="1$(head -c 119999 /dev/zero | tr '\0' 'x')"
for knob in COLLIE_TIMEOUT COLLIE_DEBUG; do
  start=$(ms)
  env "$knob=$long" timeout 60 "$collie" run -n 2 -- "$collie" "${perf[@]}" >"$tmp/long.log" 2>&1
  status=$?; elapsed=$(( $(ms) - start ))
  expect_refusal "$knob of 120000 characters" "$tmp/long.log" "$status" "$elapsed" "$knob" \
    "(120000 characters)"
  bytes=$(wc -c <"$tmp/long.log")
  [ "$bytes" -lt 4096 ] || fail "$knob: $bytes bytes of output for one refused knob"
done

if [ "$failures" -ne 0 ]; then
  echo "launch_hardening_test: $failures failure(s)"
  exit 1
fi
echo "launch_hardening_test: all checks passed"
