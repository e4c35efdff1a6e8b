#!/bin/sh
# Shrink and continue: `collie run --keep-going -n 4 -- collie ddp-demo --kill-rank R
# --kill-at-step 5 --checkpoint-every 3` over one transport, for R = 1 and R = 0 (rank 0
# writes the checkpoints until it dies; the rendezvous store lives in the launcher).
# Passes when: the launcher exits 0 and names rank R on stderr; the 3 survivors each
# report the failure of rank R, resume from step 3 and redo 2 steps; their final
# parameter checksums are identical AND equal to a reference that trains 4 ranks to
# step 3, then resumes with 3 ranks to step 9. A control run without a kill (4 ranks
# to step 9) must end with another checksum, so the comparison does see the sharding.
# Also: --kill-rank without --keep-going is refused, and --keep-going's exit status.
# Usage: ddp_elastic_test.sh path/to/collie TRANSPORT
# fault: DDP training loses rank 1 or rank 0 mid-backward (shm, collie run --keep-going) | the 3 survivors shrink, resume from the last checkpoint and end bitwise equal to a reference | ddp_elastic_shm
# fault: DDP training loses rank 1 or rank 0 mid-backward (tcp, collie run --keep-going) | the 3 survivors shrink, resume from the last checkpoint and end bitwise equal to a reference | ddp_elastic_tcp
set -u
collie=$1
transport=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL ($transport): $*" >&2; failures=$((failures + 1)); }
# COLLIE_ALGO pinned: the reference and the shrunk job must sum in the same order.
export COLLIE_TIMEOUT=5s COLLIE_TRANSPORT=$transport COLLIE_ALGO=ring COLLIE_DEBUG=NONE
small="--layers 4 --params-per-layer 20000 --ms-per-layer 2 --batch 2 --bucket-cap-mb 0.1 --first-bucket-mb 0.05 --dataset 64"
demo() { timeout 60 "$collie" run "$@"; }
# The checksums of the "# final:" lines of an output file, one per line.
checksums() { sed -n 's/^# final: .*parameter checksum \([0-9a-f]*\).*/\1/p' "$1"; }

# Reference: 4 ranks to step 3 (checkpoint), then 3 ranks from it to step 9.
mkdir "$tmp/ref"
demo -n 4 -- "$collie" ddp-demo $small --steps 3 --checkpoint "$tmp/ref" >"$tmp/ref.out" 2>&1 ||
  fail "reference part 1 failed: $(tail -3 "$tmp/ref.out")"
demo -n 3 -- "$collie" ddp-demo $small --steps 6 --checkpoint "$tmp/ref" --resume \
  >"$tmp/ref2.out" 2>&1 || fail "reference part 2 failed: $(tail -3 "$tmp/ref2.out")"
ref=$(checksums "$tmp/ref2.out" | sort -u)
[ "$(echo "$ref" | wc -l)" -eq 1 ] && [ -n "$ref" ] || fail "reference ranks disagree: $ref"
# Control: without a failure, 4 ranks shard the data otherwise and end elsewhere.
demo -n 4 -- "$collie" ddp-demo $small --steps 9 >"$tmp/control.out" 2>&1 ||
  fail "control run failed: $(tail -3 "$tmp/control.out")"
control=$(checksums "$tmp/control.out" | sort -u)
[ -n "$control" ] && [ "$control" != "$ref" ] || fail "control run ends at the reference ($control)"

for victim in 1 0; do
  dir="$tmp/kill$victim"
  mkdir "$dir"
  demo --keep-going -n 4 -- "$collie" ddp-demo $small --steps 9 --checkpoint "$dir" \
    --checkpoint-every 3 --kill-rank "$victim" --kill-at-step 5 >"$dir/out" 2>"$dir/err"
  status=$?
  cat "$dir/out"
  [ "$status" -eq 0 ] || fail "kill $victim: launcher exited $status: $(tail -5 "$dir/err")"
  grep -q "rank $victim killed by signal SIGKILL (9); --keep-going" "$dir/err" ||
    fail "kill $victim: launcher did not name rank $victim: $(head -3 "$dir/err")"
  grep -q "ranks \[$victim\] were killed" "$dir/err" || fail "kill $victim: no launcher summary"
  [ "$(grep -c "detected failure of rank $victim after .* shrunk to 3 ranks .* resumed from step 3 (redoing 2 steps)" "$dir/out")" -eq 3 ] ||
    fail "kill $victim: not every survivor reported the failure and the resume"
  [ "$(grep -c "step 5 failed: .*rank $victim" "$dir/out")" -eq 3 ] ||
    fail "kill $victim: survivors' errors do not name rank $victim"
  [ "$(grep -c '^# final: rank . of 3 ' "$dir/out")" -eq 3 ] || fail "kill $victim: not 3 survivors at the end"
  got=$(checksums "$dir/out" | sort -u)
  [ "$(echo "$got" | wc -l)" -eq 1 ] || fail "kill $victim: survivors disagree: $(echo $got)"
  [ "$got" = "$ref" ] || fail "kill $victim: survivors end at $got, the 3-rank reference at $ref"
  # After the failure a survivor (rank 0 of the new communicator) writes the checkpoints.
  sed -n '/detected failure/,$p' "$dir/out" | grep -q "checkpoint written: .* (step 6)" ||
    fail "kill $victim: no checkpoint written after the shrink"
done

# Without --keep-going the demo refuses to kill a rank (the launcher would end the job).
demo -n 2 -- "$collie" ddp-demo $small --steps 2 --checkpoint "$tmp" --kill-rank 1 \
  >/dev/null 2>"$tmp/refuse.err"
status=$?
[ "$status" -eq 2 ] || fail "--kill-rank without --keep-going: status $status, expected 2"
grep -q "needs \`collie run --keep-going\`" "$tmp/refuse.err" || fail "no hint at --keep-going"

# --keep-going: a killed rank is tolerated, a rank exiting non-zero still fails the job.
"$collie" run --keep-going -n 3 -- sh -c 'test $COLLIE_RANK != 0 || kill -9 $$; sleep 1' \
  2>"$tmp/kg.err"
status=$?
[ "$status" -eq 0 ] || fail "--keep-going with one killed rank: status $status: $(cat "$tmp/kg.err")"
grep -q "ranks \[0\] were killed, ranks \[1,2\] exited 0" "$tmp/kg.err" || fail "summary: $(cat "$tmp/kg.err")"
"$collie" run --keep-going -n 3 -- sh -c 'test $COLLIE_RANK != 0 || kill -9 $$; test $COLLIE_RANK != 2 || exit 3; sleep 1' \
  2>"$tmp/kg2.err"
status=$?
[ "$status" -eq 3 ] || fail "--keep-going with a failing survivor: status $status, expected 3"
grep -q "rank 2 exited with status 3" "$tmp/kg2.err" && grep -q "ranks \[2\] failed" "$tmp/kg2.err" ||
  fail "failing survivor not named: $(cat "$tmp/kg2.err")"

[ "$failures" -eq 0 ] || exit 1
echo "ddp_elastic_test $transport: all checks passed"
