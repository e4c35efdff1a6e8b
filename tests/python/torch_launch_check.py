"""One all-reduce and one DDP step on "collie" under a launcher (torchrun or
`collie run`), rendezvous from torch_collie.init_method_from_env(). Prints
"launch check ok" on every rank that passed; exits non-zero otherwise."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import torch_collie

init_method, rank, world = torch_collie.init_method_from_env()
dist.init_process_group("collie", init_method=init_method, rank=rank, world_size=world)
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), world * (world + 1) / 2)), t[:4]
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(32, 8))
model(torch.randn(4, 32) + rank).sum().backward()
grads = [torch.empty_like(model.module.weight.grad) for _ in range(world)]
dist.all_gather(grads, model.module.weight.grad)
assert all(torch.equal(grads[0], g) for g in grads)
dist.destroy_process_group()
# One write for the whole line: under torchrun the ranks share the log, stdout may be
# unbuffered, and print() writes the text and its newline in two calls, which interleave.
sys.stdout.write(f"rank {rank}/{world}: launch check ok\n")
sys.stdout.flush()
