#!/usr/bin/env bash
# Ranks started by other launchers join a job from their variables:
#  - torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (two processes started here),
#  - Open MPI's OMPI_COMM_WORLD_* through mpirun (skipped when mpirun is absent).
# Each run is a checked all-reduce benchmark; #wrong must be 0 and the exit status 0.
set -euo pipefail
collie="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; kill $(jobs -p) 2>/dev/null || true' EXIT

check_table() {  # file: every data row has #wrong 0 in both halves
  local file=$1
  grep -q "Out of bounds values : 0 OK" "$file" || { echo "FAIL: no OK footer in $file"; cat "$file"; exit 1; }
  awk '!/^#/ && NF >= 13 && ($9 != 0 || $13 != 0) { bad = 1 } END { exit bad }' "$file" ||
    { echo "FAIL: wrong elements in $file"; cat "$file"; exit 1; }
}

# torchrun-style variables; collie's store listens on MASTER_PORT + 1.
port=$(( 20000 + RANDOM % 12000 ))  # below the ephemeral range (32768-60999)
export COLLIE_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout 120 "$collie" perf allreduce -b 8 -e 64K -f 64 -n 2 -w 1 -c 1 >"$tmp/torch$rank.log" 2>&1 &
done
wait
check_table "$tmp/torch0.log"
echo "torchrun variables: ok"

mpirun=$(command -v mpirun.openmpi || command -v mpirun || true)
if [ -n "$mpirun" ] && "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np 3 \
    "$collie" perf allreduce -b 8 -e 64K -f 64 -n 2 -w 1 -c 1 >"$tmp/mpi.log" 2>&1
  check_table "$tmp/mpi.log"
  echo "mpirun: ok"
else
  echo "Open MPI mpirun not installed: Open MPI start not checked"
fi
