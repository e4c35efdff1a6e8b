#!/usr/bin/env python3
"""torch.distributed collectives on CPU: collie against gloo, DeepSpeed's shared-memory
all-reduce and collie's own engine (`collie perf`), in one run, interleaved.

Usage (from the repository root, after scripts/build.sh):
  venv=$(scripts/python-env.sh)
  $venv/bin/python bench/torch_ops_bench.py [--rounds 5] [--sizes 8K,64K,1M,16M,64M]
      [--ops all_reduce:float32,all_reduce:bfloat16,all_to_all_single:float32,
             reduce_scatter_tensor:float32,send_recv:float32]
      [--backends collie,gloo,deepspeed] [--json FILE]

Two ranks on this host, one thread each (OMP_NUM_THREADS=1). A round runs, in an order
that alternates from round to round: each torch backend in a pair of fresh processes
(every op and size, blocking calls: `dist.all_reduce(t)`, `dist.all_to_all_single(out,
inp)` without splits, `dist.reduce_scatter_tensor(out, inp)`; in place where torch
allows; `send_recv` is a ping-pong, rank 0 `dist.send(t, 1)` then `dist.recv(t, 1)` and
rank 1 the other way round, a cell one round trip), `collie perf` for the same
collective, size and dtype (`collie run -n 2`; for send_recv collie's own tagged
ping-pong, bench/p2p_pingpong.cc, twice its one-way time), and
the per-call floor: the same torch call on a one-rank collie group (the Python wrapper,
the dispatcher, torch's flight recorder, the Work and its wait; no peer), split three
ways by two more one-rank columns up to --floor-max: "floor-nofr" is that floor with
torch's flight recorder off (TORCH_FR_BUFFER_SIZE=0; torch attaches its recorder hook to
every backend that does not record itself, collie among them, and not to gloo, which
records natively), and "fake" is the call on torch's own fake backend, which does no
work at all: torch's layers alone. So floor - floor-nofr is torch's recorder hook,
floor-nofr - fake is collie's part of a call, and fake is what no backend can remove
(send_recv has no one-rank floor).
"collie-direct" is `torch_collie.all_reduce_(t)` (all_reduce only): collie's all-reduce
issued and waited for on the calling thread, without torch's per-call layers.
"collie-nofr" and "gloo-nofr" are collie and gloo with torch's flight recorder off
(TORCH_FR_BUFFER_SIZE=0), what a user who turns it off gets.
"deepspeed" is `deepspeed.comm.inference_all_reduce` (all_reduce only) on DeepSpeed's CPU
accelerator, its shm op built on first use; it is skipped, saying why, when deepspeed
cannot be imported (`pip install deepspeed` into the venv). A cell is the slowest rank's
mean time per call (us); the table gives the median over rounds and, for collie, the
ratio to each other column taken within each round (median).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
COLLIE_PERF_NAMES = {"all_reduce": "allreduce", "all_to_all_single": "alltoall",
                     "reduce_scatter_tensor": "reducescatter"}  # send_recv: p2p_pingpong
PERF_DTYPES = {"float32": "float", "bfloat16": "bfloat16", "float16": "half"}


def parse_bytes(text):
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if text[-1:] in "KMG" else text) * scale


def iterations(size):
    """Calls timed per cell: about 0.1-0.5 s of work at the sizes measured here."""
    if size <= 64 << 10:
        return 1000
    if size <= 1 << 20:
        return 200
    if size <= 16 << 20:
        return 20
    return 8


def warmup_calls(op, iters):
    """Untimed calls before a torch cell: as many of the same size as `collie perf` makes
    before the pass this cell is compared with. perf times out of place first (after
    its warm-up) and then in place (after another), so its in-place time, the one an
    all_reduce is compared with, comes after 2 warm-ups and a timed pass. The count
    matters on a VM like this one: a loop of 1 MiB calls (a local torch.add alike) gets
    about 2x faster over its first few hundred calls, and slow again after a second idle.
    """
    warm = max(iters // 10, 2)
    return 2 * warm + iters if op == "all_reduce" else warm


# ---------------------------------------------------------------- worker (one rank)

def ping_pong(t, dist, rank):
    """One round trip between ranks 0 and 1 (the torch cells run on two ranks)."""
    if rank == 0:
        dist.send(t, 1)
        dist.recv(t, 1)
    else:
        dist.recv(t, 0)
        dist.send(t, 0)


def worker(args):
    import torch
    import torch.distributed as dist

    backend = args.worker
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ds = None
    if backend == "deepspeed":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        os.environ.setdefault("LOCAL_SIZE", str(world))
        os.environ.setdefault("LOCAL_RANK", str(rank))
        import deepspeed
        import deepspeed.comm as ds
        deepspeed.init_distributed(dist_backend="gloo")
    elif backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    else:
        if backend.startswith("collie"):
            import torch_collie
        dist.init_process_group(backend.split("-")[0])
    results = []
    for spec in args.ops.split(","):
        op, dtype_name = spec.split(":")
        if backend in ("deepspeed", "collie-direct") and op != "all_reduce":
            continue
        dtype = getattr(torch, dtype_name)
        for size in (parse_bytes(s) for s in args.sizes.split(",")):
            n = max(size // torch.tensor([], dtype=dtype).element_size(), world)
            n -= n % world
            x = torch.ones(n, dtype=dtype)
            y = torch.empty(n, dtype=dtype)
            part = torch.empty(n // world, dtype=dtype)
            if op == "all_reduce" and backend == "deepspeed":
                call = lambda: ds.inference_all_reduce(x)  # noqa: E731
            elif op == "all_reduce" and backend == "collie-direct":
                call = lambda: torch_collie.all_reduce_(x)  # noqa: E731
            elif op == "all_reduce":
                call = lambda: dist.all_reduce(x)  # noqa: E731
            elif op == "all_to_all_single":
                call = lambda: dist.all_to_all_single(y, x)  # noqa: E731
            elif op == "reduce_scatter_tensor":
                call = lambda: dist.reduce_scatter_tensor(part, x)  # noqa: E731
            elif op == "send_recv":
                if world == 1:
                    continue  # no peer: no floor
                call = lambda: ping_pong(x, dist, rank)  # noqa: E731
            else:
                sys.exit(f"unknown op {op}")
            iters = iterations(size)
            for _ in range(warmup_calls(op, iters)):
                call()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                call()
            mine = torch.tensor([(time.perf_counter() - start) / iters * 1e6], dtype=torch.float64)
            if world > 1:
                dist.all_reduce(mine, op=dist.ReduceOp.MAX)
            row = {"op": op, "dtype": dtype_name, "size": size, "us": mine.item()}
            if ds is not None:
                # DeepSpeed's shm kernel takes float32 from AVX2 up, bf16/fp16 from
                # AVX-512BW up; below that inference_all_reduce is torch's all_reduce.
                import deepspeed.comm.comm as ds_state  # its cdb is set by init
                level = getattr(ds_state.cdb, "shm_vector_kernel_level", 0)
                row["path"] = ("shm op" if level >= (1 if dtype == torch.float32 else 2)
                               else "torch all_reduce on gloo (no shm kernel for it here)")
            results.append(row)
    if rank == 0:
        print(json.dumps(results), flush=True)
    dist.destroy_process_group()


# ---------------------------------------------------------------- driver

def launch(args, backend, world, port, extra_env=None):
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", LOCAL_RANK=str(rank),
                   LOCAL_SIZE=str(world), **(extra_env or {}))
        env["PYTHONPATH"] = os.path.join(args.build, "python", "lib") + (
            ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", backend, "--ops", args.ops,
             "--sizes", args.sizes], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    outs = [p.communicate(timeout=1800) for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"{backend} worker failed:\n" + "\n".join(o[1][-3000:] for o in outs))
    return json.loads(outs[0][0].strip().splitlines()[-1])


def collie_perf(args, op, dtype, size):
    collie = os.path.join(args.build, "bin", "collie")
    if op == "send_recv":
        # collie's tagged ping-pong (torch's sends are tagged): a round trip is two ways.
        out = subprocess.run(
            [collie, "run", "-n", "2", "--", os.path.join(args.build, "bench",
                                                           "collie_p2p_pingpong"),
             "--bytes", str(size), "--iters", str(iterations(size)), "--warmup",
             str(max(iterations(size) // 10, 2)), "--tag", "0"],
            check=True, capture_output=True, text=True, timeout=900,
            env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
        return 2 * float(out.split("one way median ")[1].split()[0])
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [collie, "run", "-n", "2", "--", collie, "perf", COLLIE_PERF_NAMES[op], "-b",
               str(size), "-e", str(size), "-d", PERF_DTYPES[dtype], "-n",
               str(iterations(size)), "-w", str(max(iterations(size) // 10, 2)), "-c", "0",
               "--json", out.name]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=900,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
        with open(out.name) as f:
            result = json.load(f)["results"][0]
    # The mean per call, as the torch cells; in place where torch's call is (all_reduce).
    timing = result["in_place"] if op == "all_reduce" else result["out_of_place"]
    return float(timing["time_us"])


def deepspeed_missing():
    probe = subprocess.run([sys.executable, "-c", "import deepspeed"], capture_output=True,
                           text=True, env=dict(os.environ, DS_ACCELERATOR="cpu"))
    return None if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="8K,64K,1M,16M,64M")
    parser.add_argument("--ops", default="all_reduce:float32,all_reduce:bfloat16,"
                        "all_to_all_single:float32,reduce_scatter_tensor:float32")
    parser.add_argument("--backends", default="collie,collie-direct,gloo,deepspeed")
    parser.add_argument("--floor-max", type=parse_bytes, default=64 << 10,
                        help="largest size of the one-rank floor")
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--json", help="also write every cell of every round here")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    backends = args.backends.split(",")
    known = {"collie", "collie-direct", "collie-nofr", "gloo", "gloo-nofr", "deepspeed"}
    if set(backends) - known or len(set(backends)) != len(backends) or "collie" not in backends:
        parser.error(f"--backends: distinct names of {sorted(known)}, collie among them (perf and "
                     f"the one-rank floor are always measured); got {args.backends}")
    if "deepspeed" in backends and (why := deepspeed_missing()):
        print(f"deepspeed: skipped ({why})", file=sys.stderr)
        backends.remove("deepspeed")
    floors = ["floor", "floor-nofr", "fake"]
    columns = backends + ["perf"] + floors
    cells = {}  # (op, dtype, size, column) -> [us per round]
    paths = {}  # (op, dtype, column) -> what a backend ran, where it says
    port = 29600 + os.getpid() % 300
    floor_args = argparse.Namespace(**vars(args))
    floor_args.sizes = ",".join(s for s in args.sizes.split(",")
                                if parse_bytes(s) <= args.floor_max)
    for r in range(args.rounds):
        order = columns if r % 2 == 0 else columns[::-1]
        for column in order:
            port += 1
            if column == "perf":
                for spec in args.ops.split(","):
                    op, dtype = spec.split(":")
                    for size in (parse_bytes(s) for s in args.sizes.split(",")):
                        cells.setdefault((op, dtype, size, column), []).append(
                            collie_perf(args, op, dtype, size))
                continue
            if column in floors:
                if not floor_args.sizes:
                    continue
                rows = launch(floor_args, "fake" if column == "fake" else "collie", 1, port,
                              {"TORCH_FR_BUFFER_SIZE": "0"} if column == "floor-nofr" else None)
            elif column.endswith("-nofr"):
                rows = launch(args, column.removesuffix("-nofr"), 2, port,
                              {"TORCH_FR_BUFFER_SIZE": "0"})
            else:
                rows = launch(args, column, 2, port)
            for row in rows:
                if "path" in row:
                    paths[(row["op"], row["dtype"], column)] = row["path"]
                cells.setdefault((row["op"], row["dtype"], row["size"], column), []).append(
                    row["us"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"op": k[0], "dtype": k[1], "size": k[2], "column": k[3], "us": v}
                       for k, v in cells.items()], f, indent=1)
    # The floor's parts are read against each other, not against collie.
    others = [c for c in columns if c not in ("collie", "floor-nofr", "fake")]
    # With the recorder off, against perf too: what torch's path costs without it.
    extra = [("collie-nofr", "perf")] if "collie-nofr" in columns else []
    head = (["op", "dtype", "size"] + [f"{c} us" for c in columns] +
            [f"collie/{c}" for c in others] + [f"{a}/{b}" for a, b in extra])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for spec in args.ops.split(","):
        op, dtype = spec.split(":")
        for size in (parse_bytes(s) for s in args.sizes.split(",")):
            row = [op, dtype, f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"]
            for c in columns:
                v = cells.get((op, dtype, size, c))
                row.append(f"{statistics.median(v):,.1f}" if v else "")
            for a_col, b_col in [("collie", c) for c in others] + extra:
                mine = cells.get((op, dtype, size, a_col), [])
                theirs = cells.get((op, dtype, size, b_col), [])
                pairs = [a / b for a, b in zip(mine, theirs) if b > 0]
                row.append(f"{statistics.median(pairs):.2f}" if len(pairs) == len(mine) and pairs
                           else "")
            print("| " + " | ".join(row) + " |")
    for (op, dtype, column), path in sorted(paths.items()):
        print(f"{column} {op} {dtype}: {path}")


if __name__ == "__main__":
    main()
