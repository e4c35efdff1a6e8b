#!/bin/sh
# tools/netns_harness.sh itself: addresses, bridge for 3 hosts, TCP between hosts,
# exit status, and cleanup after SIGTERM. Exit 77 (skipped) without root/ip.
# usage: netns_harness_checks.sh HARNESS
harness=$1
fail() { echo "FAILED: $*"; exit 1; }
out=$("$harness" -k 3 --subnet 7 -- 'ip -4 -br addr show eth0; exit $COLLIE_NETNS_INDEX' 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -eq 1 ] || fail "expected the first failing host's status 1, got $rc"
for i in 0 1 2; do
  echo "$out" | grep -q "^\[host $i\] eth0.*10\.213\.7\.$((i + 1))/24" || fail "host $i address"
done
# TCP across the bridge: host 2 connects to host 0 (python3 is a project dependency).
out=$("$harness" -k 3 --subnet 8 --timeout 20 -- 'python3 - <<PY
import os, socket, time
i = int(os.environ["COLLIE_NETNS_INDEX"])
if i == 0:
    s = socket.socket(); s.bind(("10.213.8.1", 29400)); s.listen(); c, a = s.accept()
    print("got", c.recv(16).decode(), "from", a[0])
elif i == 2:
    for _ in range(100):
        try:
            c = socket.create_connection(("10.213.8.1", 29400)); break
        except OSError:
            time.sleep(0.05)
    c.sendall(b"hello")
PY' 2>&1)
echo "$out"
echo "$out" | grep -q "^\[host 0\] got hello from 10.213.8.3" || fail "tcp across the bridge"
# Cleanup on SIGTERM: namespaces and processes are gone.
"$harness" -k 2 --subnet 9 -- 'sleep 300' >/dev/null 2>&1 &
pid=$!
sleep 1
[ "$(ip netns list | grep -c "collie-test-$pid-")" -eq 2 ] || fail "namespaces not created"
kill -TERM $pid
wait $pid
sleep 0.5
[ "$(ip netns list | grep -c "collie-test-$pid-")" -eq 0 ] || fail "namespaces left after SIGTERM"
echo PASSED
