"""The ProcessGroupGloo contract, checked on collie.

The ground of pytorch's test/distributed/test_c10d_gloo.py (its CPU tests), covered by
this project's own checks: argument errors in torch's wording, several tensors per
call, every collective at every root and op, sparse all-reduce, coalesced calls, many
calls in flight, gather/scatter/all-to-all, send/recv (from any source too), barriers
(monitored, with a timeout), sequence numbers, profiler events, dtypes (bool, complex,
uint32), PREMUL_SUM, object collectives, subgroups, a model averager and DDP (sparse
gradients, comm hooks, the backend name in its logging).

check_contract(rank, world, reference, failures) runs on every rank of a default
"collie" group; `reference` is a gloo group over the same ranks (to compare and to
agree on values outside collie). check_single_rank(failures) runs in one process.
Each failed expectation appends a line to `failures`.
"""

import copy
import math
import os
import re
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

import torch_collie  # noqa: F401  (registers "collie")

STRESS = 200  # calls in flight at once in the stress checks


class Checker:
    def __init__(self, rank, world, failures):
        self.rank, self.world, self.failures = rank, world, failures

    def equal(self, name, got, want):
        if isinstance(want, (list, tuple)):
            if len(got) != len(want):
                self.failures.append(f"{name}: {len(got)} results, want {len(want)}")
                return
            for i, (g, w) in enumerate(zip(got, want)):
                self.equal(f"{name}[{i}]", g, w)
            return
        if not isinstance(want, torch.Tensor):
            if got != want:
                self.failures.append(f"{name}: got {got!r}, want {want!r}")
            return
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            self.failures.append(f"{name}: got {got.dtype} {tuple(got.shape)} "
                                 f"{got.flatten()[:6].tolist()}, want {want.dtype} "
                                 f"{tuple(want.shape)} {want.flatten()[:6].tolist()}")

    def raises(self, name, pattern, fn, error=RuntimeError):
        try:
            fn()
        except error as e:  # noqa: PERF203
            if not re.search(pattern, str(e)):
                self.failures.append(f"{name}: error {str(e)[:200]!r} does not match {pattern!r}")
            return str(e)
        except Exception as e:  # noqa: BLE001
            self.failures.append(f"{name}: raised {type(e).__name__} {str(e)[:200]}, want "
                                 f"{error.__name__} matching {pattern!r}")
            return None
        self.failures.append(f"{name}: no error, want one matching {pattern!r}")
        return None


def value(work):
    work.wait()
    return work.get_future().value()


