#!/usr/bin/env bash
# netns_harness.sh: run a command on K "hosts" made of Linux network namespaces.
#
#   tools/netns_harness.sh [-k K] [--subnet N] [--congestion ALGO] [--rate RATE] [--timeout S]
#                          -- cmd args...
#
# Creates namespaces collie-test-<pid>-<i> (i = 0..K-1), each with lo up and one
# interface eth0 at 10.213.N.(i+1)/24 (N = --subnet, default 0). Two hosts are joined
# by one veth pair; more are joined through a bridge that lives in a namespace of its
# own (collie-test-<pid>-br), so the host's network is never touched: every link is
# created directly inside the namespaces. Addresses come only from 10.213.0.0/16, the
# project's test range. --rate RATE (tc's syntax: 1gbit, 500mbit) limits what each
# host sends on eth0 with a token-bucket qdisc (tbf), so that the link, not the CPU, is
# the bottleneck, as between real hosts.
#
# The command runs in every namespace at once (through `sh -c`, so it may use the
# variables below), with
#   COLLIE_NETNS_INDEX   this host's index i
#   COLLIE_NETNS_COUNT   K
#   COLLIE_NETNS_ADDR    this host's address, 10.213.N.(i+1)
#   COLLIE_NETNS_MASTER  host 0's address, 10.213.N.1
# Output lines are prefixed with "[host i] ". The harness waits for all of them and
# exits with the first non-zero status (0 when all succeed). Everything it created is
# removed on exit, on error and on SIGINT/SIGTERM. Exit status 77 (and a line starting
# with "skipped:") when namespaces cannot be created (not root, no `ip`).
set -u

count=2
subnet=0
congestion=""
rate=""
timeout_s=0
while [ $# -gt 0 ]; do
  case "$1" in
    -k) count="$2"; shift 2 ;;
    --subnet) subnet="$2"; shift 2 ;;
    --congestion) congestion="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "netns_harness: no command given (netns_harness.sh [-k K] -- cmd args...)" >&2
  exit 2
fi
case "$count" in ''|*[!0-9]*) echo "netns_harness: -k needs a number" >&2; exit 2 ;; esac
case "$rate" in ''|[0-9]*[kmg]bit|[0-9]*bit) ;; *) echo "netns_harness: --rate needs tc's form, e.g. 1gbit or 500mbit" >&2; exit 2 ;; esac
case "$subnet" in ''|*[!0-9]*) echo "netns_harness: --subnet needs 0..255" >&2; exit 2 ;; esac
if [ "$count" -lt 1 ] || [ "$count" -gt 250 ] || [ "$subnet" -gt 255 ]; then
  echo "netns_harness: -k must be 1..250 and --subnet 0..255" >&2
  exit 2
fi
command_text="$*"

if ! command -v ip >/dev/null 2>&1; then
  echo "skipped: the 'ip' tool (iproute2) is not installed"
  exit 77
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: network namespaces need root (run as root or with CAP_SYS_ADMIN)"
  exit 77
fi

prefix="collie-test-$$"
created=()
pids=()

cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "${created[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

fail() {
  echo "netns_harness: $*" >&2
  exit 1
}

add_ns() {
  if ! ip netns add "$1" 2>/dev/null; then
    echo "skipped: cannot create network namespace $1 (no permission or no kernel support)"
    exit 77
  fi
  created+=("$1")
  ip -n "$1" link set lo up || fail "cannot bring lo up in $1"
}

for ((i = 0; i < count; i++)); do add_ns "$prefix-$i"; done

if [ "$count" -eq 2 ]; then
  ip -n "$prefix-0" link add eth0 type veth peer name eth0 netns "$prefix-1" ||
    fail "cannot create the veth pair"
elif [ "$count" -gt 2 ]; then
  bridge_ns="$prefix-br"
  add_ns "$bridge_ns"
  ip -n "$bridge_ns" link add br0 type bridge || fail "cannot create the bridge"
  ip -n "$bridge_ns" link set br0 up
  for ((i = 0; i < count; i++)); do
    ip -n "$bridge_ns" link add "p$i" type veth peer name eth0 netns "$prefix-$i" ||
      fail "cannot create the veth pair of host $i"
    ip -n "$bridge_ns" link set "p$i" master br0
    ip -n "$bridge_ns" link set "p$i" up
  done
fi
for ((i = 0; i < count; i++)); do
  ns="$prefix-$i"
  if [ "$count" -gt 1 ]; then
    ip -n "$ns" addr add "10.213.$subnet.$((i + 1))/24" dev eth0 || fail "cannot address host $i"
    ip -n "$ns" link set eth0 up || fail "cannot bring eth0 up in host $i"
  fi
  if [ -n "$rate" ] && [ "$count" -gt 1 ]; then
    # burst: a few 64 KiB GSO segments (tbf drops a packet larger than its bucket).
    ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst 512kb latency 100ms ||
      fail "cannot limit eth0 of host $i to $rate (tc tbf)"
  fi
  if [ -n "$congestion" ]; then
    ip netns exec "$ns" sysctl -qw "net.ipv4.tcp_congestion_control=$congestion" ||
      fail "cannot set tcp_congestion_control=$congestion in host $i"
  fi
done

# Wait until every link has carrier: programs that enumerate interfaces at start (UCX)
# would otherwise miss an eth0 that is still coming up.
if [ "$count" -gt 1 ]; then
  for ((i = 0; i < count; i++)); do
    for ((try = 0; try < 100; try++)); do
      state=$(ip netns exec "$prefix-$i" cat /sys/class/net/eth0/operstate 2>/dev/null)
      [ "$state" = up ] && break
      sleep 0.05
    done
    [ "$state" = up ] || fail "eth0 of host $i did not come up (operstate '$state')"
  done
fi

for ((i = 0; i < count; i++)); do
  ns="$prefix-$i"
  runner=(ip netns exec "$ns" env COLLIE_NETNS_INDEX="$i" COLLIE_NETNS_COUNT="$count"
          COLLIE_NETNS_ADDR="10.213.$subnet.$((i + 1))" COLLIE_NETNS_MASTER="10.213.$subnet.1")
  if [ "$timeout_s" != 0 ]; then runner+=(timeout -s TERM "$timeout_s"); fi
  # setsid: each host is a process group of its own, so cleanup can end all of it;
  # pipefail: the host's status is the command's, not sed's.
  setsid bash -c 'set -o pipefail; h=$1; shift; "$@" 2>&1 | sed -u "s/^/[host $h] /"' \
    harness "$i" "${runner[@]}" sh -c "$command_text" &
  pids+=("$!")
done

status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
done
pids=()
exit "$status"
