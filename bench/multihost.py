#!/usr/bin/env python3
"""All-reduce across network-bound namespace hosts, against the link's bound.

    sudo bench/multihost.py [--build build] [--hosts 2 4] [--ranks 2] [--rate 1gbit]
                            [--order block cyclic] [--size 64M] [--iters 3]
                            [--algo ring hier auto] [--repeat 3]
                            [--peers mpich ompi-han ompi gloo]

For each host count M, rank order and algorithm, tools/netns_harness.sh makes M hosts
joined by a bridge (two: one veth pair), each host's egress limited to --rate by tc's
token bucket, and `collie run --nnodes M -n L --distribution ORDER` runs `collie perf
allreduce --algo ALGO` of --size over all M x L ranks, --repeat times. Each host reads
its eth0 transmit counter before and after, so the table shows, per all-reduce:

  algo        what ran (the tuner's log line of rank 0: auto names its choice)
  time        median over the repeats of collie's out-of-place time (nccl-tests'
              figure: mean of --iters, max over ranks), with the range
  bound       2(M-1)/M x S / rate: the least any all-reduce can send per host (each
              host's share of the result must leave it once and the rest arrive once)
  ring ms     a flat ring's time at the rate: 2(N-1)/N x S per host (rings are built
              host after host in either numbering, so one edge leaves each host)
  tx bytes    measured on eth0 (median run), less the tuner's probe between hosts
              (13 x 1 MiB from hosts 0 and 1), per all-reduce, against what the
              algorithm that ran sends per host: ring 2(N-1)/N x S, hier 2(M-1)/M x S
  load        the 1-minute load average before the case (the machine is shared)

--peers runs other libraries' all-reduce of the same size on the same namespace hosts
and rate, in block order (host after host), after collie's rows of each host count:

  mpich      MPICH's MPI_Allreduce (bench/mpi_allreduce.c built with mpicc.mpich at
             run time; ch4:ucx with UCX_TLS=tcp,self over eth0: UCX's shared memory
             would join the namespaces, which share /dev/shm, past the link), Hydra
             starting its proxies in the namespaces through bench/netns_exec.sh
             (`mpiexec.hydra -launcher ssh -launcher-exec`)
  ompi-han   Open MPI's with coll/han (priority 100, coll_han_use_simple_allreduce: the
             segmented han all-reduce of Open MPI 4.1.4 crashes from 1 MiB up, see
             docs/multihost.md), orted started the same way (plm_rsh_agent); btl
             self,tcp (vader crashes between the namespaces)
  ompi       Open MPI's default (coll/tuned)
  gloo       Gloo's AllreduceRingChunked (bench/gloo_allreduce.cc, in place, FileStore)
Their time is the median of the slowest rank's average per call; tx bytes are eth0's
per all-reduce (no probe), and #wrong is "-" (they do not check results).

Needs root (namespaces, tc). Addresses come from the project's test range 10.213.0.0/16
only. The CPU should idle most of the time at the chosen rate: pick one well below
what `bench/socket_ceiling.sh` measures between two namespaces.
"""
import argparse
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    m = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text}")
    return int(m.group(1)) * units[m.group(2)]


