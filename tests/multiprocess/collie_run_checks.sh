#!/bin/sh
# End-to-end checks of `collie run` and `collie perf --json`.
# Usage: collie_run_checks.sh path/to/collie
set -u
collie=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# 1. A rank that exits 7 ends the job: non-zero status, stderr names rank 1 and status 7,
#    and the sleeping ranks are torn down long before their sleep ends.
start=$(date +%s)
"$collie" run -n 3 -- sh -c 'test $COLLIE_RANK != 1 || exit 7; sleep 60' 2>"$tmp/err"
status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -ne 0 ] || fail "collie run exited 0 although rank 1 failed"
[ "$status" -eq 7 ] || fail "expected exit status 7, got $status"
grep -q "rank 1 exited with status 7" "$tmp/err" || fail "stderr does not name rank 1 / status 7: $(cat "$tmp/err")"
[ "$elapsed" -lt 30 ] || fail "teardown took ${elapsed}s"

# 2. A rank killed by a signal is reported with the signal's name.
"$collie" run -n 2 -- sh -c 'test $COLLIE_RANK != 0 || kill -9 $$; sleep 60' 2>"$tmp/err"
status=$?
[ "$status" -eq 137 ] || fail "expected 128+9 for a SIGKILLed rank, got $status"
grep -q "rank 0 killed by signal SIGKILL (9)" "$tmp/err" || fail "no signal report: $(cat "$tmp/err")"

# 3. Every rank sees its launcher variables.
"$collie" run -n 2 -- sh -c 'echo "$COLLIE_RANK/$COLLIE_WORLD_SIZE/$COLLIE_LOCAL_RANK/$COLLIE_LOCAL_WORLD_SIZE ${COLLIE_UNIQUE_ID%%:*}"' >"$tmp/out"
sort "$tmp/out" | tr '\n' ' ' | grep -q "^0/2/0/2 collie1 1/2/1/2 collie1 $" || fail "rank variables: $(cat "$tmp/out")"

# 4. perf writes a JSON document with min/median per size and no wrong element.
if "$collie" run -n 2 -- "$collie" perf allreduce -b 1K -e 64K -f 4 -n 3 -w 1 -c 1 \
    --json "$tmp/perf.json" >"$tmp/out"; then
  python3 - "$tmp/perf.json" <<'PY' || fail "bad perf JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["nranks"] == 2 and doc["wrong_total"] == 0, doc
sizes = [r["size"] for r in doc["results"]]
assert sizes == [1024, 4096, 16384, 65536], sizes
for r in doc["results"]:
    for k in ("out_of_place", "in_place"):
        m = r[k]
        assert 0 < m["min_us"] <= m["median_us"] and m["time_us"] > 0 and m["wrong"] == 0, r
PY
  grep -q "^# Out of bounds values : 0 OK" "$tmp/out" || fail "no OK footer"
else
  fail "collie perf failed: $(cat "$tmp/out")"
fi

# 4b. A forced direct on registered buffers (-R 1) with --json: perf's own all-reduces
#     (the --json check, the statistics) run on registered buffers too.
"$collie" run -n 2 -- "$collie" perf allreduce --algo direct -R 1 -b 64K -e 64K -n 3 -w 1 \
  -c 1 --json "$tmp/direct.json" >"$tmp/out" 2>&1 ||
  fail "perf --algo direct -R 1 --json failed: $(cat "$tmp/out")"
grep -q "^# Out of bounds values : 0 OK" "$tmp/out" || fail "--algo direct -R 1: no OK footer"

# 5. Buffers shifted past alignment (-u elements, --unalign_bytes: misaligned for the
#    dtype) still give exact results, in and out of place, for every collective kind.
for kind in allreduce reducescatter allgather broadcast reduce; do
  if "$collie" run -n 2 -- "$collie" perf "$kind" -b 6 -e 96K -f 16 -n 2 -w 0 -c 1 -d half \
      -u 3 --unalign_bytes 1 --json "$tmp/unalign.json" >"$tmp/out"; then
    python3 - "$tmp/unalign.json" <<'PY' || fail "$kind -u 3 --unalign_bytes 1: bad JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["unalign"] == 3 and doc["unalign_bytes"] == 1 and doc["wrong_total"] == 0, doc
