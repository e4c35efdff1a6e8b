"""What the drivers that run pytorch's own tests on collie share (torch_suite.py,
c10d_gloo_suite.py): ranks forked from a forkserver, a unittest result that keeps
every test's outcome, time and skip reason, and the summary's grouping of skip
reasons."""

import os
import re
import time
import unittest


class Result(unittest.TextTestResult):
    """Records every outcome with its time and skip reason."""

    qualified = False  # name a test Class.test instead of test

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []  # (name, outcome, seconds, detail)
        self._start = 0.0

    def startTest(self, test):
        self._start = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        parts = test.id().split(".")
        name = ".".join(parts[-2:]) if self.qualified else parts[-1]
        self.outcomes.append((name, outcome, time.monotonic() - self._start, detail))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def _first_error(self, test, err):
        # The rank's exception, not the runner's wrapper or the repro hint after it.
        text = self._exc_info_to_string(err, test)
        found = re.findall(r"^(\w+(?:Error|Exception): .*)$", text, re.M)
        return found[1] if len(found) > 1 else found[0] if found else ""

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", self._first_error(test, err))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "failed", self._first_error(test, err))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failed")


def skip_reason_key(reason):
    # "Test requires backend collie to be one of {'gloo'}" and the like: group by the
    # reason's text with numbers and set contents kept (they say which backend).
    return re.sub(r"\s+", " ", reason.strip())[:110]


class EnvironProcess:
    """Process factory for MultiProcessTestCase._start_processes: the rank gets the
    parent's environment of now (setUp points TEMP_DIR and INIT_METHOD, or a store
    file, at a fresh place per test; a forkserver's children would otherwise see the
    server's)."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __call__(self, target, name, args, kwargs):
        kwargs = dict(kwargs, environ=dict(os.environ))
        return self.ctx.Process(target=target, name=name, args=args, kwargs=kwargs)


class ForkserverRanks:
    """Mixin for a MultiProcessTestCase: its ranks fork from a server that imported
    torch and the tests once (a rank starts in ~0.1 s instead of re-importing torch for
    seconds); each rank is still a fresh process of its own. See preload()."""

    def _spawn_processes(self):
        import torch

        self._start_processes(EnvironProcess(torch.multiprocessing.get_context("forkserver")))

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, environ=None, **kwargs):
        if environ is not None:
            os.environ.clear()
            os.environ.update(environ)
        super()._run(rank, test_name, file_name, pipe, **kwargs)


def preload(driver_file):
    """The forkserver imports the driver once under its module name, so whatever the
    driver sets up at import (environment, patches, test classes) is there in every
    rank. Python 3.11's forkserver ignores both a "__main__" preload and the parent's
    sys.path: PYTHONPATH finds it."""
    import torch

    here = os.path.dirname(os.path.abspath(driver_file))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)
    torch.multiprocessing.set_forkserver_preload(
        [os.path.splitext(os.path.basename(driver_file))[0]])
