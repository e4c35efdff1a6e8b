#!/usr/bin/env bash
# ucx_vs_perftest.sh: collie's 64 MiB all-reduce over ucx against `ucx_perftest -t tag_bw`
# between the same two namespace hosts (tools/netns_harness.sh), interleaved rounds.
#
#   bench/ucx_vs_perftest.sh [--build DIR] [--rounds R] [--size 64M] [--ucx-env "K=V ..."]
#                            [--perftest-poll] [--perftest-congestion ALGO] [--pin-hosts]
#
# Every round runs, in this order, on the same veth pair and with the same UCX_TLS
# (default tcp):
#   perftest-chunk   tag_bw, one direction, message = what collie's ring sends per step
#                    (the tuner's chunk: 1 MiB for 64 MiB on 2 ranks)
#   perftest-half    tag_bw, one direction, message = size / 2 (one ring step unchunked)
#   perftest-bidir   two tag_bw runs at once, one per direction (chunk-sized messages),
#                    8 GiB each so that they overlap for almost all of their time:
#                    the link load of a 2-rank all-reduce, which sends both ways
#   perftest-bidir-half  the same with size / 2 messages: both directions busy and,
#                    like the all-reduce's 64 MiB buffers, a buffer that does not stay
#                    in the cache (perftest reuses one buffer: 1 MiB ones stay cached)
#   ucx-bidir-1proc  bench/ucx_bidir: ONE process per host, one UCP worker on one thread,
#                    sending and receiving chunk-sized messages over size/2 buffers both
#                    ways at once (2 in flight per direction), with collie's endpoint
#                    error handling, UCX settings and congestion control: what the one
#                    progress thread of a collie rank could move at best
#   ucx-bidir-2thr   the same with a UCP worker and a thread per direction (--threads 2):
#                    what a transport with a progress thread per direction could move
#   ucx-bidir-pt     ucx-bidir-1proc with perftest's UCX settings instead of collie's:
#                    UCX's defaults (rendezvous from its threshold) and no endpoint
#                    error handling, which gives UCX's tcp a zero-copy put lane but
#                    leaves a dead peer undetected (docs/multihost.md, ninth look)
#   collie-ucx       `collie perf allreduce -b size -e size`, COLLIE_TRANSPORT=ucx
#   collie-tcp       the same over collie's own tcp transport (reference)
#   collie-ucx-env   with --ucx-env: collie-ucx again with those variables set (A/B)
# and prints per variant the median GB/s. perftest reports unidirectional bandwidth;
# a 2-rank ring all-reduce moves S/2 bytes each way per phase, 2 phases, so its busbw
# (algbw x 2(n-1)/n = S / t) is the per-direction rate: compare it with perftest-bidir
# (per direction, both directions busy), and with perftest-chunk as an upper bound.
# perftest runs with `-I -E sleep` (it blocks on the worker's event fd when idle, as
# collie's engine does after COLLIE_BUSY_POLL): its default busy polling collapses to
# 0.14-0.4 GB/s when the 2 cores are shared with other work (2.7 GB/s with sleep at the
# same time); --perftest-poll restores it for a quiet machine.
# Congestion control: collie's sockets, UCX's included, use COLLIE_TCP_CONGESTION (cubic)
# while perftest's keep the system default (the namespaces cannot change it: bbr here).
# --perftest-congestion cubic runs perftest with cubic too (build/bench's
# collie_tcp_congestion_preload.so), for a comparison under the same congestion control.
# --pin-hosts runs every process of namespace host i on CPU i only (taskset): two
# machines of one core each. Without it the two "hosts" share both cores, and perftest's
# two processes per host spread one host's work over both (docs/multihost.md, tenth
# look).
# Needs root (namespaces) and ucx_perftest; exit 77 otherwise.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build="$here/build"
rounds=5
size=64M
ucx_env=""
pt_mode="-I -E sleep"
pt_cc=""
pin_hosts=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --ucx-env) ucx_env="$2"; shift 2 ;;
    --perftest-poll) pt_mode=""; shift ;;
    --pin-hosts) pin_hosts=1; shift ;;
    --perftest-congestion) pt_cc="$2"; shift 2 ;;
    -h|--help) sed -n "2,49p" "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [ $pin_hosts = 1 ] && [ "$(nproc)" -lt 2 ]; then echo "--pin-hosts needs 2 CPUs" >&2; exit 2; fi
command -v ucx_perftest >/dev/null || { echo "skipped: ucx_perftest not installed"; exit 77; }
collie="$build/bin/collie"
[ -x "$collie" ] || { echo "no $collie: build first" >&2; exit 2; }
bidir="$build/bench/ucx_bidir"
[ -x "$bidir" ] || { echo "no $bidir: build first" >&2; exit 2; }
cc_shim="$build/bench/collie_tcp_congestion_preload.so"
pt_env=""
if [ -n "$pt_cc" ]; then
  shim="$build/bench/collie_tcp_congestion_preload.so"
  [ -f "$shim" ] || { echo "no $shim: build first" >&2; exit 2; }
  pt_env="env LD_PRELOAD=$shim COLLIE_PRELOAD_TCP_CONGESTION=$pt_cc"