def check_argument_errors(c, pg, be):
    """Bad arguments raise before anything is issued, on the rank that passed them."""
    rank, world = c.rank, c.world
    t1, t2, t3 = torch.zeros(1), torch.zeros(1, dtype=torch.float64), torch.zeros(2)

    def bcast(tensors, root, root_tensor=0):
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = root, root_tensor
        return be.broadcast(tensors, opts)

    c.raises("broadcast root -1", "invalid root rank", lambda: bcast([t1], -1))
    c.raises("broadcast root world", "invalid root rank", lambda: bcast([t1], world))
    c.raises("broadcast root tensor -1", "invalid root tensor", lambda: bcast([t1], rank, -1))
    c.raises("broadcast root tensor 1", "invalid root tensor", lambda: bcast([t1], rank, 1))
    c.raises("broadcast empty list", "invalid root tensor", lambda: bcast([], rank))
    c.raises("broadcast types", "invalid tensor type", lambda: bcast([t1, t2], rank))
    c.raises("broadcast sizes", "invalid tensor size", lambda: bcast([t1, t3], rank))
    c.raises("allreduce empty", "requires non-empty tensor list", lambda: be.allreduce([]))
    c.raises("allreduce types", "invalid tensor type", lambda: be.allreduce([t1, t2]))
    c.raises("allreduce sizes", "invalid tensor size", lambda: be.allreduce([t1, t3]))
    sparse2 = torch.sparse_coo_tensor([[0]], [1.0], size=(2,))
    sparse4 = torch.sparse_coo_tensor([[0]], [1.0], size=(4,))
    c.raises("allreduce dense+sparse", "invalid tensor layout", lambda: be.allreduce([t1, sparse2]))
    c.raises("allreduce sparse sizes", "invalid tensor size", lambda: be.allreduce([sparse2, sparse4]))
    for op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        c.raises(f"sparse allreduce {op}", "unsupported reduction operation",
                 lambda opts=opts: be.allreduce([sparse4], opts))
    c.raises("allreduce BAND float", "integral", lambda: dist.all_reduce(
        torch.ones(2), op=dist.ReduceOp.BAND))
    c.raises("allreduce MAX complex", "SUM, AVG or PREMUL_SUM", lambda: be.allreduce(
        [torch.ones(2, dtype=torch.complex64)], _allreduce_opts(dist.ReduceOp.MAX)))
    coalesced = dist.AllreduceCoalescedOptions()
    sparse_int = torch.sparse_coo_tensor([[0]], [1], size=(1,))
    c.raises("allreduce_coalesced empty", "requires non-empty tensor list",
             lambda: be.allreduce_coalesced([], coalesced))
    c.raises("allreduce_coalesced types", "tensors must all have the same type",
             lambda: be.allreduce_coalesced([t1, t2], coalesced))
    c.raises("allreduce_coalesced layout", "invalid tensor layout at index",
             lambda: be.allreduce_coalesced([t1, sparse_int], coalesced))
    c.raises("allreduce_coalesced sparse", "unsupported layout",
             lambda: be.allreduce_coalesced([sparse_int, sparse_int.clone()], coalesced))

    def scatter(outputs, inputs, root):
        opts = dist.ScatterOptions()
        opts.rootRank = root
        return be.scatter(outputs, inputs, opts)

    c.raises("scatter root -1", "invalid root rank", lambda: scatter([t1], [], -1))
    c.raises("scatter root world", "invalid root rank", lambda: scatter([t1], [], world))
    c.raises("scatter no output", "requires a single-element output tensor list",
             lambda: scatter([], [], 0))
    c.raises("scatter two outputs", "requires a single-element output tensor list",
             lambda: scatter([t1, t1], [], 0))
    c.raises("scatter root without input", "requires a single-element input list",
             lambda: scatter([t1], [], rank))
    c.raises("scatter root two inputs", "requires a single-element input list",
             lambda: scatter([t1], [[t1] * world, [t1] * world], rank))
    c.raises("scatter short list", f"Incorrect input list size {world - 1}. Input list size "
             f"should be {world}", lambda: scatter([t1], [[t1] * (world - 1)], rank))
    c.raises("scatter type", "invalid tensor type", lambda: scatter([t1], [[t2] * world], rank))
    c.raises("scatter size", "invalid tensor size", lambda: scatter([t1], [[t3] * world], rank))
    c.raises("scatter input on non-root", "requires empty input on non-root",
             lambda: scatter([t1], [[t1] * world], (rank + 1) % world))

    def gather(outputs, inputs, root):
        opts = dist.GatherOptions()
        opts.rootRank = root
        return be.gather(outputs, inputs, opts)

    c.raises("gather root -1", "invalid root rank", lambda: gather([], [t1], -1))
    c.raises("gather no input", "requires a single-element input tensor list",
             lambda: gather([], [], 0))
    c.raises("gather root without output", "requires a single-element output list",
             lambda: gather([], [t1], rank))
    c.raises("gather long list", f"Incorrect output list size {world + 1}. Output list size "
             f"should be {world}", lambda: gather([[t1] * (world + 1)], [t1], rank))
    c.raises("gather type", "invalid tensor type", lambda: gather([[t2] * world], [t1], rank))
    c.raises("gather size", "invalid tensor size", lambda: gather([[t3] * world], [t1], rank))
    c.raises("gather output on non-root", "requires empty output on non-root",
             lambda: gather([[t1] * world], [t1], (rank + 1) % world))

    c.raises("allgather empty", "requires non-empty input tensor list", lambda: be.allgather([], []))
    c.raises("allgather lengths", "requires input/output tensor lists to have the same length",
             lambda: be.allgather([], [t1]))
    c.raises("allgather short list", "invalid output tensor list",
             lambda: be.allgather([[t1] * (world - 1)], [t1]))
    c.raises("allgather input types", "invalid tensor type",
             lambda: be.allgather([[t1, t1] * world, [t1, t1] * world], [t1, t2]))
    c.raises("allgather output sizes", "invalid tensor size",
             lambda: be.allgather([([t1, t3] * world)[:world]], [t1]))
    outputs = [[torch.zeros(1)] for _ in range(world)]
    outputs[0] = [torch.zeros(0)]
    c.raises("all_gather_coalesced size", "invalid size of output tensor at index 0",
             lambda: dist.all_gather_coalesced(outputs, [torch.zeros(1)], pg))
    outputs[0] = [torch.zeros(1, dtype=torch.float64)]
    c.raises("all_gather_coalesced type", "invalid tensor type at index 0",
             lambda: dist.all_gather_coalesced(outputs, [torch.zeros(1)], pg))
    c.raises("all_gather_coalesced lists", "output lists should be equal to world size",
             lambda: dist.all_gather_coalesced([[torch.zeros(1)]] * (world + 1),
                                               [torch.zeros(1)], pg))

    def reduce(tensors, root, root_tensor=0):
        opts = dist.ReduceOptions()
        opts.rootRank, opts.rootTensor = root, root_tensor
        return be.reduce(tensors, opts)

    c.raises("reduce root -1", "invalid root rank", lambda: reduce([t1], -1))
    c.raises("reduce root tensor 1", "invalid root tensor", lambda: reduce([t1], rank, 1))
    c.raises("reduce two tensors", "requires a single-element tensor list",
             lambda: reduce([t1, t1], rank))
    c.raises("send to self", "invalid peer rank", lambda: be.send([t1], rank, 0))
    # all_to_all_single takes contiguous tensors only, as gloo and NCCL (a ValueError).
    square = torch.ones(world, 2)
    c.raises("all_to_all_single transposed", "Tensors must be contiguous",
             lambda: dist.all_to_all_single(torch.zeros(2, world), square.t(), group=pg),
             error=ValueError)


