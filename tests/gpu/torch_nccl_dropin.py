"""PyTorch's own NCCL backend on collie's libnccl.so.2 (issue 50's torch cases).

Starts N ranks as processes (all on CUDA device 0, which NVIDIA's NCCL refuses and
collie must not), each running unmodified ``torch.distributed`` with ``backend="nccl"``
and CUDA tensors; collie's library replaces NVIDIA's through ``LD_PRELOAD`` (pip's
torch finds its own libnccl.so.2 through an RPATH, ahead of LD_LIBRARY_PATH).

Cases: all_reduce with SUM, AVG, MAX and PREMUL_SUM (``_make_nccl_premul_sum``, a
Python factor and a device-tensor factor), broadcast, all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single even and uneven, send/recv and
batch_isend_irecv around a ring, barrier, new_group, split_group (where torch has
it), and async work (``wait()`` and ``get_future()``), in float32, bfloat16, float16
and int64; on CUDA also an all_reduce captured in a CUDA graph and replayed 100 times
on new inputs. Inputs are small integers, so every reference (computed on the host in
float64) is exact in every dtype: results must equal it exactly, and every rank's
result bytes must equal rank 0's (a digest through the store).

``--fault``: the last rank leaves after the first all-reduce; every other rank must end
(an exception from its next collective, or torch's watchdog ending the process)
within the deadline, and its output must name the rank that left.

``--train ddp``: DDP (a 24 width^2-parameter MLP, 25.2 M at width 1024, 20 steps, fixed
seeds, each rank its own rows of one batch): every rank's parameters the same bytes, and
within 1e-6 of the same run on gloo (CUDA tensors on the GPU). ``--train fsdp``: FSDP2
(``fully_shard`` per block), 5 steps: the mean loss of each step within 1e-5 of one
process training the same model on the whole batch.

``--backend collie --device cpu`` runs the same cases on CPU tensors through
torch_collie (no GPU, no NCCL), so the script's own checks are tested where there is
no GPU (ctest torch_nccl_dropin_cpu_*).

Usage: [LD_PRELOAD=<collie>/libnccl.so.2] python3 torch_nccl_dropin.py --nranks N
           [--backend nccl|collie] [--device cuda|cpu] [--fault | --train ddp|fsdp]
           [--width W] [--timeout S]
Exit: 0 all passed, 1 a check failed, 77 skipped (no CUDA device for --device cuda).
"""

import argparse
import datetime
import hashlib
import os
import subprocess
import sys
import tempfile
import time

SIZES = (7, 70001, (1 << 20) + 3)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--nranks", type=int, default=2)
    p.add_argument("--backend", default="nccl")
    p.add_argument("--device", default="cuda")
    p.add_argument("--fault", action="store_true")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds, per rank's wait")
    p.add_argument("--train", choices=("ddp", "fsdp"), default="",
                   help="train instead: DDP (against gloo) or FSDP2 (against one process)")
    p.add_argument("--width", type=int, default=1024, help="model width for --train")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--store", default="", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    return p.parse_args()


# ---- the launcher ----------------------------------------------------------------


def run_ranks(args, backend, tmp, tag):
    """Starts the ranks with `backend`, waits for them (with a deadline), prints their
    output prefixed by rank; returns (exit codes, outputs, ranks that hung)."""
    store = os.path.join(tmp, f"store.{tag}")
    procs, logs = [], []
    for r in range(args.nranks):
        log = open(os.path.join(tmp, f"rank{r}.{tag}.log"), "w+")
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--store", store,
               "--nranks", str(args.nranks), "--backend", backend, "--device", args.device,
               "--timeout", str(args.timeout), "--width", str(args.width),
               "--out", os.path.join(tmp, f"result.{tag}.pt")]
        if args.fault:
            cmd.append("--fault")
        if args.train:
            cmd += ["--train", args.train]
        env = dict(os.environ)
        if args.fault:
            # NCCL's errors are asynchronous: with blocking wait, Work.wait() raises the
            # communicator's error instead of returning once the stream drained.
            env["TORCH_NCCL_BLOCKING_WAIT"] = "1"
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        logs.append(log)
    deadline = time.monotonic() + 4 * args.timeout + 120
    codes = [None] * args.nranks
    while time.monotonic() < deadline and any(c is None for c in codes):
        codes = [p.poll() for p in procs]
        time.sleep(0.1)
    hung = [r for r, c in enumerate(codes) if c is None]
    for r in hung:
        procs[r].kill()
        procs[r].wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    for r, text in enumerate(outputs):
        for line in text.splitlines():
            print(f"[{backend} rank {r}] {line}")
    return codes, outputs, hung