fi
bytes=$(numfmt --from=iec "$size")
half=$((bytes / 2))
# The chunk the tuner picks for this size on 2 ranks (the ring's per-step message).
chunk=$(COLLIE_TUNE_ALPHA_US=${COLLIE_TUNE_ALPHA_US:-20} "$collie" info --tuning 2>/dev/null |
  awk -v want="$size" '/^allreduce/ {on = 1} on && $1 == want {split($2, a, "/"); print a[2]; exit}')
chunk_bytes=$(numfmt --from=iec "${chunk:-1M}")
export UCX_TLS=${UCX_TLS:-tcp}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

cat >"$out/host.sh" <<EOF
#!/bin/bash
# Runs in both namespaces at once. perftest prints results on its client side, so the
# clients record them (host 1 forward, host 0 the reverse run of bidir); collie's
# rank 0 (host 0) records its table.
i=\$COLLIE_NETNS_INDEX
pin=\$([ $pin_hosts = 1 ] && echo "taskset -c \$i")
peer=\$([ \$i = 0 ] && echo \$COLLIE_NETNS_MASTER | sed 's/\.1\$/.2/' || echo \$COLLIE_NETNS_MASTER)
port=23000
perftest() { # name size [bidir]
  port=\$((port + 2))
  # 1 GiB one way; 8 GiB per direction both ways, so that the two runs (started apart
  # by the harness's skew) overlap for almost all of it: with 1 GiB at 9 GB/s they
  # barely overlapped and reported nearly one-way figures.
  local total=\$([ "\${3:-}" = bidir ] && echo 8192 || echo 1024)
  local n=\$(( (total << 20) / \$2 + 1 )) w=\$(( (64 << 20) / \$2 + 1 ))
  local args="-t tag_bw -s \$2 -n \$n -w \$w -f $pt_mode"
  if [ \$i = 0 ]; then
    if [ "\${3:-}" = bidir ]; then
      (sleep 0.3; \$pin $pt_env ucx_perftest \$args -p \$((port + 1)) \$peer >"$out/\$1.rev.\$port" 2>&1) &
    fi
    \$pin $pt_env ucx_perftest \$args -p \$port >/dev/null 2>&1
    wait
  else
    if [ "\${3:-}" = bidir ]; then \$pin $pt_env ucx_perftest \$args -p \$((port + 1)) >/dev/null 2>&1 & fi
    sleep 0.3
    \$pin $pt_env ucx_perftest \$args -p \$port \$COLLIE_NETNS_MASTER >"$out/\$1.\$port" 2>&1
    wait
  fi
}
ucxbidir() { # name buffer-bytes message-bytes [--ucx-defaults] [ucx_bidir options]
  port=\$((port + 2))
  local env="LD_PRELOAD=$cc_shim COLLIE_PRELOAD_TCP_CONGESTION=\${COLLIE_TCP_CONGESTION:-cubic}"
  if [ "\${4:-}" = --ucx-defaults ]; then
    set -- "\$1" "\$2" "\$3" "\${@:5}"
  else
    # collie's settings for UCX over tcp only (transports/ucx/ucx_worker.cc), unless set.
    env="\$env UCX_RNDV_THRESH=\${UCX_RNDV_THRESH:-inf} UCX_TCP_TX_SEG_SIZE=\${UCX_TCP_TX_SEG_SIZE:-256k}"
    env="\$env UCX_TCP_RX_SEG_SIZE=\${UCX_TCP_RX_SEG_SIZE:-256k}"
  fi
  local args="\$((\$2 >> 20)) \$((\$3 >> 10)) \$(( (2048 << 20) / \$2 + 1 )) \${*:4}"
  if [ \$i = 0 ]; then
    \$pin env \$env $bidir listen \$COLLIE_NETNS_ADDR \$port \$args >"$out/\$1.\$port" 2>&1
  else
    sleep 0.3
    \$pin env \$env $bidir connect \$COLLIE_NETNS_MASTER \$port \$args >/dev/null 2>&1
  fi
}
colliejob() { # name transport [env...]
  port=\$((port + 2))
  local name=\$1 transport=\$2
  shift 2
  \$pin env "\$@" RANK=\$i WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=\$COLLIE_NETNS_MASTER MASTER_PORT=\$port \
    COLLIE_JOB_SECRET=$secret COLLIE_HOST_ID=ns\$i COLLIE_SOCKET_IFNAME=eth0 \
    $collie perf allreduce -b $size -e $size -n 10 -w 3 -c 0 --transport \$transport \
    >"$out/\$name.\$i.\$port" 2>&1
}
for r in \$(seq $rounds); do
  perftest chunk $chunk_bytes
  perftest half $half
  perftest bidir $chunk_bytes bidir
  perftest bidirhalf $half bidir
  ucxbidir ucxbidir $half $chunk_bytes
  ucxbidir ucxbidir2 $half $chunk_bytes --threads 2
  ucxbidir ucxbidirpt $half $chunk_bytes --ucx-defaults --errors none
  colliejob ucx ucx
  colliejob tcp tcp
  if [ -n "$ucx_env" ]; then colliejob ucxenv ucx $ucx_env; fi
