#!/usr/bin/env python3
"""PyTorch's real clients on CPU: collie against gloo in one run, interleaved.

Usage (from the repository root, after scripts/build.sh):
  venv=$(scripts/python-env.sh)
  $venv/bin/python bench/torch_clients_bench.py [--rounds 3] [--only fsdp,tp,moe]
      [--json FILE] [--svg FILE]

Two ranks on this host (one thread each), fresh processes for every cell; every round
runs each workload on each backend in an order that alternates from round to round.

- fsdp: FSDP2 (`fully_shard` per block and on the root) training step of a decoder-only
  transformer (--fsdp-layers blocks of width --fsdp-width: ~100 M parameters by default),
  float32, AdamW, a batch of --fsdp-tokens tokens per rank. Its exposed communication is
  the step time minus the same step on torch's fake process group (every collective
  returns at once, nothing moves: the compute, sharding and optimiser alone).
  --fsdp-columns picks the backends (default collie,gloo,fake); a name ending in
  "-alloc" (collie-alloc, gloo-alloc, fake-alloc) runs with collie's shared CPU
  allocator installed for the whole process, and its exposed communication is taken
  over fake-alloc, the floor with the same allocator.
- tp: a stack of tensor-parallel bfloat16 MLP blocks (ColwiseParallel up, RowwiseParallel
  down: one all-reduce per block), inference (no_grad) at hidden 2048 and 4096 and 1 and
  8 tokens; the same stack unsharded in one process is the 1-rank column.
- moe: an MoE layer's token exchange: top-1 routing of --moe-tokens tokens of hidden
  --moe-hidden (bfloat16) to 2 experts per rank, `all_to_all_single` with uneven splits
  to dispatch, the same back to combine (the split sizes exchanged first, as MoE code
  does); time per dispatch + combine.

Each cell is the slowest rank's median time per step (ms); the table gives the median
over rounds and collie/gloo paired within each round.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ---------------------------------------------------------------- workloads (one rank)

def init(backend, rank, world):
    import torch.distributed as dist
    if backend.endswith("-alloc"):
        # collie's shared CPU allocator for the whole process (a caching pool of shared
        # memory: large tensors reuse resident pages instead of faulting in new ones).
        import torch_collie
        torch_collie.use_shared_cpu_allocator()
        backend = backend[:-len("-alloc")]
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
        return
    if backend == "collie":
        import torch_collie  # noqa: F401
    dist.init_process_group(backend)


def slowest_median(times):
    """The slowest rank's median over the timed steps (ms)."""
    import torch
    import torch.distributed as dist
    mine = torch.tensor([statistics.median(times) * 1e3], dtype=torch.float64)
    if dist.get_backend() != "fake":
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return mine.item()


def run_fsdp(args, backend, rank, world):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    init(backend, rank, world)
    torch.manual_seed(0)
    width, heads = args.fsdp_width, max(args.fsdp_width // 64, 1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
            self.norm2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.attn(h, h, h, need_weights=False, is_causal=False)[0]
            return x + self.mlp(self.norm2(x))

    model = nn.Sequential(nn.Embedding(args.fsdp_vocab, width),
                          *[Block() for _ in range(args.fsdp_layers)],
                          nn.LayerNorm(width), nn.Linear(width, args.fsdp_vocab))
    params = sum(p.numel() for p in model.parameters())
    for block in model[1:1 + args.fsdp_layers]:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, args.fsdp_vocab, (1, args.fsdp_tokens))
    times = []
    for step in range(args.warmup + args.steps):
        if not backend.startswith("fake"):
            dist.barrier()
        start = time.perf_counter()
        loss = model(tokens).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    ms = slowest_median(times)
    return [{"workload": "fsdp", "case": f"{params / 1e6:.0f}M params, {args.fsdp_tokens} tokens",
             "ms": ms}]


def tp_stack(hidden, blocks):
    import torch.nn as nn
    layers = []
    for _ in range(blocks):
        layers += [nn.Linear(hidden, 4 * hidden, bias=False), nn.GELU(),
                   nn.Linear(4 * hidden, hidden, bias=False)]
    return nn.Sequential(*layers)


def time_forward(model, x, iters, warmup, sync=None):
    import torch
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        times = []
        for _ in range(iters):
            if sync:
                sync()
            start = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - start)
    return times


