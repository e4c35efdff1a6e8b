#!/usr/bin/env python3
"""Compares collie's all-reduce (or all-to-all, gather, scatter) with its peers, sizes 8 B .. 256 MiB.

Usage: bench/compare.py [--collective allreduce|alltoall|gather|scatter] [--in-place]
                        [--ranks N] [--transport shm|tcp] [--netns] [--build DIR]
                        [--trials N] [--max BYTES] [--out DIR]

--collective alltoall|gather|scatter (root 0) compares `collie perf` of it with
MPI_Alltoall / MPI_Gather / MPI_Scatter of Open MPI and MPICH (bench/mpi_exchange.c, built
with each one's mpicc), out of place (with --in-place, all-to-all only: collie perf's
in-place column, send == recv, against MPI_Alltoall with MPI_IN_PLACE), sizes as
nccl-tests count them (the larger buffer; each rank's block is size / nranks), busbw =
size / time * (n-1)/n; Gloo, PyTorch and the ceiling are all-reduce only and left out.
--ranks (default 2) sets the number of ranks (not with --netns).

  shm    2 local ranks: collie (FIFO ring / one-shot board), collie -R 1 (registered
         buffers, single copy), Open MPI (btl self,vader), MPICH (ch4:ucx, shared
         memory), Gloo (its only transport, tcp over loopback), PyTorch's gloo backend.
  tcp    2 ranks over TCP: loopback, or with --netns two network namespaces joined by a
         veth pair (10.213.99.1 and .2; made and deleted by this script, needs root).
         Open MPI uses btl self,tcp, MPICH UCX_TLS=tcp (between namespaces: MPMD
         ranks wrapped in `ip netns exec`, and MPIR_CVAR_NOLOCAL=1, else it uses shared
         memory between the namespaces); Open MPI is skipped with --netns (its ranks
         cannot reach mpirun's PMIx server from another namespace).

Each library runs its whole sweep --trials times (default 3); a run's figure per size
is the slowest rank's time per call (collie perf: median over 20 batches of the
batch's average; MPI: median over 5 batches; Gloo: average over a batch of calls), and
the table shows the median over runs of the in-place all-reduce of floats (sum).
busbw = size / time * 2(n-1)/n. Every trial first measures the ceiling (shm: bench's
roofline, the dual-write all-reduce bound; tcp: bench's socket_bidir both ways between
the two ends), and the table gives collie's busbw as a fraction of its median from
1 MiB up. Writes results.json, table.md and busbw.png (matplotlib) or busbw.svg into
--out; --doc FILE also replaces FILE's `<!-- compare:SCENARIO -->` block with the date,
the command and the table (docs/performance.md).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

N = 2
# Warm-ups, every library alike: small sizes run thousands of calls (a launch's first tens
# of milliseconds can run two ranks on one core until the scheduler spreads them); 256 KiB
# to 4 MiB run 20, past the 12 calls in which collie times cma against the ring
# (docs/decisions/measured-single-copy.md).
SWEEPS = [  # (min, max, factor, iters, warmup): together 8 B, 16 B .. 256 MiB by 4
    (8, 8, 2, 2000, 2000),
    (16, 64 << 10, 4, 300, 1000),
    (256 << 10, 4 << 20, 4, 6, 20),
    (16 << 20, 256 << 20, 4, 6, 2),
]
NETNS_ADDRS = ["10.213.99.1", "10.213.99.2"]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=1800):
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return proc.stdout


def sweeps(max_bytes):
    # Every size holds at least one float per rank (collie perf refuses a sweep with
    # none: 8 B on 4 ranks failed the whole collie run).
    for lo, hi, f, iters, warm in SWEEPS:
        while lo < 4 * N and lo <= hi:
            lo *= f
        if lo <= max_bytes and lo <= hi:
            yield lo, min(hi, max_bytes), f, iters, warm


def parse_size_lines(text, column):
    """'size t1 [t2]' lines of mpi_allreduce / gloo_allreduce -> {size: time_us}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and not line.startswith("#") and len(parts) > column:
            out[int(parts[0])] = float(parts[column])
    return out


