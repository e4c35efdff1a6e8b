#!/usr/bin/env python3
"""How long a torch isend that its caller does not wait for at once takes to arrive.

Usage: PYTHONPATH=build/python/lib python bench/torch_overlapped_send.py
           [--every 4] [--compute-us 2000] [--rounds 2000]

Two ranks on the collie backend run a blocking ping-pong of one float64 tensor; every
--every-th round rank 0 sends with dist.isend instead, spins for --compute-us (a pipeline
stage computing while its activations go out), then waits. The tensor carries its send
time (time.monotonic, one clock for the processes of a host) and rank 1 prints how long
those sends took to arrive, after the first tenth of the rounds: what a send nobody waits
for at once costs the rank that receives it. Set PYTHONPATH to the torch_collie to
measure (one build's extension against another's).
"""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_collie  # noqa: F401  registers "collie"


def worker(rank, init_file, args, result):
    dist.init_process_group("collie", init_method="file://" + init_file, rank=rank,
                            world_size=2)
    t = torch.zeros(1, dtype=torch.float64)
    delays = []
    for i in range(args.rounds):
        overlapped = (i + 1) % args.every == 0
        if rank == 0:
            t[0] = time.monotonic()
            if overlapped:
                work = dist.isend(t, 1)
                end = time.monotonic() + args.compute_us / 1e6
                while time.monotonic() < end:
                    pass
                work.wait()
            else:
                dist.send(t, 1)
            dist.recv(t, 1)
        else:
            dist.recv(t, 0)
            if overlapped and i >= args.rounds // 10:
                delays.append((time.monotonic() - t[0].item()) * 1e6)
            dist.send(t, 0)
    if rank == 1:
        delays.sort()
        result["line"] = (
            f"every {args.every}, {args.compute_us} us of compute: the isend arrived after "
            f"median {delays[len(delays) // 2]:.1f} us, p90 {delays[int(len(delays) * 0.9)]:.1f}"
            f", max {delays[-1]:.1f} ({len(delays)} sends)")
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--compute-us", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    if args.every < 1 or args.rounds < 10 * args.every:
        parser.error("--every must be at least 1 and --rounds at least 10 times it")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        manager = mp.Manager()
        result = manager.dict()
        mp.spawn(worker, args=(os.path.join(tmp, "init"), args, result), nprocs=2)
        print(result["line"])


if __name__ == "__main__":
    main()
