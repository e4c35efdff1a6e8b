#!/usr/bin/env python3
"""Paired A/B of two collie builds' all-reduce, with the machine's ceiling in the same run.

Usage: bench/ab.py --a BUILD_DIR_A --b BUILD_DIR_B [--ranks 2] [--rounds 5]
                   [--max 64M] [--min 8] [--transport shm|tcp] [--perf-args "-R 1"]
                   [--collective allreduce] [--json FILE]
                   [--a-env "K=V ..."] [--b-env "K=V ..."]
                   [--a-perf-args "..."] [--b-perf-args "..."]

--a-env/--b-env set knobs for one side only, so that one build can be its own baseline
(e.g. --a build --b build --a-env COLLIE_SHM_THP_MIN=0); --a-perf-args/--b-perf-args
add `collie perf` arguments for one side only (e.g. bfloat16 against float32 at the same
bytes: --a build --b build --b-perf-args "-d bfloat16"; B/A is then float32's busbw
over bfloat16's).

A round runs bench's `roofline` once (streaming copy, 2-process dual-write all-reduce,
cache-line ping-pong: the VM's vCPU placement), then the whole size sweep of `collie
perf allreduce` (float sum) with build A and with build B, in an order that alternates
from round to round, so that load drifting over minutes hits both alike. Each cell is
the slowest rank's median time per call. The table gives per size and placement
(in place, out of place) the median over rounds of A and B and the *paired* ratio: the
median over rounds of B/A taken within one round. A paired ratio above 1 + --noise
(default 0.10) is flagged "slower" and makes the exit status 1.

Sizes 8 B .. 64 KiB run 500 timed calls (2000 warm-up: a launch's first tens of
milliseconds can run both ranks on one core until the scheduler spreads them), larger
ones 10 (--large-warmup, default 3, warm-up).
The roofline column, from 1 MiB up, is B's busbw over the round's dual-write ceiling
scaled by the same 2(n-1)/n (the 2-rank dual-write figure is a busbw of 2 ranks), i.e.
B's algbw over the dual-write figure. The ceiling is measured at 64 MiB (memory, not
cache): sizes that fit in the L3 cache can pass it. It differs by vCPU placement (on the
test VM on 2026-11-27 the slow placement's was up to 1.6x the fast one's), so where rounds saw
both, the column also gives each placement's median. It is a shared-memory ceiling, so
the column stays empty with --transport tcp (bench/compare.py measures the socket's).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SMALL_MAX = 64 << 10
COLLECTIVE = ["allreduce"]  # --collective


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def parse_env(text):
    """'K=V K2=V2' -> {K: V, K2: V2}."""
    env = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not key:
            sys.exit(f"ab.py: '{item}' is not K=V")
        env[key] = value
    return env


def human(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def collie_binary(build):
    path = os.path.join(build, "bin", "collie")
    if not os.access(path, os.X_OK):
        sys.exit(f"ab.py: no collie binary at {path} (build it first)")
    return path


def sweep(collie, ranks, lo, hi, iters, warmup, transport, extra, env):
    """One `collie perf` sweep; returns {size: {"in_place": us, "out_of_place": us}}, without
    the placements the collective does not have."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [collie, "run", "-n", str(ranks), "--", collie, "perf", COLLECTIVE[0],
               "-b", str(lo), "-e", str(hi), "-f", "4", "-n", str(iters), "-w", str(warmup),
               "-c", "1", "--json", out.name] + extra
        if transport:
            cmd += ["--transport", transport]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                              env=dict(os.environ, **env))
        if proc.returncode != 0:
            sys.exit(f"ab.py: {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-1500:]}")
        doc = json.load(open(out.name))
    if doc.get("wrong_total", 0):
        sys.exit(f"ab.py: {collie} computed wrong results")
    # A collective without an in-place form (all-to-all, gather, scatter) has null there.
    return {r["size"]: {k: r[k]["median_us"] for k in ("in_place", "out_of_place") if r.get(k)}
            for r in doc["results"]}


def run_build(collie, args, env, side_args):
    cells = {}
    extra = args.perf_args + side_args
    lo, hi = args.min, args.max
    if lo <= SMALL_MAX:
        cells.update(sweep(collie, args.ranks, lo, min(hi, SMALL_MAX), 500, 2000,
                           args.transport, extra, env))
        lo = SMALL_MAX * 4
    if lo <= hi:
        cells.update(sweep(collie, args.ranks, lo, hi, 10, args.large_warmup, args.transport,
                           extra, env))
    return cells


