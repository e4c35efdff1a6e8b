#!/usr/bin/env python3
"""Paired A/B of two collie libraries' blocking point-to-point ping-pong, beside Open MPI's.

Usage: bench/p2p_ab.py --a LIBDIR_A --b LIBDIR_B [--rounds 5] [--sizes 8,4096,65536,1048576]
                       [--transports shm,tcp] [--tag] [--no-mpi] [--json FILE]

LIBDIR_A and LIBDIR_B are directories holding a libcollie.so.0 (a build directory); both
sides run this tree's `build/bench/collie_p2p_pingpong` through `build/bin/collie run -n 2`
with LD_LIBRARY_PATH set to their directory (the binaries' RUNPATH gives way to it). A
round runs every (transport, size) cell with A and with B, in an order that alternates from
round to round, and, unless --no-mpi, the same ping-pong over Open MPI (`mpirun -np 2`,
MPI_Send/MPI_Recv, compiled here with mpicc) as the reference a user would pick. Each cell is
the benchmark's median one-way time in microseconds; the table gives the median over rounds
of A, B and MPI, and the paired B/A: the median over rounds of B/A taken within one round.
--tag runs collie's tagged ping-pong (`--tag 0`) instead of the untagged one.
--overlap-every K --compute-us C passes those to the benchmark (every K-th send is waited
for only after C us of compute) and compares, instead of the one-way time, how long those
sends took to arrive (rank 1's median); Open MPI is not run then.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MPI_PINGPONG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int bytes = atoi(argv[1]), iters = 2000, warmup = 200;
  char* buf = calloc(bytes > 0 ? bytes : 1, 1);
  double times[10];
  for (int batch = -1; batch < 10; ++batch) {
    const int n = batch < 0 ? warmup : iters / 10;
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < n; ++i) {
      if (rank == 0) {
        MPI_Send(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, bytes, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, bytes, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
      }
    }
    if (batch >= 0) times[batch] = (MPI_Wtime() - start) / n / 2 * 1e6;
  }
  if (rank == 0) {
    for (int i = 0; i < 10; ++i)
      for (int j = i + 1; j < 10; ++j)
        if (times[j] < times[i]) { double t = times[i]; times[i] = times[j]; times[j] = t; }
    printf("one way median %.2f us\n", (times[4] + times[5]) / 2);
  }
  MPI_Finalize();
  return 0;
}
"""


def run_collie(libdir, transport, size, tag, overlap=None):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(libdir), COLLIE_TRANSPORT=transport)
    cmd = [os.path.join(ROOT, "build/bin/collie"), "run", "-n", "2", "--",
           os.path.join(ROOT, "build/bench/collie_p2p_pingpong"), "--bytes", str(size)]
    if tag:
        cmd += ["--tag", "0"]
    metric = r"one way median ([0-9.]+) us"
    if overlap:
        cmd += ["--overlap-every", str(overlap[0]), "--compute-us", str(overlap[1])]
        metric = r"arrived after median ([0-9.]+) us"
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    m = re.search(metric, out.stdout + out.stderr)
    if not m:
        sys.exit("p2p_ab: no result from %s:\n%s%s" % (" ".join(cmd), out.stdout, out.stderr))
    return float(m.group(1))


def build_mpi(workdir):
    src = os.path.join(workdir, "mpi_pingpong.c")
    exe = os.path.join(workdir, "mpi_pingpong")
    with open(src, "w") as f:
        f.write(MPI_PINGPONG)
    subprocess.run(["mpicc", "-O2", src, "-o", exe], check=True)
    return exe


def run_mpi(exe, size):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", exe, str(size)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = re.search(r"one way median ([0-9.]+) us", out.stdout)
    if not m:
        sys.exit("p2p_ab: no result from mpirun:\n%s%s" % (out.stdout, out.stderr))
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", required=True)
    p.add_argument("--b", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sizes", default="8,4096,65536,1048576")
    p.add_argument("--transports", default="shm,tcp")
    p.add_argument("--tag", action="store_true")
    p.add_argument("--no-mpi", action="store_true")
    p.add_argument("--overlap-every", type=int, default=0)
    p.add_argument("--compute-us", type=int, default=2000)
    p.add_argument("--json")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    overlap = None
    if args.overlap_every > 0:
        if min(sizes) < 8:
            p.error("--overlap-every needs sizes of at least 8 bytes (the send carries its time)")
        overlap = (args.overlap_every, args.compute_us)
        args.no_mpi = True
    transports = args.transports.split(",")
    cells = {}
    with tempfile.TemporaryDirectory() as workdir:
        mpi = None if args.no_mpi else build_mpi(workdir)
        for rnd in range(args.rounds):
            for transport in transports:
                for size in sizes:
                    cell = cells.setdefault((transport, size), {"a": [], "b": [], "mpi": []})
                    order = ("a", "b") if rnd % 2 == 0 else ("b", "a")
                    for side in order:
                        libdir = args.a if side == "a" else args.b
                        cell[side].append(run_collie(libdir, transport, size, args.tag, overlap))
                    if mpi and transport == "shm":
                        cell["mpi"].append(run_mpi(mpi, size))
            print("round %d of %d done" % (rnd + 1, args.rounds), file=sys.stderr)
    if overlap:
        print("arrival of every %d-th send, waited for after %d us of compute:" % overlap)
    print("| transport | bytes | A us | B us | B/A paired | Open MPI us (shm) |")
    print("|---|---|---|---|---|---|")
    rows = []
    for (transport, size), cell in cells.items():
        paired = statistics.median(b / a for a, b in zip(cell["a"], cell["b"]))
        mpi_us = statistics.median(cell["mpi"]) if cell["mpi"] else None
        rows.append({"transport": transport, "bytes": size, "a": cell["a"], "b": cell["b"],
                     "mpi": cell["mpi"], "paired": paired})
        print("| %s | %d | %.2f | %.2f | %.2f | %s |" % (
            transport, size, statistics.median(cell["a"]), statistics.median(cell["b"]), paired,
            "%.2f" % mpi_us if mpi_us is not None else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"a": args.a, "b": args.b, "tag": args.tag,
                       "overlap_every": args.overlap_every,
                       "compute_us": args.compute_us if overlap else None, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
