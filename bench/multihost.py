#!/usr/bin/env python3
"""All-reduce across network-bound namespace hosts, against the link's bound.

    sudo bench/multihost.py [--build build] [--hosts 2 4] [--ranks 2] [--rate 1gbit]
                            [--order block cyclic] [--size 64M] [--iters 3] [--algo auto]

For each host count M and rank order, tools/netns_harness.sh makes M hosts joined by
a bridge (two: one veth pair), each host's egress limited to --rate by tc's token
bucket, and `collie run --nnodes M -n L --distribution ORDER` runs `collie perf
allreduce` of --size over all M x L ranks. Each host reads its eth0 transmit counter
before and after, so the table shows, per host and per all-reduce:

  time        collie's out-of-place time (nccl-tests' figure, max over ranks)
  bound       2(M-1)/M x S / rate: the least any all-reduce can send per host (each
              host's share of the result must leave it once and the rest arrive once)
  flat ring   what one ring over all ranks in this order sends per host:
              block: 2(N-1)/N x S (one ring edge leaves each host);
              cyclic: L x 2(N-1)/N x S (every edge crosses hosts)
  tx bytes    measured on eth0, against the flat ring's prediction

Needs root (namespaces, tc). Addresses come from the project's test range 10.213.0.0/16
only. The CPU should idle most of the time at the chosen rate: pick one well below
what `bench/socket_ceiling.sh` measures between two namespaces.
"""
import argparse
import os
import re
import secrets
import subprocess
import sys

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


def run_case(args, hosts, order, subnet):
    collie = os.path.join(os.path.abspath(args.build), "bin", "collie")
    harness = os.path.join(ROOT, "tools", "netns_harness.sh")
    tx = "cat /sys/class/net/eth0/statistics/tx_bytes"
    cmd = (
        f'echo "tx_before $({tx})"; '
        f"{collie} run --nnodes {hosts} --node-rank $COLLIE_NETNS_INDEX "
        f"--master $COLLIE_NETNS_MASTER:29600 -n {args.ranks} --distribution {order} -- "
        f"{collie} perf allreduce -b {args.size} -e {args.size} -n {args.iters} -w 1 -c 1 "
        f"--algo {args.algo} || exit 1; "
        f'echo "tx_after $({tx})"'
    )
    env = dict(os.environ, COLLIE_JOB_SECRET=secrets.token_hex(16))
    env.setdefault("COLLIE_TIMEOUT", "300s")
    out = subprocess.run(
        [harness, "-k", str(hosts), "--subnet", str(subnet), "--rate", args.rate, "--timeout",
         "900", "--", cmd],
        env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"multihost: {hosts} hosts, {order}: harness exit {out.returncode}\n"
                 f"{out.stdout[-3000:]}{out.stderr[-2000:]}")
    time_us, wrong, tx = None, None, {}
    for line in out.stdout.splitlines():
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
    per_host = [(tx[h]["after"] - tx[h]["before"]) / runs for h in sorted(tx)]
    return time_us, wrong, per_host


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
    parser.add_argument("--algo", default="auto")
    args = parser.parse_args()
    size = parse_size(args.size)
    args.size = size
    rate = parse_rate(args.rate)

    print(f"all-reduce of {size} bytes, {args.ranks} ranks per host, egress {args.rate} "
          f"per host, --algo {args.algo} (`bench/multihost.py`)\n")
    print("| hosts | ranks | order | time ms | bound ms | time / bound | flat ring ms "
          "| tx MB/host (min-max) | predicted MB | #wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    subnet = 60
    for hosts in args.hosts:
        for order in args.order:
            n = hosts * args.ranks
            time_us, wrong, per_host = run_case(args, hosts, order, subnet)
            subnet += 1
            bound_s = 2 * (hosts - 1) / hosts * size * 8 / rate
            edges = 1 if order == "block" else args.ranks
            flat_bytes = edges * 2 * (n - 1) / n * size if hosts > 1 else 0
            print(f"| {hosts} | {n} | {order} | {time_us / 1e3:.0f} | {bound_s * 1e3:.0f} "
                  f"| {time_us / 1e6 / bound_s:.2f} | {flat_bytes * 8 / rate * 1e3:.0f} "
                  f"| {min(per_host) / 1e6:.1f}-{max(per_host) / 1e6:.1f} "
                  f"| {flat_bytes / 1e6:.1f} | {wrong} |", flush=True)


if __name__ == "__main__":
    main()