def parse_rate(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad rate {text} (tc's form: 1gbit, 500mbit)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def run_case(args, hosts, order, algo, subnet):
    collie = os.path.join(os.path.abspath(args.build), "bin", "collie")
    harness = os.path.join(ROOT, "tools", "netns_harness.sh")
    tx = "cat /sys/class/net/eth0/statistics/tx_bytes"
    cmd = (
        f'echo "tx_before $({tx})"; '
        f"{collie} run --nnodes {hosts} --node-rank $COLLIE_NETNS_INDEX "
        f"--master $COLLIE_NETNS_MASTER:29600 -n {args.ranks} --distribution {order} -- "
        f"{collie} perf allreduce -b {args.size} -e {args.size} -n {args.iters} -w 1 -c 1 "
        f"--algo {algo} || exit 1; "
        f'echo "tx_after $({tx})"'
    )
    env = dict(os.environ, COLLIE_JOB_SECRET=secrets.token_hex(16))
    env.setdefault("COLLIE_TIMEOUT", "300s")
    env.update(COLLIE_DEBUG="INFO", COLLIE_DEBUG_SUBSYS="TUNE")  # the plan of each size
    out = subprocess.run(
        [harness, "-k", str(hosts), "--subnet", str(subnet), "--rate", args.rate, "--timeout",
         "900", "--", cmd],
        env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"multihost: {hosts} hosts, {order}: harness exit {out.returncode}\n"
                 f"{out.stdout[-3000:]}{out.stderr[-2000:]}")
    time_us, wrong, tx, ran = None, None, {}, "?"
    for line in out.stdout.splitlines() + out.stderr.splitlines():
        m = re.search(rf"rank 0: allreduce of {args.size} bytes on \d+ ranks -> (\S+)", line)
        if m:
            ran = m.group(1)
            continue
        m = re.match(r"\[host (\d+)\] tx_(before|after) (\d+)", line)
        if m:
            tx.setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
            continue
        fields = line.split("] ", 1)[-1].split()
        if len(fields) >= 13 and fields[0] == str(args.size) and line.startswith("[host 0]"):
            time_us, wrong = float(fields[5]), int(fields[8]) + int(fields[12])
    if time_us is None:
        sys.exit(f"multihost: no result row in\n{out.stdout[-3000:]}")
    # Each size runs out of place then in place: one checked run, -w warmups, -n timed.
    runs = 2 * (1 + 1 + args.iters)
    # Less the tuner's probe between hosts (rank 0 with the lowest rank of another host,
    # host 1 in either numbering): 13 messages of 1 MiB each way, never cached.
    probe = {0: 13 << 20, 1: 13 << 20}
    per_host = [(tx[h]["after"] - tx[h]["before"] - probe.get(h, 0)) / runs for h in sorted(tx)]
    return time_us, wrong, per_host, ran


def peer_launch(args, peer, hosts, bench):
    """The command host 0 runs to start `peer` on every host (block order)."""
    size, n = args.size, hosts * args.ranks
    wrapper = os.path.join(ROOT, "bench", "netns_exec.sh")
    host_list = ",".join(f"$sub.{h + 1}:{args.ranks}" for h in range(hosts))
    timing = f"-b {size} -e {size} -n {args.iters} -w 1 -t 1"
    if peer == "mpich":
        return (f"sub=${{COLLIE_NETNS_MASTER%.*}}; mpiexec.hydra -launcher ssh -launcher-exec "
                f"{wrapper} -iface eth0 -hosts {host_list} -n {n} -genv UCX_NET_DEVICES eth0 "
                f"-genv UCX_TLS tcp,self {bench} {timing}")
    han = ("--mca coll_han_priority 100 --mca coll_han_use_simple_allreduce 1"
           if peer == "ompi-han" else "")
    return (f"sub=${{COLLIE_NETNS_MASTER%.*}}; mpirun --allow-run-as-root --mca plm_rsh_agent "
            f"{wrapper} --host {host_list} -np {n} --mca pml ob1 --mca btl self,tcp "
            f"--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 {han} {bench} {timing}")


def run_peer(args, hosts, peer, subnet, workdir):
    """One all-reduce case of another library: (time us, per-host tx bytes per call)."""
    tx = "cat /sys/class/net/eth0/statistics/tx_bytes"
    done = os.path.join(workdir, f"done-{subnet}")
    if peer == "gloo":
        store = os.path.join(workdir, f"store-{subnet}")
        os.makedirs(store, exist_ok=True)
        gloo = os.path.join(os.path.abspath(args.build), "bench", "gloo_allreduce")
        ranks = " ".join(
            f"{gloo} -r $((COLLIE_NETNS_INDEX * {args.ranks} + {l})) -s {hosts * args.ranks} "
            f"-p {store} -h $COLLIE_NETNS_ADDR -b {args.size} -e {args.size} -n {args.iters} "
            f"-w 1 -t 1 &" for l in range(args.ranks))
        run = f"{ranks} wait"
        calls = 1 + args.iters
    else:
        bench = os.path.join(workdir, "mpi_allreduce_mpich") if peer == "mpich" else \
            os.path.join(os.path.abspath(args.build), "bench", "mpi_allreduce")
        run = (f'if [ "$COLLIE_NETNS_INDEX" = 0 ]; then {peer_launch(args, peer, hosts, bench)} '
               f"|| exit 1; touch {done}; else while [ ! -e {done} ]; do sleep 0.1; done; fi")
        calls = 2 * (1 + args.iters)  # out of place and in place
    cmd = f'echo "tx_before $({tx})"; {run}; echo "tx_after $({tx})"'
    out = subprocess.run(
        [os.path.join(ROOT, "tools", "netns_harness.sh"), "-k", str(hosts), "--subnet",
         str(subnet), "--rate", args.rate, "--timeout", "900", "--", cmd],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"multihost: {peer} on {hosts} hosts: harness exit {out.returncode}\n"
                 f"{out.stdout[-3000:]}{out.stderr[-2000:]}")
    time_us, tx_of = None, {}
    for line in out.stdout.splitlines():
        m = re.match(r"\[host (\d+)\] tx_(before|after) (\d+)", line)
        if m:
            tx_of.setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
            continue
        fields = line.split("] ", 1)[-1].split()
        if len(fields) >= 2 and fields[0] == str(args.size) and line.startswith("[host 0]"):
            time_us = float(fields[1])  # MPI: out of place; Gloo: in place (its only mode)
    if time_us is None:
        sys.exit(f"multihost: no {peer} result in\n{out.stdout[-3000:]}")
    return time_us, [(tx_of[h]["after"] - tx_of[h]["before"]) / calls for h in sorted(tx_of)]


def print_peers(args, hosts, rate, subnet):
    """Rows of --peers for `hosts` hosts; returns the next subnet."""
    workdir = tempfile.mkdtemp(prefix="collie-multihost-")
    if "mpich" in args.peers:
        subprocess.run(["mpicc.mpich", "-O2", "-I", os.path.join(ROOT, "bench"), "-o",
                        os.path.join(workdir, "mpi_allreduce_mpich"),
                        os.path.join(ROOT, "bench", "mpi_allreduce.c")], check=True)
    n = hosts * args.ranks
    bound_s = 2 * (hosts - 1) / hosts * args.size * 8 / rate
    ring_ms = 2 * (n - 1) / n * args.size * 8 / rate * 1e3
    for peer in args.peers:
        runs, loads = [], []
        for _ in range(args.repeat):
            loads.append(os.getloadavg()[0])
            runs.append(run_peer(args, hosts, peer, subnet, workdir))
            subnet = subnet % 200 + 1
        runs.sort(key=lambda r: r[0])
        time_us, per_host = runs[len(runs) // 2]
        print(f"| {hosts} | {n} | block | {peer} "
              f"| {time_us / 1e3:.0f} ({runs[0][0] / 1e3:.0f}-{runs[-1][0] / 1e3:.0f}) "
              f"| {bound_s * 1e3:.0f} | {time_us / 1e6 / bound_s:.2f} | {ring_ms:.0f} "
              f"| {min(per_host) / 1e6:.1f}-{max(per_host) / 1e6:.1f} | - "
              f"| {min(loads):.1f}-{max(loads):.1f} | - |", flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return subnet


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--ranks", type=int, default=2, help="ranks per host")
    parser.add_argument("--rate", default="1gbit", help="egress limit per host (tc tbf)")
    parser.add_argument("--order", nargs="+", default=["block", "cyclic"],
                        choices=["block", "cyclic"])
    parser.add_argument("--size", default="64M")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--algo", nargs="+", default=["ring", "hier", "auto"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--peers", nargs="*", default=[],
                        choices=["mpich", "ompi-han", "ompi", "gloo"],
                        help="other libraries on the same hosts and rate (block order)")
    args = parser.parse_args()
    size = parse_size(args.size)
    args.size = size
    rate = parse_rate(args.rate)

    print(f"all-reduce of {size} bytes, {args.ranks} ranks per host, egress {args.rate} "
          f"per host, median of {args.repeat} runs (`bench/multihost.py`)\n")
    print("| hosts | ranks | order | algo | time ms (range) | bound ms | time / bound "
          "| ring ms | tx MB/host (min-max) | predicted MB | load | #wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    subnet = 60
    for hosts in args.hosts:
        for order in args.order:
            for algo in args.algo:
                n = hosts * args.ranks
                runs, loads = [], []
                for _ in range(args.repeat):
                    loads.append(os.getloadavg()[0])
                    runs.append(run_case(args, hosts, order, algo, subnet))
                    subnet = subnet % 200 + 1
                runs.sort(key=lambda r: r[0])
                time_us, _, per_host, ran = runs[len(runs) // 2]
                wrong = sum(r[1] for r in runs)
                bound_s = 2 * (hosts - 1) / hosts * size * 8 / rate
                ring_bytes = 2 * (n - 1) / n * size
                sent = 2 * (hosts - 1) / hosts * size if ran.startswith("hier") else ring_bytes
                print(f"| {hosts} | {n} | {order} | {ran} "
                      f"| {time_us / 1e3:.0f} ({runs[0][0] / 1e3:.0f}-{runs[-1][0] / 1e3:.0f}) "
                      f"| {bound_s * 1e3:.0f} | {time_us / 1e6 / bound_s:.2f} "
                      f"| {ring_bytes * 8 / rate * 1e3:.0f} "
                      f"| {min(per_host) / 1e6:.1f}-{max(per_host) / 1e6:.1f} "
                      f"| {sent / 1e6:.1f} | {min(loads):.1f}-{max(loads):.1f} | {wrong} |",
                      flush=True)
        if args.peers:
            subnet = print_peers(args, hosts, rate, subnet)


if __name__ == "__main__":
    main()
