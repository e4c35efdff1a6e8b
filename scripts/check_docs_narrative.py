#!/usr/bin/env python3
"""Keeps README.md and docs/ current: no dated narrative, decision records in one shape.

Usage: scripts/check_docs_narrative.py [REPO_ROOT]   (default: this script's repository)

Scans README.md and every docs/**/*.md and fails (exit 1, one `file:line: why: text`
line per finding) on
  (a) narrative of a work session anywhere in the text: "this session", "first look",
      "later that night", "last session", "next session", "the fourth H200 session", ...
      A small phrase list, not the bare word: "UCX session" or "ssh session" are fine;
  (b) a date in a Markdown heading (a line starting with `#` outside fenced code):
      2026-11-27, "Nov 27", "November 27, 2026", "27 November 2026". Dates in table rows
      and body text stay (a measured table says when it was measured);
  (c) a decision record (docs/decisions/*.md other than README.md) without the `## `
      sections Context, Decision, Alternatives measured and Consequences, in that order.
Dated run reports and paired change tables live in bench/results/, which is not scanned.
On success prints "docs narrative check: N files ok". Python 3 standard library only.
"""
import os
import re
import sys

ORDINALS = r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth)"
MACHINES = r"(?:H100|H200|GPU|device|machine|work|benchmark)"

# (a) Phrases of session narrative, matched case-insensitively.
NARRATIVE = [
    (re.compile(p, re.IGNORECASE), why)
    for p, why in [
        (r"\bthis session\b", "session narrative"),
        (r"\b(?:last|next|that|same|previous|earlier|later) session\b", "session narrative"),
        (rf"\b{ORDINALS}\s+(?:{MACHINES}\s+)?session\b", "session narrative"),
        (rf"\b(?:an?|one|another)\s+{MACHINES}\s+session\b", "session narrative"),
        (rf"\b{MACHINES}\s+sessions\b", "session narrative"),
        (r"\b(?:two|three|four|five|six|several|both)\s+sessions\b", "session narrative"),
        (r"\bfirst look\b", "narrative"),
        (r"\b(?:later|earlier) that (?:night|day|evening|morning)\b", "narrative"),
        (r"\bthat night\b", "narrative"),
        (r"\byesterday\b", "narrative"),
        (r"\b(?:earlier|later) today\b", "narrative"),
    ]
]

# (b) Dates in headings.
MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|"
         r"Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
HEADING_DATES = [
    re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    re.compile(rf"\b{MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?\b(?:,? \d{{4}})?"),
    re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)? {MONTH}\b(?: \d{{4}})?"),
]
HEADING = re.compile(r"^ {0,3}#{1,6}(?:\s|$)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")

# (c) The shape of a decision record.
DECISION_SECTIONS = ["Context", "Decision", "Alternatives measured", "Consequences"]


def markdown_files(root):
    files = []
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        files.append(readme)
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "docs")):
        dirnames.sort()
        files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".md")]
    return files


def check_file(path, rel):
    problems = []
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    fence = None
    sections = []
    for number, line in enumerate(lines, 1):
        spans = []
        for pattern, why in NARRATIVE:
            for found in pattern.finditer(line):
                if not any(a <= found.start() and found.end() <= b for a, b, _ in spans):
                    spans.append((found.start(), found.end(), why))
        for start, end, why in sorted(spans):
            if not any(a <= start and end <= b and (a, b) != (start, end) for a, b, _ in spans):
                problems.append(f"{rel}:{number}: {why} ({line[start:end]!r}): {line.strip()}")
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        if HEADING.match(line):
            for pattern in HEADING_DATES:
                found = pattern.search(line)
                if found:
                    problems.append(
                        f"{rel}:{number}: date in a heading ({found.group(0)!r}): {line.strip()}")
                    break
            if line.startswith("## "):
                sections.append((number, line[3:].strip()))
    parts = rel.replace(os.sep, "/").split("/")
    if len(parts) == 3 and parts[:2] == ["docs", "decisions"] and parts[2] != "README.md":
        problems += check_decision(rel, sections)
    return problems


def check_decision(rel, sections):
    """Context, Decision, Alternatives measured, Consequences as `## ` headings, in order
    (a heading may go on after the name, e.g. "## Alternatives measured (2 ranks)")."""
    found = []
    for want in DECISION_SECTIONS:
        pattern = re.compile(rf"^{re.escape(want)}\b")
        hits = [number for number, title in sections if pattern.match(title)]
        if not hits:
            return [f"{rel}:1: decision record without a '## {want}' section "
                    f"(needs {', '.join(DECISION_SECTIONS)})"]
        found.append((hits[0], want))
    if [w for _, w in sorted(found)] != DECISION_SECTIONS:
        return [f"{rel}:{sorted(found)[0][0]}: decision record sections out of order "
                f"(want {', '.join(DECISION_SECTIONS)})"]
    return []


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    root = os.path.abspath(root)
    files = markdown_files(root)
    if not files:
        print(f"docs narrative check: no README.md or docs/ under {root}", file=sys.stderr)
        return 2
    problems = []
    for path in files:
        problems += check_file(path, os.path.relpath(path, root))
    for problem in problems:
        print(problem)
    if problems:
        print(f"docs narrative check: {len(problems)} problem(s) in {len(files)} files; "
              "dated run reports and session notes belong in bench/results/ (git keeps "
              "history), dates in tables and body text may stay")
        return 1
    print(f"docs narrative check: {len(files)} files ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
