#!/usr/bin/env python3
"""Checks that no transport names a collective kind (issue 48: a transport moves bytes and
offers team primitives; what a collective is belongs to core/plan and the engine).

Usage: scripts/check_transport_kinds.py [REPO_ROOT]   (default: this script's repository)

Scans every *.h, *.cc, *.cu and *.cuh under transports/ for `CollectiveKind`. The files
that still name it, shm's board and its single-copy paths, which still run whole
collectives inside the transport, are listed in KNOWN with how many lines name it; the
list may only shrink. Exit 1 when a file outside KNOWN names a collective kind, or a
file of KNOWN names it on another number of lines (fewer: lower its count, or drop it
at 0). On success prints "transport kind check: N files, K known".
Python 3 standard library only.
"""
import os
import re
import sys

EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
NAMES = re.compile(r"\bCollectiveKind\b")

# file -> lines naming a collective kind today. Each goes with splitting the board into a
# primitive (publish, claim, meet, verdict) and step kinds the planner emits.
KNOWN = {
    "transports/shm/shm_board.cc": 12,
    "transports/shm/shm_board.h": 4,
    "transports/shm/shm_board_layout.h": 5,
    "transports/shm/shm_board_single_copy.cc": 9,
    "transports/shm/shm_cma_exchange.cc": 7,
    "transports/shm/shm_cma_exchange.h": 2,
}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    files = 0
    found = {}
    for folder, dirs, names in os.walk(os.path.join(root, "transports")):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(EXTENSIONS):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            files += 1
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                lines = [i for i, line in enumerate(f, 1) if NAMES.search(line)]
            if lines:
                found[rel] = lines
    failures = []
    for rel, lines in sorted(found.items()):
        if rel not in KNOWN:
            failures.extend(f"{rel}:{line}: a transport names a collective kind" for line in lines)
        elif len(lines) != KNOWN[rel]:
            failures.append(f"{rel}: names a collective kind on {len(lines)} lines, KNOWN says "
                            f"{KNOWN[rel]} (update KNOWN in {os.path.basename(__file__)}; it "
                            "may only shrink)")
    for rel in sorted(set(KNOWN) - set(found)):
        failures.append(f"{rel}: no longer names a collective kind: drop it from KNOWN")
    if failures:
        print("\n".join(failures))
        return 1
    print(f"transport kind check: {files} files, {len(KNOWN)} known")
    return 0


if __name__ == "__main__":
    sys.exit(main())