def run_tp(args, backend, rank, world):
    import torch
    import torch.distributed as dist

    rows = []
    cases = [(h, t) for h in args.tp_hidden for t in args.tp_tokens]
    if backend == "one-rank":
        torch.manual_seed(0)
        for hidden, tokens in cases:
            model = tp_stack(hidden, args.tp_blocks).to(torch.bfloat16)
            x = torch.randn(tokens, hidden, dtype=torch.bfloat16)
            times = time_forward(model, x, args.tp_iters, args.tp_iters // 5)
            rows.append({"workload": "tp", "case": f"hidden {hidden}, {tokens} tokens",
                         "ms": statistics.median(times) * 1e3})
        return rows
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    init(backend, rank, world)
    mesh = init_device_mesh("cpu", (world,))
    for hidden, tokens in cases:
        torch.manual_seed(0)
        model = tp_stack(hidden, args.tp_blocks).to(torch.bfloat16)
        plan = {}
        for b in range(args.tp_blocks):
            plan[str(3 * b)] = ColwiseParallel()
            plan[str(3 * b + 2)] = RowwiseParallel()
        parallelize_module(model, mesh, plan)
        x = torch.randn(tokens, hidden, dtype=torch.bfloat16)
        times = time_forward(model, x, args.tp_iters, args.tp_iters // 5, sync=dist.barrier)
        rows.append({"workload": "tp", "case": f"hidden {hidden}, {tokens} tokens",
                     "ms": slowest_median(times)})
    return rows


def run_moe(args, backend, rank, world):
    import torch
    import torch.distributed as dist

    init(backend, rank, world)
    experts = 2 * world
    gen = torch.Generator().manual_seed(rank)
    rows = []
    for tokens in args.moe_tokens:
        x = torch.randn(tokens, args.moe_hidden, dtype=torch.bfloat16)
        times = []
        for step in range(args.warmup + args.moe_iters):
            # Top-1 routing: a random expert per token, tokens sorted by destination rank.
            expert = torch.randint(0, experts, (tokens,), generator=gen)
            order = torch.argsort(expert, stable=True)
            send_counts = torch.bincount(expert // 2, minlength=world)
            dist.barrier()
            start = time.perf_counter()
            recv_counts = torch.empty_like(send_counts)
            dist.all_to_all_single(recv_counts, send_counts)
            send_splits, recv_splits = send_counts.tolist(), recv_counts.tolist()
            routed = x[order]
            received = routed.new_empty((sum(recv_splits), args.moe_hidden))
            dist.all_to_all_single(received, routed, recv_splits, send_splits)
            processed = received * 2  # the experts' work, kept trivial
            back = routed.new_empty(routed.shape)
            dist.all_to_all_single(back, processed, send_splits, recv_splits)
            if step >= args.warmup:
                times.append(time.perf_counter() - start)
            expect = x[order] * 2
            if not torch.equal(back, expect):
                raise SystemExit(f"moe: rank {rank} got wrong tokens back")
        rows.append({"workload": "moe", "case": f"{tokens} tokens x {args.moe_hidden} bf16",
                     "ms": slowest_median(times)})
    return rows


def worker(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    import torch
    torch.set_num_threads(1)
    run = {"fsdp": run_fsdp, "tp": run_tp, "moe": run_moe}[args.workload]
    rows = run(args, args.worker, rank, world)
    if rank == 0:
        print(json.dumps(rows), flush=True)
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------- driver

def launch(args, workload, backend, port):
    world = 1 if backend == "one-rank" else 2
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", LOCAL_RANK=str(rank))
        env["PYTHONPATH"] = os.path.join(args.build, "python", "lib") + (
            ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [sys.executable, os.path.abspath(__file__), "--worker", backend, "--workload",
                workload] + args.passthrough
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=3600) for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"{workload} on {backend} failed:\n" + "\n".join(o[1][-3000:] for o in outs))
    return json.loads(outs[0][0].strip().splitlines()[-1])


def plot_svg(table, out):
    """Horizontal bars: per case, each column's median ms (scaled per case)."""
    colors = {"collie": "#1b9e77", "collie-alloc": "#66a61e", "gloo": "#d95f02",
              "gloo-alloc": "#e6ab02", "fake": "#7570b3", "fake-alloc": "#a6a6d9",
              "one-rank": "#7570b3"}
    bar, gap, label_w, plot_w = 14, 10, 330, 420
    y, parts = 30, []
    for (workload, case), cols in table:
        top = max(v for v in cols.values() if v) or 1
        parts.append(f'<text x="4" y="{y + bar}" font-size="12">{workload}: {case}</text>')
        for name, v in cols.items():
            if not v:
                continue
            w = max(plot_w * v / top, 1)
            parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar - 2}" '
                         f'fill="{colors.get(name, "#999")}"/>')
            parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar - 3}" font-size="11">'
                         f'{name} {v:,.1f} ms</text>')
            y += bar
        y += gap
    head = ('<text x="4" y="16" font-size="13" font-weight="bold">PyTorch clients on CPU, '
            '2 ranks: median ms per step (shorter is better)</text>')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 140}" '
           f'height="{y + 10}" font-family="sans-serif">' + head + "".join(parts) + "</svg>\n")
    with open(out, "w") as f:
        f.write(svg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workload", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="fsdp,tp,moe")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="timed FSDP steps per cell")
    parser.add_argument("--fsdp-width", type=int, default=768)
    parser.add_argument("--fsdp-layers", type=int, default=12)
    parser.add_argument("--fsdp-vocab", type=int, default=16384)
    parser.add_argument("--fsdp-tokens", type=int, default=64)
    parser.add_argument("--fsdp-columns", default="collie,gloo,fake")
    parser.add_argument("--tp-hidden", type=lambda s: [int(v) for v in s.split(",")],
                        default=[2048, 4096])
    parser.add_argument("--tp-tokens", type=lambda s: [int(v) for v in s.split(",")],
                        default=[1, 8])
    parser.add_argument("--tp-blocks", type=int, default=4)
    parser.add_argument("--tp-iters", type=int, default=30)
    parser.add_argument("--moe-tokens", type=lambda s: [int(v) for v in s.split(",")],
                        default=[64, 1024])
    parser.add_argument("--moe-hidden", type=int, default=2048)
    parser.add_argument("--moe-iters", type=int, default=50)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--json", help="also write every cell of every round here")
    parser.add_argument("--svg", help="write a bar chart of the medians here")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    # The workers get the workload options; the driver's own stay here.
    skip, kept = False, []
    for a in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if a in ("--rounds", "--only", "--json", "--svg"):
            skip = True
            continue
        if a.startswith(("--rounds=", "--only=", "--json=", "--svg=")):
            continue
        kept.append(a)
    args.passthrough = kept
    columns = {"fsdp": args.fsdp_columns.split(","), "tp": ["collie", "gloo", "one-rank"],
               "moe": ["collie", "gloo"]}
    cells = {}  # (workload, case, column) -> [ms per round]
    order_of_cases = []
    port = 29900 + os.getpid() % 90
    for r in range(args.rounds):
        for workload in args.only.split(","):
            cols = columns[workload] if r % 2 == 0 else columns[workload][::-1]
            for column in cols:
                port += 1
                for row in launch(args, workload, column, port):
                    key = (workload, row["case"])
                    if key not in order_of_cases:
                        order_of_cases.append(key)
                    cells.setdefault(key + (column,), []).append(row["ms"])
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"workload": k[0], "case": k[1], "column": k[2], "ms": v}
                       for k, v in cells.items()], f, indent=1)
    print("| workload | case | backend | ms | gloo ms | floor ms | /gloo | exposed /gloo |")
    print("|---|---|---|---|---|---|---|---|")
    med = lambda v: statistics.median(v) if v else None  # noqa: E731
    table = []
    for workload, case in order_of_cases:
        get = lambda c: cells.get((workload, case, c), [])  # noqa: E731
        floors = {"fsdp": ["fake", "fake-alloc"], "tp": ["one-rank"]}.get(workload, [])
        cols = {c: med(get(c)) for c in columns[workload] if get(c)}
        theirs = get("gloo")
        for column in columns[workload]:
            mine = get(column)
            if column == "gloo" or column in floors or not mine:
                continue
            # A variant with collie's allocator is measured over the floor that has it
            # too (the pool also caches the compute's own large temporaries).
            floor_name = next((f for f in floors if f.endswith("-alloc") and
                               column.endswith("-alloc") and get(f)),
                              floors[0] if floors and get(floors[0]) else None)
            floor = get(floor_name) if floor_name else []
            pairs = [a / b for a, b in zip(mine, theirs)]
            ratio = f"{statistics.median(pairs):.2f}" if pairs else ""
            exposed = ""
            if workload == "fsdp" and floor and get("fake"):
                pairs = [(a - f) / (b - g) for a, b, f, g in zip(mine, theirs, floor, get("fake"))
                         if b - g > 0]
                exposed = f"{statistics.median(pairs):.2f}" if pairs else ""
            fl = f"{med(floor):,.1f} ({floor_name})" if floor else ""
            gloo_ms = f"{med(theirs):,.1f}" if theirs else ""
            print(f"| {workload} | {case} | {column} | {med(mine):,.1f} | {gloo_ms} | "
                  f"{fl} | {ratio} | {exposed} |")
        table.append(((workload, case), cols))
    if args.svg:
        plot_svg(table, args.svg)


if __name__ == "__main__":
    main()