def fault_failures(args, codes, outputs, hung):
    failures = []
    gone = args.nranks - 1
    for r in range(gone):
        if r in hung:
            continue
        text = outputs[r]
        if f"rank {gone}" not in text:
            failures.append(f"rank {r}'s output does not name rank {gone}, which left")
        if "NO-FAULT" in text or ("FAULT-SEEN" not in text and codes[r] == 0):
            failures.append(f"rank {r} did not see the failure")
    return failures


def training_failures(args, tmp):
    """Compares the training run with its reference: DDP's parameters with the same run
    on gloo (1e-6), FSDP2's losses with one process training on the whole batch (1e-5)."""
    import torch

    got = torch.load(os.path.join(tmp, "result.run.pt"))
    if args.train == "ddp":
        want = torch.load(os.path.join(tmp, "result.reference.pt"))
        what, tolerance = "parameters against the same DDP run on gloo", 1e-6
    else:
        want = torch.tensor(single_process_losses(args))
        what, tolerance = "losses against one process on the whole batch", 1e-5
    diff = (got - want).abs().max().item()
    print(f"torch_nccl_dropin: {args.train}: max difference of the {what}: {diff:.3g}")
    if not diff <= tolerance:  # also catches NaN
        return [f"{args.train}: the {what} differ by {diff:.3g} (more than {tolerance})"]
    return []


def launch(args):
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: torch cannot be imported ({e})")
        return 77
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: torch sees no CUDA device")
        return 77
    with tempfile.TemporaryDirectory(prefix="torch_nccl_dropin.") as tmp:
        codes, outputs, hung = run_ranks(args, args.backend, tmp, "run")
        failures = [f"rank {r} did not end within the deadline (hung)" for r in hung]
        if any("SKIP:" in o for o in outputs) and not hung:
            print("torch_nccl_dropin: skipped")
            return 77
        if args.fault:
            failures += fault_failures(args, codes, outputs, hung)
        else:
            failures += [f"rank {r} exited with {c}" for r, c in enumerate(codes)
                         if c != 0 and r not in hung]
        if args.train == "ddp" and not failures:
            ref_codes, _, ref_hung = run_ranks(args, "gloo", tmp, "reference")
            failures += [f"gloo reference rank {r} exited with {c}"
                         for r, c in enumerate(ref_codes) if c != 0]
        if args.train and not failures:
            failures += training_failures(args, tmp)
        for f in failures:
            print(f"torch_nccl_dropin: FAILED: {f}")
        if not failures:
            cases = outputs[0].count(": ok ")
            mode = "fault" if args.fault else f"{cases} cases"
            print(f"torch_nccl_dropin: {args.nranks} ranks, {args.backend} on {args.device}: "
                  f"{mode}, #wrong 0")
        return 1 if failures else 0


# ---- training: DDP and FSDP2 --------------------------------------------------------

STEPS = {"ddp": 20, "fsdp": 5}
BATCH = 8  # samples per rank and step


def mlp(torch, width):
    """DDP's model: 24 width^2 parameters (25.2 M at the default width 1024)."""
    nn = torch.nn
    return nn.Sequential(nn.Linear(width, 4 * width), nn.ReLU(), nn.Linear(4 * width, 4 * width),
                         nn.ReLU(), nn.Linear(4 * width, width))