def roofline(build):
    path = os.path.join(build, "bench", "roofline")
    if not os.access(path, os.X_OK):
        return None
    proc = subprocess.run([path, "--json", "--iters", "7", "--warmup", "2"],
                          capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", required=True, help="build dir of the baseline")
    parser.add_argument("--b", required=True, help="build dir of the candidate")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min", type=parse_bytes, default=8)
    parser.add_argument("--max", type=parse_bytes, default=64 << 20)
    parser.add_argument("--transport", default="")
    parser.add_argument("--collective", default="allreduce",
                        help="allreduce, reducescatter, allgather, broadcast or reduce")
    parser.add_argument("--perf-args", default="", help="extra collie perf arguments")
    parser.add_argument("--noise", type=float, default=0.10)
    parser.add_argument("--large-warmup", type=int, default=3,
                        help="warm-up calls per size above 64 KiB (20 gets past the engine's "
                             "first 12 calls of a size class, which time cma against the ring)")
    parser.add_argument("--json", help="write every cell here")
    parser.add_argument("--a-env", default="", help="K=V ... set for build A's runs only")
    parser.add_argument("--b-env", default="", help="K=V ... set for build B's runs only")
    parser.add_argument("--a-perf-args", default="", help="collie perf arguments for A only")
    parser.add_argument("--b-perf-args", default="", help="collie perf arguments for B only")
    args = parser.parse_args()
    args.perf_args = args.perf_args.split()
    side_args = {"A": args.a_perf_args.split(), "B": args.b_perf_args.split()}
    COLLECTIVE[0] = args.collective
    builds = {"A": collie_binary(args.a), "B": collie_binary(args.b)}
    envs = {"A": parse_env(args.a_env), "B": parse_env(args.b_env)}

    rounds = []
    for r in range(args.rounds):
        ceiling = roofline(args.b)
        order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
        cells = {name: run_build(builds[name], args, envs[name], side_args[name])
                 for name in order}
        rounds.append({"roofline": ceiling, "A": cells["A"], "B": cells["B"]})
        placement = ceiling["placement"] if ceiling else "?"
        print(f"# round {r + 1}/{args.rounds} done ({placement} placement)", file=sys.stderr)

    sizes = sorted(rounds[0]["A"])
    slower = []
    ceilings = [x["roofline"] for x in rounds if x["roofline"]]
    print(f"collie {args.collective}, {args.ranks} ranks, sum{', ' + args.transport if args.transport else ''}"
          f"{' ' + ' '.join(args.perf_args) if args.perf_args else ''}; "
          f"A = {args.a}{' ' + args.a_env if args.a_env else ''}"
          f"{' ' + args.a_perf_args if args.a_perf_args else ''}, "
          f"B = {args.b}{' ' + args.b_env if args.b_env else ''}"
          f"{' ' + args.b_perf_args if args.b_perf_args else ''}; "
          f"median of {args.rounds} interleaved rounds")
    if ceilings:
        print(f"ceiling per round (median): dual-write "
              f"{statistics.median(c['dualwrite_busbw_gbps'] for c in ceilings):.2f} GB/s busbw, "
              f"copy {statistics.median(c['copy_gbps'] for c in ceilings):.2f} GB/s, "
              f"ping-pong {statistics.median(c['pingpong_ns'] for c in ceilings):.0f} ns; placements: "
              + ", ".join(c["placement"] for c in ceilings))
    print()
    print("| size | placement | A us | B us | B/A paired | B of roofline |")
    print("|---|---|---|---|---|---|")
    for size in sizes:
        for place in ("in_place", "out_of_place"):
            if any(place not in x["A"][size] or place not in x["B"][size] for x in rounds):
                continue  # the collective has no such form
            a = [x["A"][size][place] for x in rounds]
            b = [x["B"][size][place] for x in rounds]
            paired = statistics.median(bb / aa for aa, bb in zip(a, b))
            of_roof = ""
            if size >= 1 << 20 and ceilings and args.transport in ("", "shm"):
                # busbw over the ceiling scaled by the same 2(n-1)/n: algbw / dual-write.
                fractions = {}
                for x in rounds:
                    if x["roofline"]:
                        fractions.setdefault(x["roofline"]["placement"], []).append(
                            size / (x["B"][size][place] * 1e3) /
                            x["roofline"]["dualwrite_busbw_gbps"])
                every = [f for group in fractions.values() for f in group]
                of_roof = f"{statistics.median(every):.2f}"
                if len(fractions) > 1:  # the ceiling differs by placement: each apart
                    of_roof += " (" + ", ".join(
                        f"{name} {statistics.median(group):.2f}"
                        for name, group in sorted(fractions.items())) + ")"
            flag = " slower" if paired > 1 + args.noise else ""
            if flag:
                slower.append((size, place, paired))
            print(f"| {human(size)} | {place.replace('_', ' ')} | {statistics.median(a):.2f} | "
                  f"{statistics.median(b):.2f} | {paired:.2f}{flag} | {of_roof} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()}, "rounds": rounds}, f, indent=1)
    print(f"\n{len(slower)} cells with B slower than A beyond {args.noise:.0%} (paired)")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
