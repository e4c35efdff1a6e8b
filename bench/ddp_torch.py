"""DDP training step on CPU: the collie backend vs gloo, side by side.

    PYTHONPATH=build/python/lib ~/.cache/collie/venv/bin/python bench/ddp_torch.py

Two ranks (torch.multiprocessing spawn, file:// rendezvous), one process group per
run, the same ~25M-parameter MLP, data, batch and DDP settings for every backend.
A step is forward + backward (DDP all-reduces the gradient buckets, overlapped with
backward) + SGD. Prints the median step time per backend over --steps steps after
--warmup steps, and the ratio. Each backend runs --rounds times, interleaved, so a
change in machine load hits both; the median over all its steps is reported.
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def mlp(width):
    # width 2048: 2048*4096 + 4096*2048 + 2*2048*2048 + biases = ~25.2M parameters
    return nn.Sequential(
        nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))


def worker(rank, args, name, init_file, out_file):
    # "none": the same step under DDP's no_sync() on gloo: the compute-only floor.
    backend = "gloo" if name == "none" else name
    if backend == "collie":
        import torch_collie  # noqa: F401
    torch.set_num_threads(args.threads)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank,
                            world_size=args.world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mlp(args.width),
                                                bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width)
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        with model.no_sync() if name == "none" else contextlib.nullcontext():
            loss = model(x).square().mean()
            opt.zero_grad(set_to_none=False)
            loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
    # Slowest rank's time per step.
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        with open(out_file, "w") as f:
            f.write(" ".join(f"{v:.6f}" for v in t.tolist()))
    dist.destroy_process_group()


def run(args, backend):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times")
        mp.spawn(worker, args=(args, backend, os.path.join(tmp, "init"), out),
                 nprocs=args.world)
        return [float(v) for v in open(out).read().split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="collie,gloo,none",
                   help="'none' = compute only (DDP no_sync), the floor")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    args = p.parse_args()
    params = sum(q.numel() for q in mlp(args.width).parameters())
    print(f"# DDP step, {args.world} ranks, MLP {params / 1e6:.1f}M params "
          f"({params * 4 / 2**20:.0f} MB of gradients), batch {args.batch}, "
          f"bucket {args.bucket_mb} MB, {args.threads} thread(s)/rank, torch {torch.__version__}")
    print(f"# load before: {os.getloadavg()[0]:.2f} (1-min average, {os.cpu_count()} CPUs)")
    backends = args.backends.split(",")
    times = {b: [] for b in backends}
    for _ in range(args.rounds):
        for b in backends:
            times[b] += run(args, b)
    med = {b: statistics.median(v) for b, v in times.items()}
    for b in backends:
        print(f"{b:8s} median step {med[b] * 1e3:8.1f} ms  (min {min(times[b]) * 1e3:.1f}, "
              f"max {max(times[b]) * 1e3:.1f}, {len(times[b])} steps)")
    if "none" in med:
        for b in backends:
            if b != "none":
                print(f"{b:8s} communication cost over compute-only: "
                      f"{(med[b] - med['none']) * 1e3:8.1f} ms")
    if "collie" in med and "gloo" in med:
        print(f"collie / gloo = {med['collie'] / med['gloo']:.2f}")
    print(f"# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
