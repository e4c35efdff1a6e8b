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


# name: (process group backend, DDP gradient_as_bucket_view forced on, shared allocator)
VARIANTS = {
    "collie": ("collie", False, False),
    "gloo": ("gloo", False, False),
    # The same step under DDP's no_sync() on gloo: the compute-only floor.
    "none": ("gloo", False, False),
    # collie with torch_collie.shared_allreduce_hook (DDP), or on a
    # torch_collie.empty_shared tensor (--allreduce).
    "collie-shm": ("collie", False, False),
    # collie with torch_collie.use_shared_cpu_allocator() for the whole run and
    # gradient_as_bucket_view=True: DDP's buckets are pool memory, reduced zero-copy.
    "collie-alloc": ("collie", True, True),
    "gloo-view": ("gloo", True, False),
    # The shared allocator is also a caching allocator for the step's large temporaries
    # (autograd's 32 MB gradients, ...): these two separate that from communication.
    "gloo-alloc": ("gloo", True, True),
    "none-alloc": ("gloo", True, True),  # the floor with the shared allocator
}


def worker(rank, args, name, init_file, out_file):
    backend, view, alloc = VARIANTS[name]
    if backend == "collie" or alloc:
        import torch_collie
    if alloc:
        torch_collie.use_shared_cpu_allocator(min_bytes=1 << 20)
    torch.set_num_threads(args.threads)
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank,
                            world_size=args.world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mlp(args.width),
                                                bucket_cap_mb=args.bucket_mb,
                                                gradient_as_bucket_view=args.bucket_view or view)
    if name == "collie-shm":
        model.register_comm_hook(torch_collie.SharedBuckets(), torch_collie.shared_allreduce_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.width)
    # --allreduce: no model step, one all-reduce of a tensor as large as all gradients.
    flat = None
    if args.allreduce:
        n = sum(q.numel() for q in model.parameters())
        flat = torch_collie.empty_shared(n) if name == "collie-shm" else torch.empty(n)
        flat.fill_(1)
    times, cpus = [], []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        cpu_start = time.process_time()
        if flat is not None:
            if not name.startswith("none"):
                dist.all_reduce(flat)
        else:
            with model.no_sync() if name.startswith("none") else contextlib.nullcontext():
                loss = model(x).square().mean()
                opt.zero_grad(set_to_none=False)
                loss.backward()
            opt.step()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        if step >= args.warmup:
            times.append(elapsed)
            cpus.append(cpu)
    # Slowest rank's time per step; CPU time (all threads of a rank) averaged over ranks.
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    c = torch.tensor(cpus, dtype=torch.float64)
    dist.all_reduce(c)
    if rank == 0 and alloc and backend == "collie":
        stats = torch_collie.shared_allocator_stats()
        print(f"# {name}: {stats['registered_allreduces']} all-reduces on registered pool "
              f"memory; pool {stats['bytes_in_use'] / 2**20:.0f} MB in use, "
              f"{stats['bytes_cached'] / 2**20:.0f} MB cached, {stats['misses']} blocks made, "
              f"{stats['hits']} reuses", flush=True)
    if rank == 0:
        with open(out_file, "w") as f:
            f.write(" ".join(f"{v:.6f}" for v in t.tolist()) + "\n")
            f.write(" ".join(f"{v / args.world:.6f}" for v in c.tolist()))
    dist.destroy_process_group()
    # Skip interpreter finalization: a gloo worker thread may still be dropping its last
    # work (and its tensors' Python objects) then, which aborts the process ("terminate
    # called without an active exception" from a GIL take during Py_Finalize).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(args, backend):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times")
        mp.spawn(worker, args=(args, backend, os.path.join(tmp, "init"), out),
                 nprocs=args.world)
        wall, cpu = open(out).read().split("\n")
        return [float(v) for v in wall.split()], [float(v) for v in cpu.split()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="collie-alloc,collie,gloo,gloo-view,none",
                   help="comma-separated: " + ", ".join(VARIANTS) + ". 'none' = compute "
                   "only (DDP no_sync), the floor; 'collie-shm' = collie with "
                   "torch_collie.shared_allreduce_hook (with --allreduce: on a "
                   "torch_collie.empty_shared tensor, zero-copy); 'collie-alloc' = collie "
                   "with torch_collie.use_shared_cpu_allocator and "
                   "gradient_as_bucket_view=True; 'gloo-view' = gloo with "
                   "gradient_as_bucket_view=True; 'gloo-alloc'/'none-alloc' = gloo / the floor "
                   "with the shared allocator and bucket views (the allocator also caches "
                   "the step's large temporaries)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--bucket-view", action="store_true",
                   help="DDP gradient_as_bucket_view=True (no gradient<->bucket copies)")
    p.add_argument("--allreduce", action="store_true",
                   help="time only dist.all_reduce of one tensor of all parameters' size")
    args = p.parse_args()
    params = sum(q.numel() for q in mlp(args.width).parameters())
    print(f"# DDP step, {args.world} ranks, MLP {params / 1e6:.1f}M params "
          f"({params * 4 / 2**20:.0f} MB of gradients), batch {args.batch}, "
          f"bucket {args.bucket_mb} MB{', bucket views' if args.bucket_view else ''}, "
          f"{args.threads} thread(s)/rank, {'all-reduce only, ' if args.allreduce else ''}"
          f"torch {torch.__version__}")
    print(f"# load before: {os.getloadavg()[0]:.2f} (1-min average, {os.cpu_count()} CPUs)")
    backends = args.backends.split(",")
    for b in backends:
        if b not in VARIANTS:
            p.error(f"unknown variant {b}; choose from {', '.join(VARIANTS)}")
    times = {b: [] for b in backends}
    cpus = {b: [] for b in backends}
    for _ in range(args.rounds):
        for b in backends:
            wall, cpu = run(args, b)
            times[b] += wall
            cpus[b] += cpu
    med = {b: statistics.median(v) for b, v in times.items()}
    cpu = {b: statistics.median(v) for b, v in cpus.items()}
    for b in backends:
        print(f"{b:11s} median step {med[b] * 1e3:8.1f} ms  (min {min(times[b]) * 1e3:.1f}, "
              f"max {max(times[b]) * 1e3:.1f}, {len(times[b])} steps)  "
              f"CPU/rank {statistics.median(cpus[b]) * 1e3:.1f} ms")
    for b in backends:
        floor = "none-alloc" if VARIANTS[b][2] else "none"
        if not b.startswith("none") and floor in med:
            print(f"{b:12s} communication cost over {floor}: wall "
                  f"{(med[b] - med[floor]) * 1e3:6.1f} ms, CPU/rank "
                  f"{(cpu[b] - cpu[floor]) * 1e3:6.1f} ms")
    if "gloo" in med:
        for b in backends:
            if b != "gloo" and not b.startswith("none"):
                print(f"{b} / gloo = {med[b] / med['gloo']:.2f} wall, "
                      f"{cpu[b] / cpu['gloo']:.2f} CPU")
    print(f"# load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
