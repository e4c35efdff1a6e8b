#!/bin/sh
# collie run --bind: where a host's ranks outnumber the launcher's CPUs (auto, the
# default), rank r runs on the (r mod CPUs)-th CPU and every rank sees COLLIE_CPUS = the
# launcher's count (unless set); with as many CPUs as ranks, or --bind none, the ranks
# keep the launcher's mask. A bad mode is refused before any rank starts. The launcher
# runs under taskset on two CPUs (one where the host has only one).
# Usage: launcher_bind_test.sh COLLIE
set -u
collie=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $1"; cat "$tmp/out"; failures=$((failures + 1)); }

cpus=$(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' | head -2 | sed 's/-.*//' | tr '\n' ',' | sed 's/,$//')
first=${cpus%%,*}
second=${cpus#*,}
[ "$second" = "$cpus" ] && second=$first
mask="$first,$second"
[ "$first" = "$second" ] && mask=$first
count=$(echo "$mask" | tr ',' '\n' | wc -l)
show='echo "rank $COLLIE_RANK cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2) count ${COLLIE_CPUS:-unset}"'

# More ranks than CPUs: bound round-robin, COLLIE_CPUS told.
n=$((count + 1))
taskset -c "$mask" "$collie" run -n $n -- sh -c "$show" >"$tmp/out" 2>&1 || fail "-n $n did not run"
r=0
while [ $r -lt $n ]; do
  if [ $((r % count)) -eq 0 ]; then want=$first; else want=$second; fi
  grep -qx "rank $r cpus $want count $count" "$tmp/out" || fail "-n $n: rank $r not on CPU $want"
  r=$((r + 1))
done

# A COLLIE_CPUS the user set is kept.
COLLIE_CPUS=7 taskset -c "$mask" "$collie" run -n $n -- sh -c "$show" >"$tmp/out" 2>&1 ||
  fail "COLLIE_CPUS=7 did not run"
grep -q "rank 0 cpus $first count 7" "$tmp/out" || fail "COLLIE_CPUS=7 was not kept"

# As many ranks as CPUs, or --bind none: the launcher's mask, no COLLIE_CPUS.
want=$(taskset -c "$mask" sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2')
taskset -c "$mask" "$collie" run -n $count -- sh -c "$show" >"$tmp/out" 2>&1 ||
  fail "-n $count did not run"
[ "$(grep -c "cpus $want count unset" "$tmp/out")" -eq "$count" ] || fail "-n $count was bound"
taskset -c "$mask" "$collie" run --bind none -n $n -- sh -c "$show" >"$tmp/out" 2>&1 ||
  fail "--bind none did not run"
[ "$(grep -c "cpus $want count unset" "$tmp/out")" -eq "$n" ] || fail "--bind none was bound"

# A bad mode: refused, no rank runs.
if "$collie" run --bind cores -n 2 -- sh -c 'echo started' >"$tmp/out" 2>&1; then
  fail "--bind cores was accepted"
fi
grep -q started "$tmp/out" && fail "--bind cores started a rank"
grep -q -- "--bind" "$tmp/out" || fail "--bind cores: the error does not name the option"

echo "launcher_bind_test: $failures failure(s)"
[ "$failures" -eq 0 ]