def _allreduce_opts(op):
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


def check_collectives(c, pg, be):
    """Every collective at every root, several tensors per call, the ops and dtypes."""
    rank, world = c.rank, c.world
    for root in range(world):
        x = torch.tensor([float(rank)])
        c.equal(f"broadcast root {root}", value(be.broadcast(x, root=root))[0],
                torch.tensor([float(root)]))
        for root_tensor in range(2):  # two tensors per rank: root's root_tensor to all
            opts = dist.BroadcastOptions()
            opts.rootRank, opts.rootTensor = root, root_tensor
            xs = [torch.tensor([rank * 2.0]), torch.tensor([rank * 2.0 + 1])]
            want = torch.tensor([root * 2.0 + root_tensor])
            c.equal(f"broadcast 2 tensors root {root}/{root_tensor}",
                    value(be.broadcast(xs, opts)), [want, want])
    empty = [torch.zeros(0)]
    c.equal("broadcast empty", value(be.broadcast(empty))[0], torch.zeros(0))

    triangle = float(world * (world + 1) / 2)
    ops = [(dist.ReduceOp.SUM, torch.tensor([rank + 1.0]), torch.tensor([triangle])),
           (dist.ReduceOp.PRODUCT, torch.tensor([rank + 1.0]),
            torch.tensor([float(math.factorial(world))])),
           (dist.ReduceOp.MIN, torch.tensor([rank + 1.0]), torch.tensor([1.0])),
           (dist.ReduceOp.MAX, torch.tensor([rank + 1.0]), torch.tensor([float(world)])),
           (dist.ReduceOp.AVG, torch.tensor([rank + 1.0]), torch.tensor([(world + 1) / 2]))]
    for i in range(4):  # the bit set changes, so a stale result cannot pass
        ops.append((dist.ReduceOp.BAND, torch.tensor([rank | (1 << i)], dtype=torch.int32),
                    torch.tensor([1 << i], dtype=torch.int32)))
    for i in range(1, 4):  # each rank contributes i values, pre-combined
        def fold(f, xs):
            out = 0
            for x in xs:
                out = f(out, x)
            return out
        ops.append((dist.ReduceOp.BOR, torch.tensor(
            [fold(int.__or__, [rank * i + j for j in range(i)])], dtype=torch.int32),
            torch.tensor([fold(int.__or__, range(world * i))], dtype=torch.int32)))
        ops.append((dist.ReduceOp.BXOR, torch.tensor(
            [fold(int.__xor__, [rank * i + j for j in range(i)])], dtype=torch.int32),
            torch.tensor([fold(int.__xor__, range(world * i))], dtype=torch.int32)))
    for op, x, want in ops:
        c.equal(f"allreduce {op}", value(be.allreduce([x.clone()], _allreduce_opts(op)))[0], want)
        for root in range(world):
            opts = dist.ReduceOptions()
            opts.reduceOp, opts.rootRank = op, root
            got = value(be.reduce([x.clone()], opts))[0]
            if rank == root:
                c.equal(f"reduce {op} root {root}", got, want)
    # Several tensors per rank: reduced over all of them, the result in each.
    multi = [(dist.ReduceOp.SUM, float(world * (2 * world - 1))),
             (dist.ReduceOp.PRODUCT, float(math.factorial(2 * world))),
             (dist.ReduceOp.MIN, 1.0), (dist.ReduceOp.MAX, 2.0 * world)]
    for op, want in multi:
        base = 0.0 if op == dist.ReduceOp.SUM else 1.0
        xs = [torch.tensor([2 * rank + base]), torch.tensor([2 * rank + base + 1])]
        c.equal(f"allreduce 2 tensors {op}", value(be.allreduce(xs, _allreduce_opts(op))),
                [torch.tensor([want])] * 2)
    # float16 sums exactly like an all-gather then a local sum (no float32 detour).
    torch.manual_seed(rank)
    half = ((torch.rand(10, 1) * 2 - 1) * 65504 / world).to(torch.float16)
    gathered = value(be.allgather([[torch.zeros_like(half) for _ in range(world)]], [half]))
    c.equal("allreduce float16 vs local sum", value(be.allreduce([half.clone()]))[0],
            torch.stack(gathered).sum(0))

    # all_gather with 1, 2, 3 inputs per rank: every list gets all, rank-major.
    for n in (1, 2, 3):
        for name, make in (("", lambda t: t.clone()),
                           (" non-contiguous", lambda t: t.expand(2, 2).contiguous()[:, 0])):
            inputs = [make(torch.tensor([n * rank + i])) for i in range(n)]
            outputs = [[make(torch.tensor([-1])) for _ in range(n * world)] for _ in range(n)]
            got = value(be.allgather(outputs, inputs))
            got = [got] if n == 1 else got
            want = [[make(torch.tensor([i])) for i in range(n * world)] for _ in range(n)]
            c.equal(f"allgather {n} inputs{name}", [t for lst in got for t in lst],
                    [t for lst in want for t in lst])
    with torch.inference_mode():
        got = value(be.allgather([[torch.zeros(1) for _ in range(world)]],
                                 [torch.tensor([rank + 0.5])]))
    c.equal("allgather inference mode", got, [torch.tensor([r + 0.5]) for r in range(world)])

    for root in range(world):
        gather_opts, scatter_opts = dist.GatherOptions(), dist.ScatterOptions()
        gather_opts.rootRank = scatter_opts.rootRank = root
        column = torch.tensor([[rank, -7], [rank, -7]])[:, 0]  # non-contiguous input
        outs = [[torch.full((2,), -1, dtype=torch.int64) for _ in range(world)]]
        got = value(be.gather(outs if rank == root else [], [column], gather_opts))
        if rank == root:
            c.equal(f"gather root {root}", got,
                    [torch.tensor([r, r]) for r in range(world)])
        parts = [[torch.tensor([10 * root + p]) for p in range(world)]] if rank == root else []
        got = value(be.scatter([torch.tensor([-1])], parts, scatter_opts))
        c.equal(f"scatter root {root}", got[0], torch.tensor([10 * root + rank]))

    # reduce_scatter with parts of different sizes per rank (rank r's part has r elements).
    torch.manual_seed(42)
    parts = [torch.rand(i) for i in range(world)]
    out = torch.empty(rank)
    dist.reduce_scatter(out, [p.clone() for p in parts], group=pg)
    c.equal("reduce_scatter uneven", out, parts[rank] * world)
    shape = (5, 3)
    inp = torch.arange(world * 15, dtype=torch.float64).reshape(world * 5, 3) + rank
    out = torch.empty(shape, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, inp, group=pg)
    want = sum(torch.arange(world * 15, dtype=torch.float64).reshape(world * 5, 3) + r
               for r in range(world))[rank * 5:rank * 5 + 5]
    c.equal("reduce_scatter_tensor", out, want)
    ins = [torch.rand(s[0] * world, s[1]) for s in [(2, 2), (3, 3)]]
    outs = [torch.empty(s) for s in [(2, 2), (3, 3)]]
    pg.reduce_scatter_tensor_coalesced(outs, [i.clone() for i in ins]).wait()
    for i, (o, full) in enumerate(zip(outs, ins)):
        c.equal(f"reduce_scatter_tensor_coalesced {i}", o,
                full.view(world, *o.shape)[rank] * world)
    ins = [torch.rand(s) for s in [(2, 2), (3, 3)]]
    outs = [torch.empty(s[0] * world, s[1]) for s in [(2, 2), (3, 3)]]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    everyone = [torch.empty_like(torch.cat([i.flatten() for i in ins])) for _ in range(world)]
    dist.all_gather(everyone, torch.cat([i.flatten() for i in ins]), group=pg)
    for i, o in enumerate(outs):
        want = torch.cat([e[:ins[0].numel()] if i == 0 else e[ins[0].numel():]
                          for e in everyone]).view(o.shape)
        c.equal(f"allgather_into_tensor_coalesced {i}", o, want)

    # all_gather_coalesced: tensors of several shapes in one call (and of several dtypes,
    # which the backend takes while torch's Python API refuses them).
    inputs = [torch.tensor([rank, rank + 1.0]), torch.full((2, 2), rank + 0.5)]
    outputs = [[torch.zeros_like(t) for t in inputs] for _ in range(world)]
    dist.all_gather_coalesced(outputs, inputs, group=pg)
    for r in range(world):
        c.equal(f"all_gather_coalesced from {r}", outputs[r],
                [torch.tensor([r, r + 1.0]), torch.full((2, 2), r + 0.5)])
    inputs = [torch.tensor([rank, rank + 1]), torch.full((2, 2), rank + 0.5, dtype=torch.float64)]
    outputs = [[torch.zeros_like(t) for t in inputs] for _ in range(world)]
    be.allgather_coalesced(outputs, inputs).wait()
    for r in range(world):
        c.equal(f"allgather_coalesced dtypes from {r}", outputs[r],
                [torch.tensor([r, r + 1]), torch.full((2, 2), r + 0.5, dtype=torch.float64)])

    # all-to-all with uneven splits: rank r sends p+r+1 rows to rank p.
    in_splits = [p + rank + 1 for p in range(world)]
    out_splits = [rank + p + 1 for p in range(world)]
    inp = torch.cat([torch.full((in_splits[p], 2), 100.0 * rank + p) for p in range(world)])
    out = torch.empty(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, out_splits, in_splits, group=pg)
    c.equal("all_to_all_single uneven", out,
            torch.cat([torch.full((out_splits[p], 2), 100.0 * p + rank) for p in range(world)]))
    outs = [torch.empty(p + 1) for p in range(world)]
    dist.all_to_all(outs, [torch.full((rank + 1,), float(10 * rank + p)) for p in range(world)],
                    group=pg)
    c.equal("all_to_all lists uneven", outs,
            [torch.full((p + 1,), float(10 * p + rank)) for p in range(world)])

    # all_to_all_single without splits (equal shares: collie's all-to-all of one count, on
    # the shm board when small and by CMA when large), against the same call with equal
    # splits (the all-to-all with a count per peer) and the values each rank must get.
    for rows, dtype in ((1, torch.float32), (3 * 1024, torch.bfloat16), (96 * 1024, torch.int64),
                        (300 * 1024, torch.float32)):
        cols = 3
        inp = (torch.arange(world * rows * cols, dtype=torch.float64).reshape(world * rows, cols) %
               251 + 1000 * rank).to(dtype)
        out = torch.empty_like(inp)
        dist.all_to_all_single(out, inp, group=pg)
        want = torch.cat([((torch.arange(world * rows * cols, dtype=torch.float64)
                            .reshape(world * rows, cols) % 251 + 1000 * p).to(dtype))
                          [rank * rows:(rank + 1) * rows] for p in range(world)])
        c.equal(f"all_to_all_single equal {rows}x{cols} {dtype}", out, want)
        split_out = torch.empty_like(inp)
        dist.all_to_all_single(split_out, inp, [rows] * world, [rows] * world, group=pg)
        c.equal(f"all_to_all_single equal splits {rows}x{cols} {dtype}", split_out, want)
        # In place (output is input): collie runs it in place (board, cma or a copy).
        same = inp.clone()
        dist.all_to_all_single(same, same, group=pg)
        c.equal(f"all_to_all_single in place {rows}x{cols} {dtype}", same, want)
        same = inp.clone()
        dist.all_to_all_single(same, same, [rows] * world, [rows] * world, group=pg)
        c.equal(f"all_to_all_single in place, splits {rows}x{cols} {dtype}", same, want)


