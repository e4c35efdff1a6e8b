#!/usr/bin/env python3
"""Checks that no transport and not the transport seam names a collective (issue 48: a
transport moves bytes and offers team primitives, such as the team board of
core/transport/team_board.h; what a collective is belongs to core/plan, core/team and the
engine, so a new collective never touches transports/).

Usage: scripts/check_transport_kinds.py [REPO_ROOT]   (default: this script's repository)

Scans every *.h, *.cc, *.cu and *.cuh under transports/ and core/transport/ for
`CollectiveKind` and `CollectiveArgs`. Exit 1, with one `file:line:` line each, when any
names them. On success prints "transport kind check: N files".
Python 3 standard library only.
"""
import os
import re
import sys

EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
NAMES = re.compile(r"\bCollective(Kind|Args)\b")
SCANNED = ["transports", "core/transport"]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    files = 0
    failures = []
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(names):
                if not name.endswith(EXTENSIONS):
                    continue
                rel = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                files += 1
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                    failures.extend(f"{rel}:{i}: names a collective ({NAMES.search(line).group(0)})"
                                    for i, line in enumerate(f, 1) if NAMES.search(line))
    if failures:
        print("\n".join(failures))
        print("a transport runs primitives; the collective belongs to core (core/team for "
              "team collectives)")
        return 1
    print(f"transport kind check: {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
