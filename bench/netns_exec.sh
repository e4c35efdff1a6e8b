#!/bin/sh
# netns_exec.sh: an "ssh" for launchers (MPICH's Hydra -launcher-exec, Open MPI's
# plm_rsh_agent) between the namespace hosts of tools/netns_harness.sh. Called as ssh
# would be, `netns_exec.sh [-options] HOST COMMAND...`, it runs COMMAND through `sh -c`
# in the network namespace whose eth0 holds address HOST (root only, as the harness),
# in a UTS namespace of its own named after it: launchers tell nodes apart by host
# name, and the harness's namespaces share the machine's.
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;
    *) break ;;
  esac
done
host=$1
shift
for ns in $(ip netns list | awk '/^collie-test-/ { print $1 }'); do
  if ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | grep -q "inet $host/"; then
    exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
  fi
done
echo "netns_exec: no namespace host has address $host" >&2
exit 255
