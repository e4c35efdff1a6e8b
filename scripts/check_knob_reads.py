#!/usr/bin/env python3
"""Checks that configuration knobs are read by name only in the components' typed parses.

Usage: scripts/check_knob_reads.py [REPO_ROOT]   (default: this script's repository)

A knob is read by name only through KnobReader (core/config/knob_reader.h), whose by-name
reads of a Config are private to it; the compiler refuses any other by-name read. This
check keeps KnobReader itself in its place: it may appear only in a component's knob
file, `<component>_knobs.cc`, next to the table its parse reads (and in core/config,
which defines it). Tests are not scanned. Exit 1 naming every other file:line that uses
KnobReader; on success prints "knob read check: N files, K typed parses".
Python 3 standard library only.
"""
import os
import re
import sys

SCANNED = ["core", "transports", "kernels", "ddp", "tools", "python/torch_collie/csrc", "include"]
SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".c")
DEFINING = {"core/config/knob_reader.h", "core/config/knob_reader.cc",
            "core/config/config.h", "core/config/config.cc"}
USE = re.compile(r"\bKnobReader\b")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    files = 0
    parses = 0
    bad = []
    for top in SCANNED:
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                files += 1
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().splitlines()
                uses = [i for i, line in enumerate(lines, 1) if USE.search(line)]
                if not uses or rel in DEFINING:
                    continue
                if name.endswith("_knobs.cc"):
                    parses += sum(1 for line in lines if "KnobReader read(" in line)
                    continue
                for line in uses:
                    bad.append(f"{rel}:{line}: reads knobs by name outside a <component>_knobs.cc "
                               "typed parse (add the field to the component's typed struct)")
    if bad:
        print("\n".join(bad))
        return 1
    print(f"knob read check: {files} files, {parses} typed parses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
