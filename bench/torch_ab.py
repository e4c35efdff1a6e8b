#!/usr/bin/env python3
"""Paired A/B of two torch_collie builds' blocking all_reduce, with PyTorch's gloo backend
and the machine's ceiling in the same run.

Usage: bench/torch_ab.py --a PYTHONPATH_A --b PYTHONPATH_B [--rounds 5] [--min 256K]
                         [--max 16M] [--factor 4] [--iters 200] [--warmup 20]
                         [--build build] [--python VENV_PYTHON]

PYTHONPATH_A/B are directories holding a torch_collie package (a build's python/lib,
or a copy of it kept from before a change). A round runs the roofline once (dual-write
all-reduce bound, cache-line ping-pong: the VM's vCPU placement), then
bench/torch_allreduce.py on 2 ranks with A, B and gloo, in an order that alternates from
round to round. Each cell is the slowest rank's mean time per blocking
`dist.all_reduce` (float32, in place). The table gives per size the median over rounds
of A, B and gloo and the paired ratio B/A (median, and range, of the ratios taken
within one round).
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ab import parse_bytes, roofline  # noqa: E402


def launch(python, pythonpath, backend, port, sizes):
    lo, hi, factor, iters, warmup = sizes
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, PYTHONPATH=pythonpath, TORCH_BACKEND=backend, RANK=str(rank),
                   WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(
            [python, os.path.join(HERE, "torch_allreduce.py"), str(lo), str(hi), str(factor),
             str(iters), str(warmup)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True))
    out = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"torch_allreduce.py failed ({backend}, PYTHONPATH={pythonpath})")
    cells = {}
    for line in out[0].splitlines():
        size, us = line.split()
        cells[int(size)] = float(us)
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", required=True, help="PYTHONPATH of the baseline torch_collie")
    parser.add_argument("--b", required=True, help="PYTHONPATH of the candidate torch_collie")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min", type=parse_bytes, default=256 << 10)
    parser.add_argument("--max", type=parse_bytes, default=16 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"),
                        help="the collie build whose bench/roofline gives the ceiling")
    parser.add_argument("--python", default=os.path.expanduser(
        "~/.cache/collie/venv/bin/python"))
    args = parser.parse_args()
    sizes = (args.min, args.max, args.factor, args.iters, args.warmup)
    sides = [("A", args.a, "collie"), ("B", args.b, "collie"), ("gloo", args.a, "gloo")]
    rounds = []
    port = 29700
    for r in range(args.rounds):
        ceiling = roofline(args.build)
        order = sides if r % 2 == 0 else [sides[1], sides[0], sides[2]]
        cells = {}
        for name, path, backend in order:
            port += 1
            cells[name] = launch(args.python, path, backend, port, sizes)
        rounds.append({"roofline": ceiling, **cells})
        note = (f"dual-write {ceiling['dualwrite_busbw_gbps']:.2f} GB/s busbw, "
                f"{ceiling['placement']} placement ({ceiling['pingpong_ns']:.0f} ns)"
                if ceiling else "no roofline")
        print(f"round {r + 1}: {note}", file=sys.stderr, flush=True)
    print("| size | A us | B us | gloo us | B/A paired (range) |")
    print("|---|---|---|---|---|")
    slower = False
    for size in sorted(rounds[0]["A"]):
        a = [x["A"][size] for x in rounds]
        b = [x["B"][size] for x in rounds]
        g = [x["gloo"][size] for x in rounds]
        ratios = [y / x for x, y in zip(a, b)]
        paired = statistics.median(ratios)
        slower = slower or paired > 1.10
        print(f"| {size} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | "
              f"{statistics.median(g):.1f} | {paired:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    ceilings = [x["roofline"]["dualwrite_busbw_gbps"] for x in rounds if x["roofline"]]
    if ceilings:
        print(f"\ndual-write ceiling: median {statistics.median(ceilings):.2f} GB/s busbw; "
              f"placements: {', '.join(x['roofline']['placement'] for x in rounds if x['roofline'])}")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
