#!/bin/sh
# Issue 22, item 1 soak (loopback only, a few seconds): a stranger holds N idle
# connections to the launcher's store, whose process runs at `ulimit -n 64`, while a
# real 2-rank tcp all-reduce job joins through it. The job must succeed with every
# result exact, and the store thread (collie-store) must use under 10% of a CPU while
# the connections are held.
# fault: 500 idle stranger connections to the launcher's store at ulimit -n 64 during a job | the job's results are exact; the store thread uses under 10% of a CPU | store_flood_soak
# usage: store_flood_soak.sh COLLIE [N_STRANGERS]
collie=$1
strangers=${2:-500}
tmp=$(mktemp -d)
trap 'kill $stranger_pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/job.log" 2>/dev/null | tail -20; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export COLLIE_JOB_SECRET=5eed5eed5eed5eed5eed5eed5eed5eed
export COLLIE_TIMEOUT=30s

# The ranks wait for the flood, then raise their own limit again (the soft limit may go
# back up to the hard one) and run the checked benchmark.
( ulimit -n 64 && exec "$collie" run --master "127.0.0.1:$port" -n 2 -- sh -c \
    "while [ ! -e $tmp/measured ]; do sleep 0.05; done; ulimit -n 1024; exec $collie perf \
     allreduce -b 8 -e 1M -f 8 -n 3 -w 1 -c 1 --transport tcp --json $tmp/perf.json" ) > "$tmp/job.log" 2>&1 &
job_pid=$!

# The stranger: N connections that never say a word, held until killed.
python3 - "$port" "$strangers" > "$tmp/stranger.log" 2>&1 <<'PY' &
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
held = []
deadline = time.time() + 10
while len(held) < n and time.time() < deadline:
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect(("127.0.0.1", port))
        held.append(s)
    except OSError:
        s.close()
        time.sleep(0.02)
print(len(held), flush=True)
time.sleep(60)
PY
stranger_pid=$!

i=0
while [ ! -s "$tmp/stranger.log" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
held=$(head -1 "$tmp/stranger.log")
[ "${held:-0}" -ge 1 ] || fail "the stranger could not connect: $(cat "$tmp/stranger.log")"

# The store thread of the launcher (collie run -> store server thread "collie-store").
launcher=$(pgrep -P $job_pid -x collie || echo $job_pid)
task=""
for t in /proc/$launcher/task/*; do
  [ "$(cat $t/comm 2>/dev/null)" = "collie-store" ] && task=$t
done
[ -n "$task" ] || fail "no collie-store thread in process $launcher"
ticks() { awk '{print $14 + $15}' "$task/stat"; }
sleep 0.3
t0=$(ticks); sleep 1; t1=$(ticks)
hz=$(getconf CLK_TCK)
cpu=$(( (t1 - t0) * 100 / hz ))
echo "stranger holds $held connections; store CPU ${cpu}% over 1 s while idle"
touch "$tmp/measured"
start=$(date +%s%N)
wait $job_pid
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "2-rank job after the flood: exit $rc in $ms ms"
[ $rc -eq 0 ] || fail "the job failed under the flood (exit $rc)"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(d["wrong_total"] != 0)' \
  "$tmp/perf.json" || fail "wrong results (or no perf JSON)"
[ $cpu -lt 10 ] || fail "store CPU ${cpu}% while strangers idle (limit 10%)"
echo "PASS"