def check_dtypes(c, pg, be):
    rank, world = c.rank, c.world
    b = torch.tensor([rank == 0, True, False, rank == 1])
    got = b.clone()
    dist.all_reduce(got, group=pg)  # SUM of bool: OR
    c.equal("allreduce bool SUM", got, torch.tensor([True, True, False, world > 1]))
    got = b.clone()
    dist.all_reduce(got, op=dist.ReduceOp.PRODUCT, group=pg)  # AND
    c.equal("allreduce bool PRODUCT", got, torch.tensor([world == 1, True, False, world == 1]))
    got = torch.tensor([True, False, False, True]) if rank == 0 else torch.zeros(4, dtype=torch.bool)
    dist.broadcast(got, src=0, group=pg)
    c.equal("broadcast bool", got, torch.tensor([True, False, False, True]))
    z = torch.tensor([complex(rank, 1), complex(1, -rank)], dtype=torch.complex64)
    got = z.clone()
    dist.all_reduce(got, group=pg)
    want = sum(torch.tensor([complex(r, 1), complex(1, -r)], dtype=torch.complex64)
               for r in range(world))
    c.equal("allreduce complex64", got, want)
    got = z.clone()
    be.allreduce([got]).wait()  # straight to the backend: viewed as reals there
    c.equal("allreduce complex64 (backend)", got, want)
    outs = [torch.empty(2, dtype=torch.complex128) for _ in range(world)]
    dist.all_gather(outs, z.to(torch.complex128), group=pg)
    c.equal("allgather complex128", outs,
            [torch.tensor([complex(r, 1), complex(1, -r)], dtype=torch.complex128)
             for r in range(world)])
    u = torch.tensor([rank + 1, 1 << 31], dtype=torch.uint32)
    dist.all_reduce(u, op=dist.ReduceOp.MAX, group=pg)
    c.equal("allreduce uint32 MAX", u, torch.tensor([world, 1 << 31], dtype=torch.uint32))
    for factor in (2.5, torch.tensor([0.5], dtype=torch.float64)):
        x = torch.arange(4, dtype=torch.float64) + rank
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor), group=pg)
        f = float(factor)
        c.equal(f"allreduce PREMUL_SUM {f}", x,
                sum((torch.arange(4, dtype=torch.float64) + r) * f for r in range(world)))
    # Each rank its own factor (collie's engine multiplies each input once, then sums).
    y = torch.arange(2 * world, dtype=torch.float32) + rank
    out = torch.empty(2, dtype=torch.float32)
    dist.reduce_scatter_tensor(out, y, op=dist._make_nccl_premul_sum(0.5 * (rank + 1)), group=pg)
    whole = sum((torch.arange(2 * world, dtype=torch.float32) + r) * (0.5 * (r + 1))
                for r in range(world))
    c.equal("reduce_scatter_tensor PREMUL_SUM per-rank factor", out, whole[2 * rank:2 * rank + 2])