done
EOF
chmod +x "$out/host.sh"
"$here/tools/netns_harness.sh" --subnet $(($$ % 200 + 10)) --timeout 900 -- "$out/host.sh" ||
  { rc=$?; [ $rc = 77 ] && exit 77; echo "harness failed ($rc)"; exit 1; }

# ucx_perftest -f: last line "Final: ... <MB/s average> ..." columns vary by version;
# take the bandwidth average (MB/s, 2^20 bytes) column from its header.
# A run without a positive figure (no result row, or 0: it never got going) failed; it is
# left out of the median and counted, so that it cannot pull the reference down.
pt_gbs() { # file -> GB/s (1e9): the last result row's average bandwidth (MB/s)
  awk '/^ +[0-9]+ +[0-9.]+ / {bw = $5} END {if (bw + 0 > 0) print bw * 1048576 / 1e9}' "$1"
}
pt_vals() { # name -> GB/s of every run of that perftest figure that reported one
  local name=$1 f runs=0 vals=""
  for f in "$out/$name".*; do
    runs=$((runs + 1))
    vals="$vals $(pt_gbs "$f")"
  done
  set -- $vals
  [ $# -lt $runs ] && echo "# $name: $((runs - $#)) of $runs perftest runs reported no bandwidth (left out)" >&2
  [ $# -eq 0 ] || printf '%s\n' "$@"
}
bidir_gbs() { # file -> GB/s per direction (ucx_bidir's last field before "GB/s")
  awk '/GB\/s per direction/ {for (f = 1; f < NF; ++f) if ($(f + 1) == "GB/s") print $f}' "$1"
}
collie_gbs() { # file -> busbw GB/s (column busbw of the out-of-place row)
  awk -v want="$bytes" '$1 == want {print $8; exit}' "$1"
}
median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
report() { # label values...
  printf "%-44s median %6.3f GB/s  (%s)\n" "$1" "$(printf '%s\n' "${@:2}" | median)" "${*:2}"
}
[ $pin_hosts = 1 ] && echo "# --pin-hosts: host 0's processes on CPU 0, host 1's on CPU 1"
system_cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo "?")
echo "# TCP congestion control: perftest ${pt_cc:-$system_cc (system default)}," \
  "collie ${COLLIE_TCP_CONGESTION-cubic} (COLLIE_TCP_CONGESTION)"
declare -A med
figure() { # key label values...: prints the row and keeps the median under med[key]
  report "$2" "${@:3}"
  med[$1]=$(printf '%s\n' "${@:3}" | median)
}
for v in chunk half; do
  figure $v "perftest tag_bw $([ $v = chunk ] && echo "$chunk_bytes B" || echo "$half B") 1 dir" \
    $(pt_vals $v)
done
figure bidir "perftest tag_bw $chunk_bytes B, both dirs, per dir" $(pt_vals bidir)
figure bidirhalf "perftest tag_bw $half B, both dirs, per dir" $(pt_vals bidirhalf)
figure ucxbidir "ucx_bidir 1 process, both dirs, per dir" \
  $(for f in "$out"/ucxbidir.*; do bidir_gbs "$f"; done)
figure ucxbidir2 "ucx_bidir 1 process, thread per dir, per dir" \
  $(for f in "$out"/ucxbidir2.*; do bidir_gbs "$f"; done)
figure ucxbidirpt "ucx_bidir 1 process, perftest's UCX settings" \
  $(for f in "$out"/ucxbidirpt.*; do bidir_gbs "$f"; done)
for t in ucx tcp $([ -n "$ucx_env" ] && echo ucxenv); do
  figure $t "collie allreduce $size busbw over ${t/ucxenv/ucx + $ucx_env}" \
    $(for f in "$out/$t".0.*; do collie_gbs "$f"; done)
done
awk -v u="${med[ucx]}" -v t="${med[tcp]}" -v c="${med[chunk]}" -v h="${med[half]}" \
  -v b="${med[bidir]}" -v bh="${med[bidirhalf]}" -v ub="${med[ucxbidir]}" \
  -v ub2="${med[ucxbidir2]}" -v upt="${med[ucxbidirpt]}" 'BEGIN {
  printf "ratio collie-ucx busbw / perftest: chunk %.2f, half %.2f, bidir (per direction) %.2f, bidir-half %.2f\n",
    u / c, u / h, u / b, u / bh
  printf "ratio collie-tcp busbw / perftest: chunk %.2f, half %.2f, bidir (per direction) %.2f, bidir-half %.2f\n",
    t / c, t / h, t / b, t / bh
  printf "ratio collie-ucx busbw / ucx_bidir (one process both ways): %.2f, thread per direction %.2f, perftest settings %.2f\n",
    u / ub, u / ub2, u / upt
  printf "ratio ucx_bidir with perftest settings / perftest bidir-half: %.2f\n", upt / bh }'
