#!/usr/bin/env python3
"""Where one large all-reduce's time goes, per path, with the machine's ceiling in the same run.

Usage: bench/phases.py [--build build] [--bytes 64M] [--iters 30]

For each path (heap buffers out of place and in place: cross-memory attach; registered
allocShared buffers out of place and in place: direct) it runs bench/allreduce_loop on
2 ranks under `perf record -e cpu-clock` (a software clock: the VM has no hardware
counters) and sorts the samples of both ranks into phases by symbol: page pinning and
unpinning (get_user_pages and friends, inside process_vm_readv/writev), the kernel's
copies out of the peer (pull) and into it (push), the reduction kernel, user-space
copies (memcpy), first-touch page faults (the buffers' fill, outside the calls), waits
(scheduler, futex, the board's meetings) and the rest, as shares of all CPU samples
of both ranks. The time per call is the loop's own (slowest rank's median).
bench/roofline runs first (dual-write bound, streaming copy, cache-line ping-pong: the
vCPU placement) and each path's busbw is given as a fraction of its dual-write figure.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PHASES = [
    ("pin/unpin pages", ["get_user_pages", "follow_page", "try_grab", "unpin", "gup_", "pte",
                         "vm_normal_page", "folio_mark", "mt_find", "pin_user", "find_vma",
                         "mark_page_accessed", "folio_", "page_table", "lookup_"]),
    ("kernel copy: pull (readv)", ["_copy_to_iter", "copy_page_to_iter"]),
    ("kernel copy: push (writev)", ["_copy_from_iter", "copy_page_from_iter"]),
    ("reduce", ["reduce<", "Isa::reduce"]),
    ("copy into outputs (memcpy, streamingCopy)", ["memcpy", "memmove", "streamingCopy", "directAllReduceShare"]),
    ("first touch (fill, page faults)", ["clear_page", "page_fault", "do_anonymous", "handle_mm",
                                         "memcg", "charge", "memset", "alloc_pages", "fill"]),
    ("waits (scheduler, futex, meetings)", ["task_switch", "schedule", "futex", "softirq",
                                            "spin_unlock_irq", "yield", "sched_", "pause",
                                            "meet", "waitFor", "spin", "idle", "Doorbell"]),
    ("syscall entry/exit", ["entry_SYSCALL", "syscall", "irqentry", "process_vm", "do_syscall"]),
]
PATHS = [("heap, out of place (cma)", []), ("heap, in place (cma)", ["--in-place"]),
         ("registered, out of place (direct)", ["--registered"]),
         ("registered, in place (direct)", ["--registered", "--in-place"])]


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def phase_of(symbol):
    for name, needles in PHASES:
        if any(n in symbol for n in needles):
            return name
    return "other"


def profile(build, bytes_, iters, extra):
    collie = os.path.join(build, "bin", "collie")
    loop = os.path.join(build, "bench", "allreduce_loop")
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-o", data, "--",
               collie, "run", "-n", "2", "--", loop, "--bytes", str(bytes_), "--iters",
               str(iters)] + extra
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if run.returncode != 0:
            sys.exit(f"phases.py: {' '.join(cmd)} failed:\n{run.stderr[-1500:]}")
        us = float(re.search(r": ([\d.]+) us per call", run.stdout).group(1))
        report = subprocess.run(["perf", "report", "-i", data, "--sort", "sym", "--stdio"],
                                capture_output=True, text=True).stdout
    shares = {}
    for line in report.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(.*)", line)
        if m:
            shares[phase_of(m.group(3))] = shares.get(phase_of(m.group(3)), 0) + float(m.group(1))
    return us, shares


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--bytes", type=parse_bytes, default=64 << 20)
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    roof = subprocess.run([os.path.join(args.build, "bench", "roofline"), "--json", "--bytes",
                           str(args.bytes), "--iters", "7", "--warmup", "2"],
                          capture_output=True, text=True)
    r = json.loads(roof.stdout)
    load = open("/proc/loadavg").read().split()[:3]
    print(f"# {args.bytes} bytes, 2 ranks, float sum; roofline: dual-write "
          f"{r['dualwrite_busbw_gbps']:.2f} GB/s busbw ({r['dualwrite_us']:.0f} us/call), "
          f"copy {r['copy_gbps']:.2f} GB/s, ping-pong {r['pingpong_ns']:.0f} ns "
          f"({r['placement']} placement); load {' '.join(load)}")
    names = [p[0] for p in PHASES] + ["other"]
    print("| path | us/call | busbw GB/s | of roofline | " + " | ".join(names) + " |")
    print("|---" * (4 + len(names)) + "|")
    for label, extra in PATHS:
        us, shares = profile(args.build, args.bytes, args.iters, extra)
        busbw = args.bytes / us / 1e3
        cells = [f"{shares.get(n, 0):.0f}%" for n in names]
        print(f"| {label} | {us:.0f} | {busbw:.2f} | {busbw / r['dualwrite_busbw_gbps']:.2f} | "
              + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
