"""A torch collective on collie allocates nothing on its way but its Work (issue 49).

torch's own layers (its Python wrapper, the dispatcher's boxing, the Work's Python
object) allocate on every call, whatever the backend. This test counts the heap
allocations of a steady-state call on two ranks, every thread of the process counted
(tests/python/malloc_count_preload.c, preloaded), on a collie group and on torch's fake
backend, which does nothing and returns one Work: collie's count must not exceed the fake
backend's. Ops: all_reduce (blocking and async), broadcast, all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single, 8 KiB (finished on the calling thread) and
256 KiB. torch's flight recorder is off (TORCH_FR_BUFFER_SIZE=0): with it, each
backend pays torch's own recording, which differs with what the backend reports.
Each case's result is checked against its exact value. Exits 0 when all hold."""

import ctypes
import os
import socket
import subprocess
import sys
import tempfile

WARMUP, CALLS = 300, 400
# A steady-state call allocates a whole number of times; a stray allocation (a Python
# object's arena, a queue's block) can add a fraction.
SLACK = 0.25


def measure(backend, rank, size):
    import torch
    import torch.distributed as dist

    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    else:
        import torch_collie  # noqa: F401  (registers "collie")

        dist.init_process_group("collie", rank=rank, world_size=size)
    libc = ctypes.CDLL(None)
    counts, errors = {}, []
    for nbytes in (8 << 10, 256 << 10):
        n = nbytes // 4
        x = torch.ones(n)
        out = torch.empty(n * size)
        big = torch.ones(n * size)
        part = torch.empty(n)
        ops = {
            "all_reduce": lambda: dist.all_reduce(x),
            "all_reduce async": lambda: dist.all_reduce(x, async_op=True).wait(),
            "broadcast": lambda: dist.broadcast(x, 0),
            "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(out, x),
            "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(part, big),
            "all_to_all_single": lambda: dist.all_to_all_single(out, big),
        }
        for name, call in ops.items():
            for _ in range(WARMUP):
                call()
            dist.barrier()
            libc.collie_malloc_count_enable(1)
            before = libc.collie_malloc_count()
            for _ in range(CALLS):
                call()
            after = libc.collie_malloc_count()
            libc.collie_malloc_count_enable(0)
            counts[f"{name} {nbytes >> 10} KiB"] = (after - before) / CALLS
        if backend == "collie":
            # The calls did their work: exact values after the loops above.
            y = torch.full((n,), float(rank + 1))
            dist.all_reduce(y)
            if not torch.equal(y, torch.full((n,), float(size * (size + 1) // 2))):
                errors.append(f"rank {rank}: all_reduce of {nbytes} bytes gave a wrong sum")
            dist.all_gather_into_tensor(out, torch.full((n,), float(rank)))
            want = torch.arange(size, dtype=torch.float32).repeat_interleave(n)
            if not torch.equal(out, want):
                errors.append(f"rank {rank}: all_gather_into_tensor of {nbytes} bytes is wrong")
    dist.destroy_process_group()
    return counts, errors


def rank_main(rank, size):
    fake, _ = measure("fake", rank, size)
    collie, errors = measure("collie", rank, size)
    failures = list(errors)
    for case, base in fake.items():
        got = collie[case]
        print(f"rank {rank}: {case}: {got:.2f} allocations a call on collie, "
              f"{base:.2f} on torch's fake backend", flush=True)
        if base < 1:
            failures.append(f"rank {rank}: {case}: the counter saw {base} allocations a call "
                            "on the fake backend; is the preload active?")
        if got > base + SLACK:
            failures.append(f"rank {rank}: {case}: collie allocates {got - base:.2f} more "
                            "times a call than torch's fake backend")
    for f in failures:
        print("FAIL:", f, flush=True)
    return 1 if failures else 0


def main():
    if len(sys.argv) == 3:
        return rank_main(int(sys.argv[1]), int(sys.argv[2]))
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "malloc_count.so")
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", lib,
                        os.path.join(here, "malloc_count_preload.c")], check=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, LD_PRELOAD=lib, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   TORCH_FR_BUFFER_SIZE="0", OMP_NUM_THREADS="1")
        size = 2
        procs = [subprocess.Popen([sys.executable, __file__, str(r), str(size)], env=env)
                 for r in range(size)]
        codes = [p.wait(timeout=240) for p in procs]
    if any(codes):
        print("FAIL: torch_call_allocations_test (rank exit codes %s)" % codes)
        return 1
    print("torch_call_allocations_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