assert len(doc["results"]) >= 3, doc["results"]
PY
    grep -q "unalign: 3 unalign_bytes: 1$" "$tmp/out" || fail "$kind: header lacks the shift"
  else
    fail "collie perf $kind -u 3 --unalign_bytes 1 failed: $(cat "$tmp/out")"
  fi
done

# fault: collie perf with sizes below one element per rank, or a --json file rank 0 cannot write | exit 2 on every rank before the run, naming the flag | collie_run_checks
# 6. What would only fail after the run is refused before it, on every rank: a --json
#    file rank 0 cannot write, sizes below one element per rank.
"$collie" run -n 2 -- "$collie" perf allreduce -b 1K -e 1K -n 1 -w 0 \
  --json /nonexistent-dir/perf.json >"$tmp/out" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "unwritable --json: exit $status, want 2: $(cat "$tmp/out")"
grep -q "cannot write --json /nonexistent-dir/perf.json" "$tmp/out" ||
  fail "unwritable --json not named: $(cat "$tmp/out")"
grep -q "#wrong\|out-of-place" "$tmp/out" && fail "unwritable --json: the run went ahead"
# --json given to rank 0 alone, as launchers that start each rank on its own do
# (bench/compare.py's namespaces): the run goes ahead and rank 0 writes the file (before,
# the other rank skipped the --json check's all-reduce: a collective mismatch).
"$collie" run -n 2 -- sh -c 'if [ "$COLLIE_RANK" = 0 ]; then
    exec "$1" perf allreduce -b 1K -e 1K -n 2 -w 0 --json "$2"
  fi
  exec "$1" perf allreduce -b 1K -e 1K -n 2 -w 0' sh "$collie" "$tmp/rank0.json" \
  >"$tmp/out" 2>&1 || fail "--json on rank 0 alone: $(cat "$tmp/out")"
grep -q '"results"' "$tmp/rank0.json" 2>/dev/null ||
  fail "--json on rank 0 alone: rank 0 wrote no results: $(cat "$tmp/out")"
"$collie" run -n 2 -- "$collie" perf allgather -b 4 -e 4 -d float >"$tmp/out" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "allgather of one float on 2 ranks: exit $status, want 2"
grep -q "no size from -b to -e holds one float" "$tmp/out" || fail "no-size error: $(cat "$tmp/out")"

# fault: a knob out of range, overflowing or unknown (COLLIE_TIMEOUT=9999999999, COLLIE_TRACE_DEPTH=10^12, COLLIE_DEBUG=LOUD, an unwritable COLLIE_TRACE) | exit 2 with one error naming the knob, the value and the accepted range (before: instant timeout, SIGABRT, silence) | collie_run_checks
# fault: collie sim --nchannels 1000000 | exit 2 naming the accepted range (before: a million channels simulated) | collie_run_checks
# 7. A knob collie does not accept refuses the start (exit 2, not a crash) and names
#    the knob, the value and the accepted range.
for knob in COLLIE_TIMEOUT=9999999999 COLLIE_TRACE_DEPTH=1000000000000 COLLIE_DEBUG=LOUD \
            COLLIE_TRACE=/nonexistent-dir/trace.json COLLIE_NCHANNELS=abc; do
  env "$knob" "$collie" run -n 2 -- "$collie" perf allreduce -b 8 -e 8 -n 1 -w 0 >"$tmp/out" 2>&1
  status=$?
  name=${knob%%=*}
  [ "$status" -eq 2 ] || fail "$knob: exit $status, want 2: $(cat "$tmp/out")"
  grep -q "$name='${knob#*=}' is not accepted: .*; accepted: " "$tmp/out" ||
    fail "$knob: error does not name the knob, value and range: $(cat "$tmp/out")"
done

