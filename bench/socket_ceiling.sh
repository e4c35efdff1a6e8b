#!/usr/bin/env bash
# socket_ceiling.sh: what one process per host can move both ways over TCP, against what
# collie's all-gather and all-reduce move, between two namespace hosts
# (tools/netns_harness.sh), interleaved rounds. A 2-rank ring sends S/2 each way per
# phase, so its busbw is the per-direction rate of the same socket work.
#
#   bench/socket_ceiling.sh [--build DIR] [--rounds R] [--size 64M]
#
# Variants per round (GB/s per direction, median over rounds):
#   socket shared    bench/socket_bidir: one thread, one socket both ways, size/2 buffers
#   socket split     one thread, one socket per direction
#   socket threads   a sender and a receiver thread, one socket per direction
#   socket shared-threads  a sender and a receiver thread, one socket both ways
#   collie allgather / allreduce over tcp and ucx (UCX_TLS=tcp), out-of-place and
#                    in-place busbw of `collie perf -b size -e size -c 0`
# Needs root (namespaces); exit 77 otherwise.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build"
rounds=3
size=64M
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    -h|--help) sed -n "2,17p" "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
collie="$build/bin/collie"
bidir="$build/bench/socket_bidir"
for f in "$collie" "$bidir"; do [ -x "$f" ] || { echo "no $f: build first" >&2; exit 2; }; done
bytes=$(numfmt --from=iec "$size")
half_mib=$((bytes / 2 >> 20))
[ "$half_mib" -ge 1 ] || { echo "--size must be at least 2M" >&2; exit 2; }
iters=$(( (1024 / half_mib) + 1 ))  # about 1 GiB each way per socket run
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

cat >"$out/host.sh" <<EOF
#!/bin/bash
i=\$COLLIE_NETNS_INDEX
role=\$([ \$i = 0 ] && echo listen || echo connect)
port=25000
for r in \$(seq $rounds); do
  for mode in shared split threads shared-threads; do
    port=\$((port + 2))
    $bidir \$role \$COLLIE_NETNS_MASTER \$port $half_mib $iters \$mode >"$out/socket-\$mode.\$i.\$r" 2>&1
  done
  for coll in allgather allreduce; do
    for t in tcp ucx; do
      port=\$((port + 2))
      env UCX_TLS=tcp RANK=\$i WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=\$COLLIE_NETNS_MASTER \\
        MASTER_PORT=\$port COLLIE_JOB_SECRET=$secret COLLIE_HOST_ID=ns\$i COLLIE_SOCKET_IFNAME=eth0 \\
        $collie perf \$coll -b $size -e $size -n 10 -w 3 -c 0 --transport \$t \\
        >"$out/collie-\$coll-\$t.\$i.\$r" 2>&1
    done
  done
done
EOF
chmod +x "$out/host.sh"
"$here/tools/netns_harness.sh" --subnet $(($$ % 200 + 10)) --timeout 900 -- "$out/host.sh" >/dev/null ||
  { rc=$?; [ $rc = 77 ] && { echo "skipped: namespaces need root"; exit 77; }; echo "harness failed ($rc)"; exit 1; }

median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
report() { # label values...
  printf "%-40s median %6.2f GB/s  (%s)\n" "$1" "$(printf '%s\n' "${@:2}" | median)" "${*:2}"
}
echo "# $size, 2 hosts x 1 rank; socket runs move ${half_mib} MiB buffers x $iters each way"
for mode in shared split threads shared-threads; do
  report "socket $mode (host 0)" $(awk '{print $(NF - 3)}' "$out"/socket-$mode.0.*)
done
for coll in allgather allreduce; do
  for t in tcp ucx; do
    for col in 8 12; do
      label="collie $coll $t $([ $col = 8 ] && echo out-of-place || echo in-place) busbw"
      report "$label" $(for f in "$out"/collie-$coll-$t.0.*; do
        awk -v want="$bytes" -v c=$col '$1 == want {print $c; exit}' "$f"
      done)
    done
  done
done