def blocks(torch, width, count=4):
    """FSDP2's model: residual blocks (LayerNorm, MLP), one fully_shard unit each."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up = nn.Linear(width, 2 * width)
            self.down = nn.Linear(2 * width, width)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    return nn.Sequential(*[Block() for _ in range(count)], nn.Linear(width, width))


def batches(torch, width, nranks, steps):
    """The whole batch of every step (rank r trains on rows [r * BATCH, (r + 1) * BATCH))."""
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(nranks * BATCH, width, generator=g),
             torch.randn(nranks * BATCH, width, generator=g)) for _ in range(steps)]


def single_process_losses(args):
    """FSDP2's reference: the same model and optimiser in one process, on the whole batch
    (the mean over all ranks' samples, which is what averaged gradients train)."""
    import torch

    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    model = blocks(torch, args.width // 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for x, y in batches(torch, args.width // 4, args.nranks, STEPS["fsdp"]):
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# ---- a rank -----------------------------------------------------------------------


def check_nccl_is_collie(rank, version):
    """Exits unless the only libnccl.so.2 this process maps is the one LD_PRELOAD names
    (torch loaded it when imported), so that the results are collie's, not NVIDIA's."""
    named = os.environ.get("LD_PRELOAD", "").replace(":", " ").split()
    preload = [os.path.realpath(p) for p in named]
    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "libnccl.so" in line.split()[-1]}
    mapped = {os.path.realpath(p) for p in mapped}
    if not mapped or not mapped <= set(preload):
        print(f"rank {rank}: NCCL is not collie's libnccl.so.2 given by LD_PRELOAD "
              f"(LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}, mapped: {sorted(mapped)})")
        sys.exit(1)
    print(f"rank {rank}: torch {version} runs on {sorted(mapped)[0]}")


class Rank:
    def __init__(self, args):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.args = torch, dist, args
        self.rank, self.n = args.rank, args.nranks
        if args.backend == "collie":
            import torch_collie  # noqa: F401  registers the backend
        if args.device == "cuda":
            if not torch.cuda.is_available():
                print("SKIP: torch sees no CUDA device")
                sys.exit(77)
            torch.cuda.set_device(0)
            self.device = torch.device("cuda", 0)
        else:
            self.device = torch.device("cpu")
        if args.backend == "nccl":
            check_nccl_is_collie(self.rank, torch.__version__)
        self.store = dist.FileStore(args.store, self.n)
        kwargs = {}
        if args.device == "cuda" and args.backend == "nccl":
            kwargs["device_id"] = self.device
        dist.init_process_group(args.backend, store=self.store, rank=self.rank,
                                world_size=self.n,
                                timeout=datetime.timedelta(seconds=args.timeout), **kwargs)
        self.wrong = 0
        self.cases = 0

    # Inputs: small integers, exact in every dtype and in every reduction below.
    def values(self, rank, count, salt=0):
        torch = self.torch
        idx = torch.arange(count, dtype=torch.float64)
        return torch.remainder(idx * 7 + rank * 3 + salt, 5) + 1

    def on_device(self, ref, dtype):
        return ref.to(dtype).to(self.device)

    def check(self, name, got, want, among=None, identical=True, rtol=0.0):
        """got (device tensor) must equal want (float64 host tensor) exactly; where every
        rank gets the same result (`identical`), the result bytes of every rank in
        `among` (default: all) must be the same. rtol > 0: within that relative error
        instead of exactly (an average over a rank count that is not a power of two)."""
        torch = self.torch
        self.cases += 1
        host = got.detach().to("cpu")
        if rtol > 0:
            ok = torch.allclose(host.to(torch.float64), want.to(torch.float64), rtol=rtol, atol=0)
        else:
            ok = torch.equal(host.to(torch.float64), want.to(torch.float64))
        digest = hashlib.sha256(host.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
        key = f"digest/{self.cases}"
        self.store.set(f"{key}/{self.rank}", digest)
        peers = range(self.n) if among is None else among
        same = not identical or all(
            self.store.get(f"{key}/{r}").decode() == digest for r in peers)
        if ok and same:
            print(f"rank {self.rank}: ok {name}")
            return
        self.wrong += 1
        if not ok:
            diff = (host.to(torch.float64) != want.to(torch.float64)).nonzero()
            first = diff[0].tolist() if len(diff) else "?"
            print(f"rank {self.rank}: WRONG {name}: first differing element {first}")
        if not same:
            print(f"rank {self.rank}: WRONG {name}: the ranks' result bytes differ")

    def reference_sum(self, count, salt=0):
        return sum(self.values(r, count, salt) for r in range(self.n))

    # ---- the cases ----

    def all_reduce(self, dtype, count):
        torch, dist = self.torch, self.dist
        mine = self.values(self.rank, count)
        total = self.reference_sum(count)
        ops = [("sum", dist.ReduceOp.SUM, total),
               ("max", dist.ReduceOp.MAX,
                torch.stack([self.values(r, count) for r in range(self.n)]).amax(0))]
        if dtype.is_floating_point:  # AVG of integers is not one of the cases
            ops.append(("avg", dist.ReduceOp.AVG, total / self.n))
        # sum / n is exact for a power-of-two n; otherwise NCCL (which multiplies each
        # input by 1/n before summing) and a divide after the sum round differently, by
        # at most about one unit in the last place per rank.
        exact = self.n & (self.n - 1) == 0 or not dtype.is_floating_point
        avg_rtol = 0.0 if exact else self.n * torch.finfo(dtype).eps
        if hasattr(dist, "_make_nccl_premul_sum") and dtype.is_floating_point:
            ops.append(("premul_sum(2.0)", dist._make_nccl_premul_sum(2.0), total * 2))
            factor = torch.tensor([3.0], dtype=dtype, device=self.device)
            ops.append(("premul_sum(tensor 3)", dist._make_nccl_premul_sum(factor), total * 3))
        for name, op, want in ops:
            t = self.on_device(mine, dtype)
            dist.all_reduce(t, op=op)
            self.check(f"all_reduce {name} {dtype} x{count}", t, want,
                       rtol=avg_rtol if name == "avg" else 0.0)

    def rooted_and_gathers(self, dtype, count):
        torch, dist = self.torch, self.dist
        root = 1 % self.n
        t = self.on_device(self.values(self.rank, count), dtype)
        dist.broadcast(t, src=root)
        self.check(f"broadcast root {root} {dtype} x{count}", t, self.values(root, count))

        out = torch.empty(self.n * count, dtype=dtype, device=self.device)
        dist.all_gather_into_tensor(out, self.on_device(self.values(self.rank, count), dtype))
        want = torch.cat([self.values(r, count) for r in range(self.n)])
        self.check(f"all_gather_into_tensor {dtype} x{count}", out, want)

        inp = self.on_device(self.values(self.rank, self.n * count), dtype)
        out = torch.empty(count, dtype=dtype, device=self.device)
        dist.reduce_scatter_tensor(out, inp)
        want = self.reference_sum(self.n * count)[self.rank * count:(self.rank + 1) * count]
        self.check(f"reduce_scatter_tensor {dtype} x{count}", out, want, identical=False)

    def all_to_all(self, dtype, count):
        torch, dist = self.torch, self.dist
        n, me = self.n, self.rank
        # Even: block j of rank i's input goes to rank j; the value names both.
        block = lambda i, j, c: self.values(i * n + j, c, salt=1)  # noqa: E731
        inp = torch.cat([block(me, j, count) for j in range(n)])
        out = torch.empty(n * count, dtype=dtype, device=self.device)
        dist.all_to_all_single(out, self.on_device(inp, dtype))
        self.check(f"all_to_all_single even {dtype} x{count}", out,
                   torch.cat([block(i, me, count) for i in range(n)]), identical=False)
        # Uneven: rank i sends (i + j) % 3 * count // 2 + 1 elements to rank j.
        size = lambda i, j: (i + j) % 3 * (count // 2) + 1  # noqa: E731
        inp = torch.cat([block(me, j, size(me, j)) for j in range(n)])
        out = torch.empty(sum(size(i, me) for i in range(n)), dtype=dtype, device=self.device)
        dist.all_to_all_single(out, self.on_device(inp, dtype),
                               output_split_sizes=[size(i, me) for i in range(n)],
                               input_split_sizes=[size(me, j) for j in range(n)])
        self.check(f"all_to_all_single uneven {dtype} x{count}", out,
                   torch.cat([block(i, me, size(i, me)) for i in range(n)]), identical=False)

    def point_to_point(self, dtype, count):
        torch, dist = self.torch, self.dist
        if self.n < 2:
            return
        nxt, prv = (self.rank + 1) % self.n, (self.rank - 1) % self.n
        send = self.on_device(self.values(self.rank, count, salt=2), dtype)
        recv = torch.empty(count, dtype=dtype, device=self.device)
        # Even ranks send first, odd ranks receive first: no cycle of blocking sends.
        if self.rank % 2 == 0:
            dist.send(send, nxt)
            dist.recv(recv, prv)
        else:
            dist.recv(recv, prv)
            dist.send(send, nxt)
        self.check(f"send/recv ring {dtype} x{count}", recv, self.values(prv, count, salt=2),
                   identical=False)
        recv = torch.empty(count, dtype=dtype, device=self.device)
        ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        self.check(f"batch_isend_irecv ring {dtype} x{count}", recv,
                   self.values(prv, count, salt=2), identical=False)

    def groups_and_async(self):
        torch, dist = self.torch, self.dist
        dtype = torch.float32
        count = 4099
        dist.barrier()
        self.cases += 1
        print(f"rank {self.rank}: ok barrier")
        # A group of the even ranks (every rank calls new_group).
        evens = list(range(0, self.n, 2))
        group = dist.new_group(evens)
        if self.rank in evens:
            t = self.on_device(self.values(self.rank, count), dtype)
            dist.all_reduce(t, group=group)
            self.check("all_reduce in new_group(evens)", t,
                       sum(self.values(r, count) for r in evens), among=evens)
        else:
            self.cases += 1  # keep the digest keys aligned across ranks
        if self.args.backend == "nccl" and hasattr(dist, "split_group"):
            halves = [list(range(0, (self.n + 1) // 2)), list(range((self.n + 1) // 2, self.n))]
            halves = [h for h in halves if h]
            sub = dist.split_group(split_ranks=halves)
            mine = next(h for h in halves if self.rank in h)
            t = self.on_device(self.values(self.rank, count), dtype)
            dist.all_reduce(t, group=sub)
            self.check("all_reduce in split_group(halves)", t,
                       sum(self.values(r, count) for r in mine), among=mine)
        # Async: wait() and the future.
        t = self.on_device(self.values(self.rank, count), dtype)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        self.check("all_reduce async wait()", t, self.reference_sum(count))
        t = self.on_device(self.values(self.rank, count), dtype)
        fut = dist.all_reduce(t, async_op=True).get_future()
        result = fut.wait()
        got = result[0] if isinstance(result, (list, tuple)) else t
        self.check("all_reduce async get_future()", got, self.reference_sum(count))

    def cuda_graph(self, replays=100):
        """An all_reduce captured in a CUDA graph (torch.cuda.graph, after a warm-up on a
        side stream as torch documents), replayed `replays` times, each on new inputs
        copied into the captured tensor: every replay's result exact."""
        torch, dist = self.torch, self.dist
        count = 70001
        static = self.on_device(self.values(self.rank, count), torch.float32)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                dist.all_reduce(static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            dist.all_reduce(static)
        bad = []
        for k in range(replays):
            static.copy_(self.on_device(self.values(self.rank, count, salt=k), torch.float32))
            graph.replay()
            got = static.to("cpu", torch.float64)
            if not torch.equal(got, self.reference_sum(count, salt=k)):
                bad.append(k)
        if bad:
            self.wrong += 1
            print(f"rank {self.rank}: WRONG all_reduce in a CUDA graph: replays {bad[:8]} "
                  f"of {replays} wrong")
        self.check(f"all_reduce in a CUDA graph, {replays} replays", static,
                   self.reference_sum(count, salt=replays - 1))

    def run(self):
        torch = self.torch
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
            for count in SIZES:
                self.all_reduce(dtype, count)
                self.rooted_and_gathers(dtype, count)
                self.all_to_all(dtype, count)
                self.point_to_point(dtype, count)
        self.groups_and_async()
        if self.args.device == "cuda":
            self.cuda_graph()
            torch.cuda.synchronize()
        print(f"rank {self.rank}: {self.cases} cases, #wrong {self.wrong}")
        self.dist.destroy_process_group()
        return 1 if self.wrong else 0

    def finish_training(self, name, result):
        """Every rank's final parameters must be the same bytes; rank 0 keeps `result`."""
        torch = self.torch
        # FSDP2's parameters are sharded DTensors: full_tensor() gathers each (collective).
        full = [p.full_tensor() if hasattr(p, "full_tensor") else p
                for p in self.trained.parameters()]
        flat = torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in full])
        self.check(f"{name}: every rank's parameters", flat, flat)
        if self.rank == 0:
            torch.save(result, self.args.out)
        print(f"rank {self.rank}: {self.cases} cases, #wrong {self.wrong}")
        self.dist.destroy_process_group()
        return 1 if self.wrong else 0

    def train_ddp(self):
        torch = self.torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(0)
        model = mlp(torch, self.args.width).to(self.device)
        ddp = DDP(model, device_ids=[0] if self.device.type == "cuda" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        rows = slice(self.rank * BATCH, (self.rank + 1) * BATCH)
        for x, y in batches(torch, self.args.width, self.n, STEPS["ddp"]):
            loss = torch.nn.functional.mse_loss(ddp(x[rows].to(self.device)),
                                                y[rows].to(self.device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        self.trained = model
        params = sum(p.numel() for p in model.parameters())
        print(f"rank {self.rank}: DDP trained {params} parameters for {STEPS['ddp']} steps")
        flat = torch.cat([p.detach().reshape(-1).to("cpu", torch.float64)
                          for p in model.parameters()])
        return self.finish_training("ddp", flat)

    def train_fsdp(self):
        torch, dist = self.torch, self.dist
        from torch.distributed.fsdp import fully_shard

        width = self.args.width // 4
        torch.manual_seed(0)
        model = blocks(torch, width).to(self.device)
        for block in model[:-1]:
            fully_shard(block)
        fully_shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        rows = slice(self.rank * BATCH, (self.rank + 1) * BATCH)
        losses = []
        for x, y in batches(torch, width, self.n, STEPS["fsdp"]):
            loss = torch.nn.functional.mse_loss(model(x[rows].to(self.device)),
                                                y[rows].to(self.device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.SUM)
            losses.append(mean.item() / self.n)
        print(f"rank {self.rank}: FSDP2 losses {[round(v, 6) for v in losses]}")
        self.trained = model
        return self.finish_training("fsdp", torch.tensor(losses))

    def fault(self):
        torch, dist = self.torch, self.dist
        t = self.on_device(self.values(self.rank, 1024), torch.float32)
        dist.all_reduce(t)
        self.check("all_reduce before the fault", t, self.reference_sum(1024))
        if self.args.device == "cuda":
            torch.cuda.synchronize()
        if self.rank == self.n - 1:
            print(f"rank {self.rank}: leaving")
            sys.stdout.flush()
            os._exit(0)
        start = time.monotonic()
        try:
            # Two calls: the first may only end on the device (its kernels give up at the
            # deadline); the communicator then reports the error to the next one.
            for _ in range(2):
                t = self.on_device(self.values(self.rank, 1 << 20), torch.float32)
                dist.all_reduce(t, async_op=True).wait()
                if self.args.device == "cuda":
                    torch.cuda.synchronize()
            print(f"rank {self.rank}: NO-FAULT: the all-reduces after the last rank left returned")
            return 1
        except Exception as e:  # noqa: BLE001  torch raises DistBackendError / RuntimeError
            print(f"rank {self.rank}: FAULT-SEEN after {time.monotonic() - start:.1f} s: "
                  f"{type(e).__name__}: {e}")
            sys.stdout.flush()
            os._exit(0)  # the group cannot be torn down cleanly with a peer gone


def main():
    args = parse()
    if args.rank < 0:
        return launch(args)
    rank = Rank(args)
    if args.fault:
        return rank.fault()
    if args.train == "ddp":
        return rank.train_ddp()
    if args.train == "fsdp":
        return rank.train_fsdp()
    return rank.run()


if __name__ == "__main__":
    sys.exit(main())