# fault: one rank number claimed by two processes | every rank fails at once: rank N was claimed by 2 processes | collie_run_checks
# fault: a must-match knob differs between ranks (COLLIE_SHM_ONESHOT_MAX, COLLIE_NSOCKS_PERPEER) | every rank fails at once naming the knob and both values | collie_run_checks
# fault: a rank exits 0 before joining (collie run) | the others fail at once: rank R exited with status 0 before joining | collie_run_checks
# 8. Ranks that disagree at set-up, or leave before joining, fail every other rank at
#    once (not at COLLIE_TIMEOUT=60s) naming the field, the rank and both values.
setup_fails() {  # label, expected text, then the rank script (sh -c) run by 3 ranks
  label=$1 want=$2
  start=$(date +%s)
  "$collie" run -n 3 -- sh -c "$3" sh "$collie" >"$tmp/out" 2>&1
  status=$?
  elapsed=$(( $(date +%s) - start ))
  [ "$status" -ne 0 ] || fail "$label: the job succeeded"
  [ "$elapsed" -le 10 ] || fail "$label: took ${elapsed}s (COLLIE_TIMEOUT is 60s)"
  grep -q "$want" "$tmp/out" || fail "$label: no '$want' in: $(grep -v '^#' "$tmp/out" | tail -4)"
}
perf1='perf allreduce -b 8 -e 8 -n 1 -w 0'
setup_fails "rank claimed twice" "rank 1 was claimed by 2 processes" \
  'COLLIE_RANK=$((COLLIE_RANK == 2 ? 1 : COLLIE_RANK)) exec "$1" '"$perf1"
# Whichever rank reports first may be the last one printing (the launcher stops the rest).
setup_fails "one-shot board on one rank only" \
  "COLLIE_SHM_ONESHOT_MAX: this rank \(0, rank [12] 2097152\|2097152, rank 0 0\)" \
  'test "$COLLIE_RANK" = 0 && export COLLIE_SHM_ONESHOT_MAX=0; exec "$1" '"$perf1"
setup_fails "sockets per peer" "COLLIE_NSOCKS_PERPEER: this rank" \
  'COLLIE_NSOCKS_PERPEER=$((COLLIE_RANK + 1)) exec "$1" '"$perf1"' --transport tcp'
setup_fails "rank 2 exits 0 before joining" "rank 2 exited with status 0 .* before joining" \
  'test "$COLLIE_RANK" = 2 && exit 0; exec "$1" '"$perf1"

"$collie" sim --nchannels 1000000 >"$tmp/out" 2>&1
status=$?
[ "$status" -eq 2 ] || fail "collie sim --nchannels 1000000: exit $status, want 2"
grep -q "nchannels 1000000 is outside" "$tmp/out" || fail "sim --nchannels: $(cat "$tmp/out")"

# Team collectives are algorithms the tuner, sim and info show: a 4-rank shm sim of 8 MiB
# (past the 2 MiB board) plans direct, then cma, then the ring, and checks the team step
# both run and declined;
# a forced board without a team is refused; info --tuning has the 2- and 4-rank tables.
"$collie" sim --transport shm --nranks 4 --bytes 8M >"$tmp/out" 2>&1 || fail "sim shm 8M: $(cat "$tmp/out")"
grep -q "plan: team step direct>cma, then (declined) ring" "$tmp/out" || fail "sim plan: $(cat "$tmp/out")"
[ "$(grep -c "data check (team.*PASSED" "$tmp/out")" -eq 2 ] || fail "sim data checks: $(cat "$tmp/out")"
"$collie" sim --transport shm --nranks 2 --bytes 8 >"$tmp/out" 2>&1 || fail "sim shm 8 B: $(cat "$tmp/out")"
grep -q "predicted time board.*<- simulated" "$tmp/out" || fail "sim 8 B board: $(cat "$tmp/out")"
"$collie" sim --algo board --nranks 2 --bytes 8 >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "runs no board" "$tmp/out" || fail "sim forced board without a team: $(cat "$tmp/out")"
COLLIE_TUNE_CACHE=off "$collie" info --tuning >"$tmp/out" 2>&1 || fail "info --tuning: $(cat "$tmp/out")"
for want in "shm team collectives, 2 ranks" "shm team collectives, 4 ranks" "direct>cma>ring"; do
  grep -q "$want" "$tmp/out" || fail "info --tuning lacks '$want'"
done

[ "$failures" -eq 0 ] && echo "collie_run_checks: all passed"
exit "$failures"