def check_sparse(c, pg, be):
    """As gloo: all-gather of indices and values, summed and coalesced; 1 and 2 inputs."""
    rank, world = c.rank, c.world

    def make(r, n, sparse_dims, dense_dims):
        indices = torch.arange(r + 1).reshape(1, r + 1)
        for _ in range(sparse_dims - 1):
            indices = torch.cat((indices, torch.zeros(1, r + 1, dtype=torch.int64)))
        shape = [n] * sparse_dims + [2] * dense_dims
        values = torch.full([r + 1] + [2] * dense_dims, float(r + 1))
        return torch.sparse_coo_tensor(indices, values, shape)

    for inputs_per_rank in (1, 2):
        n = inputs_per_rank * world
        for sparse_dims, dense_dims in ((1, 0), (2, 0), (3, 0), (1, 1), (1, 2)):
            ins = [make(inputs_per_rank * rank + i, n, sparse_dims, dense_dims)
                   for i in range(inputs_per_rank)]
            want = sum(make(r, n, sparse_dims, dense_dims).to_dense() for r in range(n))
            got = value(be.allreduce(ins))
            for i, t in enumerate(got):
                if not t.is_sparse or not torch.equal(t.to_dense(), want):
                    c.failures.append(f"sparse allreduce {inputs_per_rank} inputs "
                                      f"{sparse_dims}+{dense_dims} dims: result {i} differs")


