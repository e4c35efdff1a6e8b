"""Outcome recording shared by the drivers that run pytorch's own tests on collie
(torch_suite.py, c10d_gloo_suite.py): a unittest result that keeps every test's
outcome, time and skip reason, and the summary line's grouping of skip reasons."""

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