class Netns:
    """Two namespaces joined by a veth pair; deleted on close, exit and signals."""

    def __init__(self):
        self.names = [f"collie-perf-{os.getpid()}-{i}" for i in range(N)]
        self.made = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: (self.close(), sys.exit(130)))
        try:
            for name in self.names:
                subprocess.run(["ip", "netns", "add", name], check=True)
                self.made.append(name)
                subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
            subprocess.run(["ip", "-n", self.names[0], "link", "add", "eth0", "type", "veth",
                            "peer", "name", "eth0", "netns", self.names[1]], check=True)
            for name, addr in zip(self.names, NETNS_ADDRS):
                subprocess.run(["ip", "-n", name, "addr", "add", addr + "/24", "dev", "eth0"],
                               check=True)
                subprocess.run(["ip", "-n", name, "link", "set", "eth0", "up"], check=True)
        except Exception:
            self.close()
            raise

    def prefix(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    def close(self):
        for name in self.made:
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
        self.made = []


def run_ranks(cmds, envs, timeout=1800):
    """Starts one process per rank, waits for all; returns rank 0's stdout. A rank that
    fails ends the others at once (they would wait for it until the timeout). The ranks'
    output is read once they exit: it must fit a pipe (a perf table does)."""
    procs = [subprocess.Popen(c, env=dict(os.environ, **e), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for c, e in zip(cmds, envs)]
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed:
                raise RuntimeError(f"{failed[0].args[0]} rank failed ({failed[0].returncode}): "
                                   f"{failed[0].stderr.read()[-800:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmds[0][0]} ranks did not finish in {timeout} s")
            time.sleep(0.05)
        results = [p.communicate() for p in procs]  # all exited: (stdout, stderr)
        for p, (_, err) in zip(procs, results):
            if p.returncode != 0:
                raise RuntimeError(f"{p.args[0]} rank failed ({p.returncode}): {err[-800:]}")
        outs = [out for out, _ in results]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs[0]


class Bench:
    def __init__(self, args):
        self.args = args
        self.build = args.build
        self.collie = os.path.join(self.build, "bin", "collie")
        self.netns = None
        self.port = 29600 + os.getpid() % 1000

    # --- collie ---------------------------------------------------------------------
    def collie_run(self, registered=False):
        results = {}
        coll = self.args.collective
        # The exchanges are compared out of place, all-to-all in place with --in-place.
        column = "in_place" if coll == "allreduce" or self.args.in_place else "out_of_place"
        for lo, hi, f, iters, warm in sweeps(self.args.max):
            with tempfile.TemporaryDirectory() as tmp:
                js = os.path.join(tmp, "perf.json")
                perf = [self.collie, "perf", coll, "-b", str(lo), "-e", str(hi), "-f",
                        str(f), "-n", str(iters), "-w", str(warm), "-c", "0"]
                if registered:
                    perf += ["-R", "1"]
                if self.args.transport == "tcp":
                    perf += ["--transport", "tcp"]
                if self.netns:
                    self.port += 1
                    secret = os.urandom(16).hex()
                    cmds, envs = [], []
                    for i in range(N):
                        cmds.append(self.netns.prefix(i) + perf + (["--json", js] if i == 0 else []))
                        envs.append({"RANK": str(i), "WORLD_SIZE": str(N), "LOCAL_RANK": "0",
                                     "MASTER_ADDR": NETNS_ADDRS[0], "MASTER_PORT": str(self.port),
                                     "COLLIE_JOB_SECRET": secret, "COLLIE_HOST_ID": f"ns{i}",
                                     "COLLIE_SOCKET_IFNAME": "eth0"})
                    run_ranks(cmds, envs)
                else:
                    run([self.collie, "run", "-n", str(N), "--"] + perf + ["--json", js])
                with open(js) as fh:
                    for row in json.load(fh)["results"]:
                        results[row["size"]] = row[column]["median_us"]
        return results

    # --- the ceiling, measured in every trial ------------------------------------------
    def ceiling(self):
        """All-reduce only (None for the exchanges). shm: bench/roofline's dual-write bound (busbw of a 2-rank single-copy
        all-reduce with streaming stores); tcp: bench/socket_bidir's rate per direction
        between the two ends (a 2-rank ring's busbw is the per-direction rate of the same
        socket work). Returns {"gbps", "what", ...} or None when the tool is not built."""
        if self.args.collective != "allreduce":
            return None
        if self.args.transport == "shm":
            tool = os.path.join(self.build, "bench", "roofline")
            if not os.path.exists(tool):
                return None
            doc = json.loads(run([tool, "--json", "--iters", "7", "--warmup", "2"]))
            return {"gbps": doc["dualwrite_busbw_gbps"], "what": "dual-write",
                    "placement": doc["placement"], "pingpong_ns": doc["pingpong_ns"],
                    "copy_gbps": doc["copy_gbps"]}
        tool = os.path.join(self.build, "bench", "socket_bidir")
        if not os.path.exists(tool):
            return None
        self.port += 1
        host = NETNS_ADDRS[0] if self.netns else "127.0.0.1"
        cmds = [(self.netns.prefix(i) if self.netns else []) +
                [tool, "listen" if i == 0 else "connect", host, str(self.port), "32", "8",
                 "shared"] for i in range(N)]
        out = run_ranks(cmds, [{}] * N, timeout=300)
        gbps = float(out.split(":")[-1].split()[0])
        return {"gbps": gbps, "what": "socket both ways"}

    # --- MPI ------------------------------------------------------------------------
    def mpi_binary(self, flavour):
        name = "mpi_allreduce" if self.args.collective == "allreduce" else "mpi_exchange"
        path = os.path.join(self.build, "bench", f"{name}_{flavour}")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.c")
        if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(src):
            run([f"mpicc.{flavour}", "-O2", "-o", path, src])
        return path

    def mpi_run(self, flavour):
        if self.netns and flavour == "openmpi":
            raise RuntimeError("skipped: Open MPI ranks in other network namespaces cannot reach "
                               "mpirun's PMIx server (MPI_Init: 'OPAL ERROR: Unreachable')")
        binary = self.mpi_binary(flavour)
        results = {}
        for lo, hi, f, iters, warm in sweeps(self.args.max):
            bench = [binary, "-b", str(lo), "-e", str(hi), "-f", str(f), "-n", str(iters),
                     "-w", str(warm), "-t", "1"]
            if self.args.collective != "allreduce":
                bench += ["-c", self.args.collective] + (["-i"] if self.args.in_place else [])
            if flavour == "openmpi":
                btl = "self,vader" if self.args.transport == "shm" else "self,tcp"
                cmd = ["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", str(N),
                       "--mca", "btl", btl, "--mca", "pml", "ob1"] + bench
                env = {}
            elif self.netns:
                # Hydra hands PMI to its ranks through an inherited fd, so MPMD ranks
                # wrapped in `ip netns exec` still join.
                cmd = ["mpirun.mpich"]
                for i in range(N):
                    cmd += (["-np", "1"] + self.netns.prefix(i) + bench + ([":"] if i < N - 1 else []))
                # The namespaces share a hostname, so MPICH would treat the ranks as
                # local and talk through its own shared memory (5.5 us at 64 B against
                # 12 us over the veth): NOLOCAL makes it use the network like the others.
                env = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0",
                       "MPIR_CVAR_NOLOCAL": "1"}
            else:
                cmd = ["mpirun.mpich", "-np", str(N)] + bench
                env = {"UCX_TLS": "tcp,self"} if self.args.transport == "tcp" else {}
            # all-reduce: the in-place column; the exchanges print one (out of place, or
            # all-to-all in place with -i)
            results.update(parse_size_lines(run(cmd, env),
                                            2 if self.args.collective == "allreduce" else 1))
        return results

    # --- Gloo -----------------------------------------------------------------------
    def gloo_run(self):
        if self.args.collective != "allreduce":
            raise RuntimeError("skipped: bench/gloo_allreduce measures all-reduce only")
        binary = os.path.join(self.build, "bench", "gloo_allreduce")
        if not os.path.exists(binary):
            raise RuntimeError("skipped: build/bench/gloo_allreduce not built (apt-get install "
                               "libgloo-dev, re-run cmake, ninja gloo_allreduce)")
        results = {}
        for lo, hi, f, iters, warm in sweeps(self.args.max):
            with tempfile.TemporaryDirectory() as store:
                cmds = []
                for i in range(N):
                    host = NETNS_ADDRS[i] if self.netns else "127.0.0.1"
                    pre = self.netns.prefix(i) if self.netns else []
                    cmds.append(pre + [binary, "-r", str(i), "-s", str(N), "-p", store, "-h", host,
                                       "-b", str(lo), "-e", str(hi), "-f", str(f), "-n",
                                       str(iters), "-w", str(warm), "-t", "1"])
                results.update(parse_size_lines(run_ranks(cmds, [{}] * N), 1))
        return results

    def torch_python(self):
        """This interpreter if it has torch, else the project's venv (scripts/python-env.sh)."""
        venv = os.path.expanduser("~/.cache/collie/venv/bin/python")
        for python in (sys.executable, venv):
            if os.path.exists(python) and subprocess.run(
                    [python, "-c", "import torch.distributed"], capture_output=True).returncode == 0:
                return python
        raise RuntimeError("skipped: PyTorch is not installed (scripts/python-env.sh makes a venv "
                           "with it)")

    def torch_run(self):
        if self.args.collective != "allreduce":
            raise RuntimeError("skipped: bench/torch_allreduce.py measures all-reduce only")
        python = self.torch_python()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_allreduce.py")
        results = {}
        self.port += 1
        for lo, hi, f, iters, warm in sweeps(self.args.max):
            cmds, envs = [], []
            for i in range(N):
                pre = self.netns.prefix(i) if self.netns else []
                cmds.append(pre + [python, script, str(lo), str(hi), str(f), str(iters),
                                   str(warm)])
                env = {"RANK": str(i), "WORLD_SIZE": str(N),
                       "MASTER_ADDR": NETNS_ADDRS[0] if self.netns else "127.0.0.1",
                       "MASTER_PORT": str(self.port)}
                if self.netns:  # else gloo resolves the shared hostname to 127.0.0.1
                    env["GLOO_SOCKET_IFNAME"] = "eth0"
                envs.append(env)
            self.port += 1
            results.update(parse_size_lines(run_ranks(cmds, envs), 1))
        return results


COLLECTIVE = "allreduce"


def busbw(size, us):
    """nccl-tests' busbw: 2(n-1)/n for all-reduce, (n-1)/n for the exchanges."""
    factor = 2 * (N - 1) / N if COLLECTIVE == "allreduce" else (N - 1) / N
    return size / (us * 1e-6) * factor / 1e9 if us else 0.0


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def table(results, names, ceiling_gbps=None):
    """Median us per library, each peer's time over collie's and, from 1 MiB up, the
    collie columns' busbw as a fraction of the ceiling measured in the same run."""
    sizes = sorted({s for r in results.values() for s in r})
    ours = [n for n in names if n.startswith("collie")] if ceiling_gbps else []
    head = ("| size | " + " | ".join(f"{n} us" for n in names) + " | " +
            " | ".join(f"{n}/collie" for n in names[1:]) +
            "".join(f" | {n} of ceiling" for n in ours) + " |")
    lines = [head, "|" + "---|" * (2 * len(names) + len(ours))]
    for s in sizes:
        base = results[names[0]].get(s)
        cells = [f"{results[n][s]:.2f}" if s in results[n] else "-" for n in names]
        ratios = [f"{results[n][s] / base:.2f}" if base and s in results[n] else "-"
                  for n in names[1:]]
        roof = [f"{busbw(s, results[n][s]) / ceiling_gbps:.2f}"
                if s >= 1 << 20 and s in results[n] else "" for n in ours]
        lines.append(f"| {human(s)} | " + " | ".join(cells + ratios + roof) + " |")
    return "\n".join(lines)


def splice(doc_path, scenario, block):
    """Replaces the lines between '<!-- compare:SCENARIO -->' and
    '<!-- /compare:SCENARIO -->' in doc_path with block."""
    begin, end = f"<!-- compare:{scenario} -->", f"<!-- /compare:{scenario} -->"
    text = open(doc_path).read()
    if begin not in text or end not in text:
        raise SystemExit(f"compare.py: {doc_path} has no {begin} ... {end} block")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(doc_path, "w") as fh:
        fh.write(head + begin + "\n" + block.rstrip() + "\n" + end + tail)


def plot(results, names, title, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_svg(results, names, title, out)
    fig, ax = plt.subplots(figsize=(8, 5))
    for n in names:
        sizes = sorted(results[n])
        ax.plot(sizes, [busbw(s, results[n][s]) for s in sizes], marker="o", label=n)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    path = os.path.join(out, "busbw.png")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def plot_svg(results, names, title, out):
    import math
    w, h, m = 800, 500, 60
    pts = [(s, busbw(s, t)) for n in names for s, t in results[n].items() if t]
    xs = [math.log2(s) for s, _ in pts]
    ys = [math.log10(max(b, 1e-6)) for _, b in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys) + 1e-9
    sx = lambda v: m + (math.log2(v) - x0) / (x1 - x0 or 1) * (w - 2 * m)
    sy = lambda v: h - m - (math.log10(max(v, 1e-6)) - y0) / (y1 - y0) * (h - 2 * m)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">',
             f'<text x="{w / 2}" y="20" text-anchor="middle">{title}</text>',
             f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">size (bytes, log2)</text>',
             f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})">busbw GB/s (log)</text>']
    for i, n in enumerate(names):
        c = colors[i % len(colors)]
        line = " ".join(f"{sx(s):.1f},{sy(busbw(s, t)):.1f}" for s, t in sorted(results[n].items()))
        parts.append(f'<polyline fill="none" stroke="{c}" points="{line}"/>')
        parts.append(f'<text x="{m + 10}" y="{m + 18 * i}" fill="{c}">{n}</text>')
    parts.append("</svg>")
    path = os.path.join(out, "busbw.svg")
    with open(path, "w") as fh:
        fh.write("\n".join(parts))
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collective", choices=["allreduce", "alltoall", "gather", "scatter"],
                   default="allreduce")
    p.add_argument("--in-place", action="store_true",
                   help="all-to-all in place (send == recv; MPI_IN_PLACE for the MPIs)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--transport", choices=["shm", "tcp"], default="shm")
    p.add_argument("--netns", action="store_true", help="tcp between two network namespaces")
    p.add_argument("--build", default="build")
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--max", type=lambda t: int(t[:-1]) << {"K": 10, "M": 20}[t[-1]]
                   if t[-1] in "KM" else int(t), default=256 << 20)
    p.add_argument("--out", default=None)
    p.add_argument("--doc", default=None,
                   help="also write the table into this markdown file's compare:SCENARIO block")
    args = p.parse_args()
    if args.in_place and args.collective != "alltoall":
        p.error("--in-place compares all-to-all only (the all-reduce is in place already)")
    if args.netns and args.transport != "tcp":
        p.error("--netns needs --transport tcp")
    if args.ranks < 2 or (args.netns and args.ranks != 2):
        p.error("--ranks must be at least 2 (and 2 with --netns)")
    global N, COLLECTIVE
    N, COLLECTIVE = args.ranks, args.collective
    scenario = "shm" if args.transport == "shm" else ("tcp-netns" if args.netns else "tcp-loopback")
    if args.collective != "allreduce":
        scenario = f"{args.collective}{'-inplace' if args.in_place else ''}-{scenario}-n{N}"
    out = args.out or os.path.join("bench", "results", scenario)
    os.makedirs(out, exist_ok=True)
    bench = Bench(args)
    libs = [("collie", bench.collie_run)]
    if args.transport == "shm" and args.collective == "allreduce":
        libs.append(("collie-R1", lambda: bench.collie_run(registered=True)))
    libs += [("openmpi", lambda: bench.mpi_run("openmpi")), ("mpich", lambda: bench.mpi_run("mpich")),
             ("gloo", bench.gloo_run), ("torch-gloo", bench.torch_run)]
    try:
        if args.netns:
            bench.netns = Netns()
        runs = {name: [] for name, _ in libs}
        skipped = {}
        ceilings = []
        for trial in range(args.trials):
            ceiling = bench.ceiling()
            if ceiling:
                ceilings.append(ceiling)
                log(f"[trial {trial + 1}/{args.trials}] ceiling {ceiling}")
            for name, fn in libs:
                if name in skipped:
                    continue
                log(f"[trial {trial + 1}/{args.trials}] {name} ({scenario})")
                try:
                    runs[name].append(fn())
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    skipped[name] = str(err)
                    log(f"  {name}: {err}")
    finally:
        if bench.netns:
            bench.netns.close()
    results = {}
    for name, trials in runs.items():
        if trials:
            sizes = set.intersection(*(set(t) for t in trials))
            results[name] = {s: statistics.median(t[s] for t in trials) for s in sizes}
    names = [n for n, _ in libs if n in results]
    load = open("/proc/loadavg").read().split()[:3]
    ceiling_gbps = statistics.median(c["gbps"] for c in ceilings) if ceilings else None
    ceiling_text = "no ceiling measured (bench/roofline or bench/socket_bidir not built)"
    if ceilings:
        ceiling_text = (f"ceiling ({ceilings[0]['what']}, median of the trials): "
                        f"{ceiling_gbps:.2f} GB/s busbw")
        if "placement" in ceilings[0]:
            ceiling_text += ("; vCPU placement per trial (cache-line round trip): " +
                             ", ".join(f"{c['placement']} ({c['pingpong_ns']:.0f} ns)"
                                       for c in ceilings))
    what = ("float sum in place" if args.collective == "allreduce" else
            f"{args.collective} of floats {'in' if args.in_place else 'out of'} place")
    md = (f"{scenario}, {N} ranks, {what}, median of {args.trials} runs, "
          f"load average {' '.join(load)} at the end; {ceiling_text}\n\n" +
          table(results, names, ceiling_gbps))
    for name, why in skipped.items():
        md += f"\n\n{name}: {why}"
    print(md)
    if args.doc:
        command = "bench/compare.py " + " ".join(sys.argv[1:])
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), "?")
        splice(args.doc, scenario, f"Measured {when} on {os.cpu_count()} vCPUs ({cpu}) by\n"
               f"`{command}`.\n\n{md}")
    with open(os.path.join(out, "table.md"), "w") as fh:
        fh.write(md + "\n")
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump({"scenario": scenario, "load": load, "ceilings": ceilings, "results": results,
                   "skipped": skipped},
                  fh, indent=1)
    log("plot:", plot(results, names, f"{args.collective} busbw, {scenario}, {N} ranks", out))


if __name__ == "__main__":
    main()