def check_in_flight(c, pg, be):
    """Many calls issued before any is waited for complete in order with their values."""
    rank, world = c.rank, c.world
    triangle = world * (world - 1) // 2
    futs = [be.allreduce(torch.tensor([i + rank])).get_future() for i in range(STRESS)]
    for i, f in enumerate(futs):
        f.wait()
        c.equal(f"allreduce in flight {i}", f.value()[0], torch.tensor([i * world + triangle]))
    xs = [torch.tensor([i * world + rank]) for i in range(STRESS)]
    works = [be.broadcast(xs[i], root=i % world) for i in range(STRESS)]
    for i, w in enumerate(works):
        w.wait()
        c.equal(f"broadcast in flight {i}", xs[i], torch.tensor([i * world + i % world]))
    futs = [be.allreduce_coalesced([torch.tensor([i + rank])] * 2).get_future()
            for i in range(STRESS // 4)]
    for i, f in enumerate(futs):
        c.equal(f"allreduce_coalesced in flight {i}", f.wait(),
                [torch.tensor([i * world + triangle])] * 2)
    # A barrier completes only after everything issued before it.
    tensors = [torch.full((100, 100), float(i)) for i in range(16)]
    for t in tensors:
        be.allreduce(t)  # the works are dropped
    be.barrier().get_future().wait()
    for i, t in enumerate(tensors):
        c.equal(f"barrier implies wait {i}", t, torch.full((100, 100), float(i * world)))


def check_point_to_point(c, pg, be):
    rank, world = c.rank, c.world
    # Every send posted before any receive, then all waited for.
    outputs = [torch.tensor([-1]) for _ in range(world)]
    sends = [be.send([torch.tensor([rank])], p, 0) for p in range(world) if p != rank]
    recvs = [be.recv([outputs[p]], p, 0) for p in range(world) if p != rank]
    for w in sends + recvs:
        w.wait()
        if not w.is_completed():
            c.failures.append("send/recv: work not completed after wait")
    for p in range(world):
        if p != rank:
            c.equal(f"send/recv from {p}", outputs[p], torch.tensor([p]))
    # Receives from any source: rank 0 receives one message from every other rank.
    if rank == 0:
        senders = []
        for i in range(world - 1):
            t = torch.full((3,), -1.0)
            if i % 2 == 0:
                src = dist.recv(t, group=pg)
            else:
                work = dist.irecv(t, group=pg)
                work.wait()
                src = work._source_rank()
            senders.append(src)
            c.equal(f"recv from any source #{i}", t, torch.full((3,), float(src)))
        if sorted(senders) != list(range(1, world)):
            c.failures.append(f"recv from any source: senders {senders}")
    else:
        dist.send(torch.full((3,), float(rank)), dst=0, group=pg)
    # batch_isend_irecv, receives posted first: one coalesced group.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(5)
    ops = [dist.P2POp(dist.irecv, got, prv, group=pg),
           dist.P2POp(dist.isend, torch.full((5,), float(rank)), nxt, group=pg)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    c.equal("batch_isend_irecv ring", got, torch.full((5,), float(prv)))


def check_group_features(c, pg, reference):
    rank, world = c.rank, c.world

    def agreed(x):
        everyone = [None] * world
        dist.all_gather_object(everyone, x, group=reference)
        return everyone

    start = pg._get_sequence_number_for_group()
    for i in range(3):
        dist.all_reduce(torch.ones(1), group=pg)
        seqs = agreed(pg._get_sequence_number_for_group())
        if len(set(seqs)) != 1 or seqs[0] != start + i + 1:
            c.failures.append(f"sequence numbers after {i + 1} all-reduces: {seqs} "
                              f"(started at {start})")
    # Profiler events named like gloo's, async, with the input shapes (the autograd
    # profiler: torch.profiler records the same events but takes 1.5 s to start here;
    # the torch_suite test runs it).
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(torch.ones(3, 4), group=pg)
        dist.broadcast(torch.ones(5), src=0, group=pg)
    names = {e.name: e for e in prof.function_events}
    for name, shape in (("collie:all_reduce", [[3, 4]]), ("collie:broadcast", [[5]])):
        if name not in names:
            c.failures.append(f"profiler: no {name} event (got {sorted(names)[:8]})")
        elif names[name].input_shapes != shape or not names[name].is_async:
            c.failures.append(f"profiler: {name} input shapes {names[name].input_shapes}, "
                              f"async {names[name].is_async}")
    # Object collectives.
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "name": "x" * rank}, group=pg)
    if objs != [{"rank": r, "name": "x" * r} for r in range(world)]:
        c.failures.append(f"all_gather_object: {objs}")
    lst = [f"from {rank}", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0, group=pg)
    if lst != ["from 0", 0]:
        c.failures.append(f"broadcast_object_list: {lst}")
    # A model averager over collie: every rank ends with the mean of the parameters.
    torch.manual_seed(rank)
    model = nn.Linear(4, 3)
    model(torch.ones(2, 4)).sum().backward()  # the averager takes parameters with gradients
    before = [p.detach().clone().double() for p in model.parameters()]
    PeriodicModelAverager(period=1, warmup_steps=0, process_group=pg).average_parameters(
        model.parameters())
    for i, (p, mine) in enumerate(zip(model.parameters(), before)):
        everyone = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(everyone, mine, group=reference)
        if not torch.allclose(p.double(), sum(everyone) / world, rtol=1e-6, atol=1e-7):
            c.failures.append(f"PeriodicModelAverager: parameter {i} is not the mean")
    # Subgroups of one rank each (communicators of size 1).
    mine, _ = dist.new_subgroups(group_size=1, backend="collie")
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t, group=mine)
    c.equal("new_subgroups(1) all_reduce", t, torch.tensor([rank + 1.0]))


