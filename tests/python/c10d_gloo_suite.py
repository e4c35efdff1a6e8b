"""pytorch's own test/distributed/test_c10d_gloo.py (its CPU tests) on collie, and on
gloo for the baseline.

The file does not ship in the torch wheel; run_c10d_gloo.sh says where to put it (and
test_c10d_common.py, which it imports). Adapted as a user would, without changing a
test body: with ``--backend collie``, before the file is imported,

- ``torch.distributed.ProcessGroupGloo(store, rank, size, opts)`` makes a collie
  backend (``torch_collie._C.create_backend``, with the options' timeout and the
  interfaces of its ``_devices`` as COLLIE_SOCKET_IFNAME), its ``_Options()`` is a
  ``Backend.Options("collie")`` that also holds gloo's ``_devices``/``_threads``
  attributes (``_threads`` unused), and its ``create_device`` is
  ``torch_collie.create_device``;
- ``init_process_group`` and ``new_group`` given the backend "gloo" get "collie".

With ``--backend gloo`` nothing is patched and torch_collie is not imported.

    c10d_gloo_suite.py --backend collie|gloo --upstream DIR [-k PATTERN ...] [--list]
                       [--json FILE]
    c10d_gloo_suite.py --compare GLOO.json COLLIE.json

-k keeps tests whose Class.test name matches PATTERN (a regular expression; several:
any). --compare prints one line per test (gloo's outcome, collie's) and the counts,
and exits 1 when a test gloo passes fails or skips on collie, unless it is listed in
NOT_APPLICABLE with the reason.
"""

import argparse
import collections
import json
import os
import re
import sys
import time
import unittest

# Set before anything imports the upstream file, here and in every rank (which
# imports this file again as __mp_main__, or by name in the forkserver).
if __name__ == "__main__":
    _args = None
    if "--compare" not in sys.argv:
        _p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        _p.add_argument("--backend", choices=("collie", "gloo"), required=True)
        _p.add_argument("--upstream", required=True, help="folder with test_c10d_gloo.py")
        _p.add_argument("-k", dest="patterns", action="append", default=[])
        _p.add_argument("--list", action="store_true")
        _p.add_argument("--json", help="write {test: [outcome, detail, seconds]} here")
        _args = _p.parse_args()
        os.environ["C10D_SUITE_BACKEND"] = _args.backend
        os.environ["C10D_SUITE_UPSTREAM"] = os.path.abspath(_args.upstream)

# Tests whose subject is gloo itself, not the process-group contract: collie does not
# take them on. Key: Class.test; value: why.
NOT_APPLICABLE = {
    "GlooProcessGroupWithDispatchedCollectivesTests.test_init_process_group_for_all_backends":
        "checks torch's backend registry by name (a plugin must be named 'custom'; with "
        "'gloo' mapped to collie the gloo case cannot hold)",
}

# Upstream classes that run. ProcessGroupGlooLazyInitTest is left out on both backends:
# the same bodies as ProcessGroupGlooTest under gloo's own TORCH_GLOO_LAZY_INIT mode.
CLASSES = (
    "RendezvousEnvTest",
    "TimeoutTest",
    "ProcessGroupGlooTest",
    "DistributedDataParallelTest",
    "ReducerTest",
    "CommTest",
    "GlooProcessGroupWithDispatchedCollectivesTests",
    "LargeCommTest",
)


def _adapt_to_collie():
    import torch.distributed as dist
    from torch._C._distributed_c10d import Backend

    import torch_collie  # registers "collie"

    class CollieOptions(Backend.Options):
        def __init__(self):
            super().__init__("collie")

    class ProcessGroupCollie:
        """Stands in for ProcessGroupGloo: returns a collie Backend whose sockets use the
        interfaces of the options' devices (torch_collie.create_device's)."""

        _Options = CollieOptions
        create_device = staticmethod(torch_collie.create_device)

        def __new__(cls, store, rank, size, opts=None):
            timeout = opts._timeout if opts is not None else dist.default_pg_timeout
            devices = getattr(opts, "_devices", None) if opts is not None else None
            return torch_collie._C.create_backend(store, rank, size, timeout,
                                                  torch_collie.device_knobs(devices))

    def swap(name):
        return "collie" if isinstance(name, str) and name.lower() == "gloo" else name

    def patched(fn, position):
        def call(*args, **kwargs):
            if len(args) > position:
                args = args[:position] + (swap(args[position]),) + args[position + 1:]
            if "backend" in kwargs:
                kwargs["backend"] = swap(kwargs["backend"])
            return fn(*args, **kwargs)

        call.__wrapped__ = fn
        return call

    dist.ProcessGroupGloo = ProcessGroupCollie
    dist.init_process_group = patched(dist.init_process_group, 0)
    dist.new_group = patched(dist.new_group, 2)


