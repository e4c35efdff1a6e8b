#!/usr/bin/env python3
"""Follows single all-reduces through collie's source files and counts how often each
file is entered (docs/architecture.md, "Following one all-reduce").

Usage: scripts/trace_allreduce.py [--build DIR] [--ranks N] [--max-entries K]
                                  [--json FILE] [--show CASE]

Configures and builds DIR (default: build-trace) with COLLIE_TRACE_CALLS=ON (libcollie
compiled with -finstrument-functions, tools/trace), runs `collie run -n N
collie_trace_allreduce` (default 2 ranks, over shm) and reads what rank 0 recorded for
each case: the first all-reduce of 8 KiB and of 4 MiB (they plan and tune) and one in
steady state at each size. Function addresses become functions and files with addr2line.

What is counted, per case, on every thread of rank 0 while the call ran:
- an entry into a source file (.cc) is a call whose callee is defined in it while the
  nearest .cc on the call stack is another file (headers are transparent: an inline
  accessor does not break a path, and is not counted itself);
- each distinct (calling function, called function) pair counts once: a loop that
  runs the same step for every chunk, or polls a function while it waits, enters the
  callee's file once, as a reader following the code meets it once, and the count
  does not depend on timing or size;
- calls from core/plan into core/tune and back ("tune and plan call back and forth").
Prints, per case, the files in order of first entry with their entry counts, and exits
1 when a file is entered more than K times (default 3) in any case, the first calls that
plan and tune included, and is not in KNOWN, or when an entry of KNOWN no longer is.
core/common's files (dtype sizes, names, Status) are the bottom layer's utilities,
called from everywhere like the standard library: printed, not held to K.
Python 3 standard library; needs cmake, ninja, binutils' addr2line.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["first_8KiB", "steady_8KiB", "first_4MiB", "steady_4MiB"]


def build(build_dir):
    if not os.path.exists(os.path.join(build_dir, "build.ninja")):
        flags = "-O2 -g1 -DNDEBUG"
        subprocess.run([
            "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            f"-DCMAKE_CXX_FLAGS_RELWITHDEBINFO={flags}",
            f"-DCMAKE_C_FLAGS_RELWITHDEBINFO={flags}",
            "-DCOLLIE_TRACE_CALLS=ON", "-DCOLLIE_UNITY_BUILD=ON", "-DCOLLIE_WITH_CUDA=OFF",
            "-DCOLLIE_BUILD_TESTS=OFF", "-DCOLLIE_BUILD_BENCH=OFF"
        ], check=True, stdout=subprocess.DEVNULL if build_dir else None)
    subprocess.run(["ninja", "-C", build_dir, "collie_cli", "collie_trace_allreduce"],
                   check=True, stdout=subprocess.DEVNULL if build_dir else None)


def run(build_dir, ranks, out_dir):
    env = dict(os.environ)
    env.setdefault("COLLIE_TIMEOUT", "60s")
    subprocess.run([
        os.path.join(build_dir, "bin", "collie"), "run", "-n", str(ranks),
        os.path.join(build_dir, "bin", "collie_trace_allreduce"), out_dir
    ], check=True, env=env)


def read_events(path):
    events = []
    with open(path) as f:
        for line in f:
            thread, kind, module, offset = line.split()
            events.append((int(thread), kind == "e", module, int(offset, 16)))
    return events


def symbolize(events):
    """{(module, offset): (function, file relative to ROOT or absolute)}."""
    by_module = collections.defaultdict(set)
    for _, _, module, offset in events:
        by_module[module].add(offset)
    where = {}
    for module, offsets in by_module.items():
        offsets = sorted(offsets)
        out = subprocess.run(["addr2line", "-f", "-C", "-e", module] +
                             [hex(o) for o in offsets],
                             check=True, capture_output=True, text=True).stdout.splitlines()
        for i, offset in enumerate(offsets):
            function, location = out[2 * i], out[2 * i + 1]
            path = os.path.normpath(location.rsplit(":", 1)[0])
            if path.startswith(ROOT + os.sep):
                path = os.path.relpath(path, ROOT)
            where[(module, offset)] = (function, path)
    return where


def is_source(path):
    return path.endswith(".cc") and not path.startswith("/")


def count(events, where):
    """Per file: entries; the order of first entry; plan<->tune calls."""
    entries = collections.Counter()
    order = []
    crossings = collections.Counter()
    edges = set()
    stacks = collections.defaultdict(list)  # thread -> [(function, file)]
    for thread, enter, module, offset in events:
        stack = stacks[thread]
        function, path = where[(module, offset)]
        if not enter:
            # Pop to the matching frame; an exit without an entry (armed mid-call) is
            # ignored.
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] == function:
                    del stack[i:]
                    break
            continue
        if is_source(path):
            caller = ("<outside>", "<outside>")
            for frame in reversed(stack):
                if is_source(frame[1]):
                    caller = frame
                    break
            if caller[1] == "<outside>" and "{lambda" in function:
                # A thread that was inside a function when the trace was armed (the
                # progress thread in its loop) calls that function's lambdas through the
                # standard library: the lambda's own function is the caller.
                caller = (function.split("::{lambda")[0], path)
            if caller[1] != path and (caller[0], function) not in edges:
                edges.add((caller[0], function))
                entries[path] += 1
                if path not in order:
                    order.append(path)
                for a, b in (("core/plan/", "core/tune/"), ("core/tune/", "core/plan/")):
                    if caller[1].startswith(a) and path.startswith(b):
                        crossings[f"{a[5:-1]} -> {b[5:-1]}"] += 1
        stack.append((function, path))
    return entries, order, crossings


# Files entered more than K times, each with the reason; this list only
# shrinks (an entry that no longer exceeds K fails the run, like check_layering.py's).
KNOWN = set()


def held(path):
    return not path.startswith("core/common/")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build-trace"))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-entries", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--show", choices=CASES, help="also print the call tree of CASE")
    args = parser.parse_args()
    build_dir = os.path.abspath(args.build)
    build(build_dir)
    report = {}
    failed = []
    with tempfile.TemporaryDirectory() as out_dir:
        run(build_dir, args.ranks, out_dir)
        for case in CASES:
            events = read_events(os.path.join(out_dir, f"rank0_{case}.txt"))
            where = symbolize(events)
            entries, order, crossings = count(events, where)
            report[case] = {
                "files": [[path, entries[path]] for path in order],
                "plan_tune_calls": dict(crossings),
            }
            most = max(entries.values()) if entries else 0
            print(f"{case}: {len(order)} files, most entries {most}, "
                  f"plan/tune calls {dict(crossings) or 0}")
            for path in order:
                mark = "  <-- more than %d" % args.max_entries if (
                    entries[path] > args.max_entries and held(path)) else ""
                print(f"  {entries[path]:3d}  {path}{mark}")
            over = {p for p in order if entries[p] > args.max_entries and held(p)}
            failed += [f"{case}: {p} entered {entries[p]} times" for p in sorted(over)
                       if (case, p) not in KNOWN]
            failed += [f"{case}: {p} is in KNOWN but entered {entries.get(p, 0)} times: remove it"
                       for c, p in sorted(KNOWN) if c == case and p not in over]
            if args.show == case:
                depth = collections.defaultdict(int)
                for thread, enter, module, offset in events:
                    function, path = where[(module, offset)]
                    if enter:
                        print(f"  [{thread}] {'  ' * depth[thread]}{function}  ({path})")
                        depth[thread] += 1
                    else:
                        depth[thread] = max(0, depth[thread] - 1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    for line in failed:
        print("trace_allreduce: " + line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