def check_devices(c, be):
    """gloo's create_device, as collie's: an interface, checked, that a group's sockets
    then use (COLLIE_SOCKET_IFNAME); also on the backend object, where gloo code calls it."""
    dev = be.create_device(interface="lo")
    c.equal("create_device(interface=lo) knobs", dev.knobs(), {"COLLIE_SOCKET_IFNAME": "=lo"})
    c.equal("create_device(hostname=localhost)",
            torch_collie.create_device(hostname="localhost").interface, "lo")
    c.raises("create_device of a missing interface", "no network interface named 'nonexistent9'",
             lambda: torch_collie.create_device(interface="nonexistent9"))
    c.raises("create_device of an unresolvable host", "cannot resolve hostname",
             lambda: torch_collie.create_device(hostname="no-such-host.invalid"))
    c.equal("device_knobs of two devices",
            torch_collie.device_knobs([dev, torch_collie.create_device(interface="lo")]),
            {"COLLIE_SOCKET_IFNAME": "=lo"})
    c.raises("device_knobs of a string", "must come from torch_collie.create_device",
             lambda: torch_collie.device_knobs(["lo"]), error=TypeError)
    # Registered for CPU and CUDA tensors; where torch sees a GPU, one backend object
    # serves both (torch leaves the devices it cannot use out of a group).
    c.equal("backend_capability", dist.Backend.backend_capability["collie"], ["cpu", "cuda"])
    if torch.cuda.is_available():
        c.equal("the cuda backend is the cpu one",
                dist.group.WORLD._get_backend(torch.device("cuda")) is be, True)
    # A group over the device's interface works (tcp, so the sockets are used).
    group = dist.new_group(backend="collie",
                           pg_options={**dev.knobs(), "COLLIE_TRANSPORT": "tcp"})
    t = torch.full((3,), float(c.rank + 1))
    dist.all_reduce(t, group=group)
    c.equal("all_reduce on create_device's interface", t,
            torch.full((3,), float(c.world * (c.world + 1) // 2)))
    dist.destroy_process_group(group)


def check_barriers(c):
    """monitored_barrier names the rank that did not arrive; a barrier with a timeout
    fails when it passes. Each on a group of its own (they leave it unusable)."""
    rank, world = c.rank, c.world
    ok = dist.new_group(backend="collie")
    dist.monitored_barrier(ok, timeout=timedelta(seconds=30))
    dist.monitored_barrier(ok, timeout=timedelta(seconds=30), wait_all_ranks=True)
    for wait_all in (False, True):
        missing = dist.new_group(backend="collie")
        if rank == 0:
            pattern = (f"Ranks {', '.join(map(str, range(1, world)))} failed to pass "
                       "monitoredBarrier" if wait_all else "Rank 1 failed to pass monitoredBarrier")
            c.raises(f"monitored_barrier wait_all_ranks={wait_all}", pattern,
                     lambda g=missing, w=wait_all: dist.monitored_barrier(
                         g, timeout=timedelta(milliseconds=300), wait_all_ranks=w))
    # _set_default_timeout (as on gloo's backend): reported by the options, and the
    # deadline of later calls without their own.
    slow = dist.new_group(backend="collie", timeout=timedelta(seconds=50))
    be = slow._get_backend(torch.device("cpu"))
    c.equal("options timeout", be.options._timeout, timedelta(seconds=50))
    be._set_default_timeout(timedelta(milliseconds=300))
    c.equal("options timeout set", be.options._timeout, timedelta(milliseconds=300))
    t = torch.ones(2)
    dist.all_reduce(t, group=slow)
    c.equal("all_reduce after _set_default_timeout", t, torch.full((2,), float(world)))
    if rank == 0:  # rank 1 stays away: the call fails after 300 ms, not COLLIE_TIMEOUT
        # (4 MB: small collectives run inline, bounded by the communicator's deadline only)
        start = time.monotonic()
        c.raises("all_reduce past the default timeout", r"all.?reduce on rank 0: timed out after 300",
                 lambda: dist.all_reduce(torch.ones(1 << 20), group=slow),
                 error=dist.DistBackendError)
        c.equal("seconds until the default timeout failed the call (< 5)",
                round(time.monotonic() - start) < 5, True)
    dist.barrier()
    lonely = dist.new_group(backend="collie")
    if rank == 0:
        opts = dist.BarrierOptions()
        opts.timeout = timedelta(milliseconds=300)
        c.raises("barrier with a timeout", r"barrier on rank 0: timed out after 300 ms: rank\(s\) 1 did not arrive",
                 lambda: lonely.barrier(opts).wait(), error=dist.DistBackendError)


def check_debug_detail(c, reference):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL wraps new collie groups in torch's checker."""
    rank = c.rank
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        checked = dist.new_group(backend="collie")
        t = torch.ones(3)
        dist.all_reduce(t, group=checked)
        c.equal("DETAIL all_reduce", t, torch.full((3,), float(c.world)))
        c.raises("DETAIL mismatch", "Detected mismatch between collectives on ranks",
                 lambda: dist.all_reduce(torch.ones(3 + rank), group=checked))
    finally:
        dist.set_debug_level(dist.DebugLevel.OFF)


class SparseModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(10, 10, sparse=True)

    def forward(self, x):
        return nn.functional.softmax(self.embedding(x), dim=1)


def check_ddp(c, pg):
    rank, world = c.rank, c.world
    # Sparse gradients: DDP all-reduces them sparse; equal to one process on the batch.
    for as_view in (False, True):
        torch.manual_seed(1337)
        vanilla = SparseModel()
        ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(vanilla), process_group=pg,
                                                  gradient_as_bucket_view=as_view)
        inp, target = torch.randint(0, 10, [2 * world, 2]), torch.randint(0, 10, [2 * world])
        loss = nn.CrossEntropyLoss()
        loss(vanilla(inp), target).backward()
        loss(ddp(inp.split(2)[rank]), target.split(2)[rank]).backward()
        a, b = next(vanilla.parameters()).grad, next(ddp.parameters()).grad
        if not b.is_sparse or not torch.allclose(a.coalesce().to_dense(),
                                                 b.coalesce().to_dense(), atol=1e-6):
            c.failures.append(f"DDP sparse gradients (bucket view {as_view}) differ")
    # A comm hook's future: its value becomes the gradients.
    model = nn.parallel.DistributedDataParallel(nn.Linear(2, 2, bias=False), process_group=pg)

    def hook(state, bucket):
        fut = torch.futures.Future()
        fut.set_result(torch.ones_like(bucket.buffer()))
        return fut.then(lambda f: f.value() + 1)

    model.register_comm_hook(None, hook)
    model(torch.ones(3, 2)).sum().backward()
    c.equal("DDP comm hook future", model.module.weight.grad, torch.full((2, 2), 2.0))
    name = model._get_ddp_logging_data().get("backend_name")
    if name != "collie":
        c.failures.append(f"DDP logging backend_name {name!r}, want 'collie'")
    # The output may be ignored, with unused parameters too.
    for unused in (False, True):
        net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 3))
        ddp = nn.parallel.DistributedDataParallel(net, process_group=pg,
                                                  find_unused_parameters=unused)
        for _ in range(2):
            ddp(torch.rand(4, 2))  # output ignored: no backward
        for _ in range(2):
            ddp(torch.rand(4, 2)).sum().backward()


