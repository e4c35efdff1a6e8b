#!/usr/bin/env bash
# netns_ab.sh: A/B-compare collie builds or settings on one collective between two
# namespace hosts (tools/netns_harness.sh, 1 rank each), variants interleaved per round.
#
#   bench/netns_ab.sh [-b SIZE] [-n ITERS] [-r ROUNDS] [-t TRANSPORT] [-c COLL] \
#       "label|path/to/collie|ENV=V ..." ...
#
# Prints one line per variant and round (out-of-place and in-place time, us), then per
# variant the median over rounds. Defaults: 4K all-reduce, 1000 iterations, 5 rounds,
# tcp. UCX_TLS defaults to tcp (UCX would take shared memory between namespaces).
# Example (issue 4): bench/netns_ab.sh "ring|build/bin/collie|COLLIE_ALGO=ring" \
#                      "auto|build/bin/collie|COLLIE_ALGO=auto"
# Needs root; exit 77 when namespaces cannot be made.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
size=4K iters=1000 rounds=5 transport=tcp coll=allreduce
while getopts "b:n:r:t:c:h" o; do
  case $o in
    b) size=$OPTARG ;; n) iters=$OPTARG ;; r) rounds=$OPTARG ;; t) transport=$OPTARG ;;
    c) coll=$OPTARG ;; *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { sed -n '2,14p' "$0"; exit 2; }
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cmd="port=29200; for r in \$(seq $rounds); do "
for v in "$@"; do
  IFS='|' read -r label bin envs <<<"$v"
  case "$bin" in /*) ;; *) bin="$here/$bin" ;; esac
  cmd+="port=\$((port + 1)); env $envs RANK=\$COLLIE_NETNS_INDEX WORLD_SIZE=2 LOCAL_RANK=0 \
MASTER_ADDR=\$COLLIE_NETNS_MASTER MASTER_PORT=\$port COLLIE_JOB_SECRET=$secret \
COLLIE_HOST_ID=ns\$COLLIE_NETNS_INDEX COLLIE_SOCKET_IFNAME=eth0 $bin perf $coll -b $size \
-e $size -n $iters -w $((iters / 10 + 1)) -c 0 --transport $transport 2>&1 | \
awk '/^ +[0-9]/ {print \"$label\", \$6, \$10}'; "
done
cmd+="done"
export UCX_TLS=${UCX_TLS:-tcp}
out=$("$here/tools/netns_harness.sh" --subnet $(($$ % 200 + 10)) --timeout 1800 -- "$cmd")
rc=$?
[ $rc = 77 ] && { echo "$out"; exit 77; }
echo "$out" | grep '^\[host 0\]' | sed 's/^\[host 0\] //' | grep -v '^#' | tee /dev/stderr |
  awk '{v[$1] = v[$1] " " $2; order[$1] = order[$1] ? order[$1] : ++n}
       END {for (k in v) print order[k], k, v[k]}' | sort -n | cut -d' ' -f2- |
  while read -r label vals; do
    med=$(printf '%s\n' $vals | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
    printf "%-16s median %10s us  (%s)\n" "$label" "$med" "$vals"
  done
exit $rc
