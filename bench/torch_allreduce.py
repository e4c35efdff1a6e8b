#!/usr/bin/env python3
"""torch.distributed all-reduce timing, one process per rank with RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT set: PyTorch's gloo backend for bench/compare.py, or
collie's (TORCH_BACKEND=collie, torch_collie on PYTHONPATH) for A/B runs of the
PyTorch backend itself.

Usage: torch_allreduce.py MIN MAX FACTOR ITERS WARMUP
Output (rank 0): "size_bytes in_place_us" per size: the slowest rank's average per call.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    lo, hi, factor, iters, warmup = (int(a) for a in sys.argv[1:6])
    backend = os.environ.get("TORCH_BACKEND", "gloo")
    if backend == "collie":
        import torch_collie  # noqa: F401  (registers the backend)
    dist.init_process_group(backend)
    rank = dist.get_rank()
    size = lo
    while size <= hi:
        data = torch.ones(max(size // 4, 1), dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(data)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
        mine = torch.tensor([(time.perf_counter() - start) / iters * 1e6], dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"{size} {mine.item():.3f}", flush=True)
        size *= factor
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
