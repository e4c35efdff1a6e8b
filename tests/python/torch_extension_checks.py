"""collie's own behaviour through torch, beyond ProcessGroupGloo's contract
(torch_contract_checks.py): torch_collie.all_reduce_, and where collie answers
differently from gloo (all_to_all_single with splits on some ranks only).

check_extensions(rank, world, reference, failures) runs on every rank of a default
"collie" group; `reference` is a gloo group over the same ranks. Each failed expectation
appends a line to `failures`.
"""

import torch
import torch.distributed as dist

import torch_collie
from torch_contract_checks import Checker


def check_extensions(rank, world, reference, failures):
    c = Checker(rank, world, failures)
    check_direct_all_reduce(c, dist.group.WORLD, reference)
    check_mixed_all_to_all(c)


def check_direct_all_reduce(c, pg, reference):
    """torch_collie.all_reduce_: in place, returns the tensor, bit for bit what
    dist.all_reduce gives on the same group, in the group's order of collectives (its
    sequence number counts it), on a gloo group it is dist.all_reduce."""
    rank, world = c.rank, c.world
    cases = [(torch.float32, dist.ReduceOp.SUM), (torch.bfloat16, dist.ReduceOp.SUM),
             (torch.float16, dist.ReduceOp.MAX), (torch.int64, dist.ReduceOp.SUM),
             (torch.float64, dist.ReduceOp.AVG), (torch.complex64, dist.ReduceOp.SUM),
             (torch.float32, dist._make_nccl_premul_sum(0.5))]
    for dtype, op in cases:
        for n in (1, 1000, 70_000, 300_000):  # inline, board, ring sizes
            base = (torch.arange(n, dtype=torch.float64) * 0.37 + rank * 1.5) % 97 - 40
            x = base.to(dtype)
            want = x.clone()
            dist.all_reduce(want, op=op, group=pg)
            got = x.clone()
            seq = pg._get_sequence_number_for_group()
            back = torch_collie.all_reduce_(got, op=op, group=pg)
            name = f"all_reduce_ {dtype} {op} n={n}"
            if back is not got:
                c.failures.append(f"{name}: did not return its tensor")
            c.equal(name, got, want)
            after = pg._get_sequence_number_for_group()
            c.equal(f"{name} sequence number", after, seq + 1)
    total = torch.zeros(5, dtype=torch.float64)
    for r in range(world):
        total += torch.arange(5, dtype=torch.float64) * (r + 1)
    t = (torch.arange(5, dtype=torch.float64) * (rank + 1)).float()
    c.equal("all_reduce_ default group", torch_collie.all_reduce_(t), total.float())
    square = torch.arange(16.0).reshape(4, 4) + rank
    got = square.t()  # not contiguous: reduced through a copy, written back
    torch_collie.all_reduce_(got, group=pg)
    c.equal("all_reduce_ transposed", got,
            (torch.arange(16.0).reshape(4, 4) * world + sum(range(world))).t())
    g = torch.arange(6.0) + rank
    torch_collie.all_reduce_(g, group=reference)  # gloo: dist.all_reduce
    c.equal("all_reduce_ on gloo", g, torch.arange(6.0) * world + sum(range(world)))
    c.raises("all_reduce_ sparse", "dense", lambda: torch_collie.all_reduce_(
        torch.eye(3).to_sparse(), group=pg))
    # A group without this rank (new_group gives it GroupMember.NON_GROUP_MEMBER): the
    # tensor is left as is, as dist.all_reduce leaves it.
    sub = dist.new_group([0], backend="collie")
    t = torch.full((3,), float(rank + 1))
    c.equal("all_reduce_ group of rank 0", torch_collie.all_reduce_(t, group=sub),
            torch.full((3,), float(rank + 1)))
    if rank == 0:
        dist.destroy_process_group(sub)


def check_mixed_all_to_all(c):
    """all_to_all_single with no splits on rank 0 and equal splits on the others: collie runs
    the two as different collectives (its all-to-all of one count, and the one with a count
    per peer), so every rank fails with a mismatch naming both, on a group of its own (a
    mismatch aborts the group's communicator), instead of hanging or mixing bytes."""
    rank, world = c.rank, c.world
    group = dist.new_group(backend="collie")
    inp, out = torch.ones(world * 4), torch.zeros(world * 4)

    def mixed():
        if rank == 0:
            dist.all_to_all_single(out, inp, group=group)
        else:
            dist.all_to_all_single(out, inp, [4] * world, [4] * world, group=group)

    c.raises("all_to_all_single splits on some ranks only", "Collective mismatch.*alltoall",
             mixed, error=dist.DistBackendError)
    dist.destroy_process_group(group)
