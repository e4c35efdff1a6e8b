"""PyTorch's own distributed test suite on the collie backend.

Runs ``torch.testing._internal.distributed.distributed_test`` (the suite behind
pytorch's ``test/distributed/test_distributed_spawn.py``, shipped inside the torch
wheel) with ``BACKEND=collie``. Like third-party backends (UCC's plugin), this driver
only declares collie in the suite's backend feature sets before the suite is
imported; no test body changes. Tests gated on a named backend ("Only gloo backend
supports timeouts", NCCL-only, GPU-only) skip themselves with their own reason.

    torch_suite.py [--world-size N] [-k PATTERN ...] [--list] [--expect FILE]

-k keeps the tests whose name matches PATTERN, a regular expression searched in the
name (several -k: any of them); a PATTERN starting with @ names a file of patterns, one
a line (# comments). Prints one line per
test and a summary (ran, passed, failed, skipped by reason, time). Exits 0 when every
test that ran passed.
"""

import argparse
import collections
import os
import re
import sys
import time
import unittest


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
    p.add_argument("-k", dest="patterns", action="append", default=[],
                   help="keep tests whose name matches this regex (repeatable; @file: a list)")
    p.add_argument("--list", action="store_true", help="list the selected tests and exit")
    p.add_argument("--times", action="store_true", help="print every test that ran, with its time")
    return p.parse_args(argv)


def expand_patterns(patterns):
    out = []
    for pat in patterns:
        if pat.startswith("@"):
            with open(pat[1:]) as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    if line:
                        out.append(line)
        else:
            out.append(pat)
    return out


# The environment must be set before the suite is imported (it reads BACKEND and
# WORLD_SIZE at import time), here and in every spawned rank, which re-imports
# this file as __mp_main__.
if __name__ == "__main__":
    _args = parse_args(sys.argv[1:])
    os.environ["WORLD_SIZE"] = str(_args.world_size)
os.environ["BACKEND"] = "collie"
os.environ.setdefault("WORLD_SIZE", "2")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

import torch_collie  # noqa: E402,F401  (registers "collie")
from suite_support import ForkserverRanks, Result, preload, skip_reason_key  # noqa: E402

# What collie implements, declared the way a plugin backend does. Not "gpu"/"cuda"
# (CPU tensors only).
for feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[feature].add("collie")

import torch.testing._internal.distributed.distributed_test as suite  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

# Backends whose profiler events the suite checks ("collie:all_reduce", ...).
for allowlist in (suite.PROFILING_SUPPORTED_BACKENDS, suite.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
    if "collie" not in allowlist:
        allowlist.append("collie")


class TestDistBackendWithSpawnCOLLIE(ForkserverRanks, TestDistBackend,
                                     DistributedTest._DistTestBase):
    # As the suite's spawn, but the ranks fork from a server (suite_support.py).
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def main():
    args = _args
    patterns = expand_patterns(args.patterns)
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendWithSpawnCOLLIE)
    if patterns:
        names = [n for n in names if any(re.search(p, n) for p in patterns)]
    if args.list:
        print("\n".join(names))
        return 0
    # The environment, the feature sets and the suite come first in the ranks too.
    preload(__file__)
    suite = unittest.TestSuite(TestDistBackendWithSpawnCOLLIE(n) for n in names)
    start = time.monotonic()
    runner = unittest.TextTestRunner(resultclass=Result, verbosity=2, stream=sys.stdout)
    result = runner.run(suite)
    wall = time.monotonic() - start
    counts = collections.Counter(o for _, o, _, _ in result.outcomes)
    reasons = collections.Counter(skip_reason_key(d) for _, o, _, d in result.outcomes
                                  if o == "skipped")
    ran = counts["passed"] + counts["failed"]
    print(f"\ntorch_suite: world size {args.world_size}, {len(names)} selected: ran {ran}, "
          f"passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']} "
          f"in {wall:.0f} s")
    for reason, n in reasons.most_common():
        print(f"  skipped {n:3d}: {reason}")
    ran_tests = sorted((o for o in result.outcomes if o[1] != "skipped"), key=lambda o: -o[2])
    print("  slowest: " + ", ".join(f"{n} {s:.1f}s" for n, _, s, _ in ran_tests[:10]))
    if args.times:
        for name, outcome, seconds, _ in ran_tests:
            print(f"  {seconds:6.2f} s  {outcome:6}  {name}")
    failed = [n for n, o, _, _ in result.outcomes if o == "failed"]
    if failed:
        print("  FAILED: " + " ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