BACKEND = os.environ.get("C10D_SUITE_BACKEND")
if BACKEND:
    sys.path.insert(0, os.environ["C10D_SUITE_UPSTREAM"])
    import torch  # noqa: E402

    if BACKEND == "collie":
        _adapt_to_collie()
    import test_c10d_gloo as upstream  # noqa: E402
    from torch.testing._internal.common_distributed import MultiProcessTestCase  # noqa: E402

    from suite_support import ForkserverRanks  # noqa: E402

    # Same names as upstream, defined here so that ranks find them by name.
    for _name in CLASSES:
        _cls = getattr(upstream, _name)
        _bases = (ForkserverRanks, _cls) if issubclass(_cls, MultiProcessTestCase) else (_cls,)
        globals()[_name] = type(_name, _bases, {})


def selected_tests(patterns):
    loader = unittest.TestLoader()
    tests = []
    for name in CLASSES:
        cls = globals()[name]
        for test in loader.getTestCaseNames(cls):
            qualified = f"{name}.{test}"
            if not patterns or any(re.search(p, qualified) for p in patterns):
                tests.append((cls, test, qualified))
    return tests


def run(args):
    from suite_support import Result, preload

    class QualifiedResult(Result):
        qualified = True

    tests = selected_tests(args.patterns)
    if args.list:
        print("\n".join(q for _, _, q in tests))
        return 0
    preload(__file__)  # the patches and the classes come first in the ranks too
    suite = unittest.TestSuite(cls(test) for cls, test, _ in tests)
    start = time.monotonic()
    runner = unittest.TextTestRunner(resultclass=QualifiedResult, verbosity=2,
                                     stream=sys.stdout)
    result = runner.run(suite)
    wall = time.monotonic() - start
    counts = collections.Counter(o for _, o, _, _ in result.outcomes)
    print(f"\nc10d_gloo_suite: {args.backend}, {len(tests)} selected: passed "
          f"{counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']} "
          f"in {wall:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({n: [o, d, round(s, 2)] for n, o, s, d in result.outcomes}, f, indent=1)
    return 0


def compare(gloo_path, collie_path):
    with open(gloo_path) as f:
        gloo = json.load(f)
    with open(collie_path) as f:
        collie = json.load(f)
    rows = collections.Counter()
    missing = []
    for name in sorted(set(gloo) | set(collie)):
        g = gloo.get(name, ["-", "", 0])
        c = collie.get(name, ["-", "", 0])
        verdict = ""
        if g[0] == "passed" and c[0] != "passed":
            if name in NOT_APPLICABLE:
                verdict = "n/a: " + NOT_APPLICABLE[name]
            else:
                verdict = "MISSING: " + (c[1] or c[0])[:160]
                missing.append(name)
        elif c[0] == "skipped":
            verdict = c[1][:80]
        rows[(g[0], c[0])] += 1
        print(f"{name:80} gloo {g[0]:7} collie {c[0]:7} {verdict}")
    print("\nc10d_gloo_suite: gloo/collie outcome pairs: " +
          ", ".join(f"{g}/{c} {n}" for (g, c), n in sorted(rows.items())))
    ran = [n for n in gloo if gloo[n][0] == "passed"]
    ok = [n for n in ran if collie.get(n, ["-"])[0] == "passed"]
    na = [n for n in ran if n in NOT_APPLICABLE and collie.get(n, ["-"])[0] != "passed"]
    print(f"c10d_gloo_suite: gloo passes {len(ran)}; collie passes {len(ok)} of them, "
          f"{len(na)} not applicable, {len(missing)} missing")
    if missing:
        print("  MISSING: " + " ".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    if "--compare" in sys.argv:
        i = sys.argv.index("--compare")
        sys.exit(compare(sys.argv[i + 1], sys.argv[i + 2]))
    sys.exit(run(_args))
