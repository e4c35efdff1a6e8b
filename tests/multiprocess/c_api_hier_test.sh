#!/bin/sh
# c_api_hier_test.sh COLLIE C_API_RANK: the C API's collectives in two levels. Four ranks
# on two hosts told apart by COLLIE_HOST_ID (so ranks of different hosts use tcp), with
# COLLIE_ALGO=hier; every rank must print its "c api ok" and the planner's log must show
# that every collective of the check was planned hier.
set -u
collie=$1
rank_bin=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
COLLIE_ALGO=hier COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=TUNE "$collie" run -n 4 -- sh -c \
  'COLLIE_HOST_ID=c-api-host$((COLLIE_RANK / 2)) exec "$0"' "$rank_bin" >"$out" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  cat "$out"
  echo "FAIL: the job exited with $rc"
  exit 1
fi
ok=$(grep -c "c api ok" "$out")
if [ "$ok" -ne 4 ]; then
  cat "$out"
  echo "FAIL: $ok of 4 ranks printed c api ok"
  exit 1
fi
for coll in allreduce reducescatter allgather broadcast reduce; do
  planned=$(grep -E " $coll of [0-9]+ bytes on 4 ranks -> " "$out" | grep -c "for hier")
  if [ "$planned" -eq 0 ]; then
    grep " -> " "$out" | head -20
    echo "FAIL: no $coll planned hier"
    exit 1
  fi
  flat=$(grep -E " $coll of [0-9]+ bytes on 4 ranks -> " "$out" | grep -vc "for hier")
  if [ "$flat" -ne 0 ]; then
    grep -E " $coll of " "$out" | grep -v "for hier" | head
    echo "FAIL: $flat $coll calls were not planned hier"
    exit 1
  fi
done
echo "c_api_hier_test: 4 ranks ok, every collective planned hier"