def check_contract(rank, world, reference, failures):
    c = Checker(rank, world, failures)
    pg = dist.group.WORLD
    # Backend-level calls go to the Backend itself, as test_c10d_gloo.py calls
    # ProcessGroupGloo (torch's ProcessGroup dispatcher cannot route an empty list).
    be = pg._get_backend(torch.device("cpu"))
    for check in (check_argument_errors, check_collectives, check_dtypes, check_sparse,
                  check_in_flight, check_point_to_point):
        check(c, pg, be)
    check_group_features(c, pg, reference)
    check_devices(c, be)
    check_ddp(c, pg)
    check_debug_detail(c, reference)
    check_barriers(c)


def check_single_rank(failures):
    """A group of one rank (a Reducer on it, as test_c10d_gloo's ReducerTest)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group("collie", store=store, rank=0, world_size=1)
        try:
            t = torch.arange(4.0)
            dist.all_reduce(t)
            if not torch.equal(t, torch.arange(4.0)):
                failures.append(f"single rank all_reduce: {t}")
            model = nn.Sequential(nn.Linear(2, 10), nn.Linear(10, 4).double())
            params = list(model.parameters())
            buckets = [[0, 1], [2, 3]]  # one dtype per bucket
            reducer = dist.Reducer(params, buckets, [dist._DEFAULT_FIRST_BUCKET_BYTES] * 2,
                                   dist.group.WORLD, find_unused_parameters=True)
            reducer.prepare_for_forward()
            out = model[1](model[0](torch.rand(3, 2)).double()).sum()
            reducer.prepare_for_backward(out)
            out.backward()
            if any(p.grad is None for p in params):
                failures.append("single rank Reducer: a gradient is missing")
        finally:
            dist.destroy_process_group()
