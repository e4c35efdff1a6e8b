#!/usr/bin/env bash
# PyTorch's own distributed test suite (the one inside the torch wheel) on collie, at
# each world size given, through torch_suite.py. Exit 77 (ctest: skipped) only when
# torch cannot be installed.
#   run_torch_suite.sh <build dir> "<world sizes>" [torch_suite.py arguments: -k ...]
# e.g. run_torch_suite.sh build "2 4"                                (everything)
#      run_torch_suite.sh build "2 4" -k @tests/python/torch_suite_quick.txt
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/torch_env.sh" "$1"
sizes="$2"
shift 2
# torch.testing needs expecttest (a test-only dependency torch does not install).
"$py" -c "import expecttest" 2>/dev/null ||
  "$py" -m pip --disable-pip-version-check --no-input -q install expecttest
status=0
for n in $sizes; do
  log="$build/torch_suite_ws$n.log"
  # The per-test log goes to a file; the summary (ran, passed, skipped by reason, the
  # failures) to ctest's output.
  if timeout 1200 "$py" "$here/torch_suite.py" --world-size "$n" "$@" >"$log" 2>&1; then
    sed -n '/^torch_suite:/,$p' "$log"
  else
    status=1
    grep -E -A60 '^(ERROR|FAIL):' "$log" | head -400 || true
    grep -q '^torch_suite:' "$log" && sed -n '/^torch_suite:/,$p' "$log" || tail -40 "$log"
    echo "FAIL: torch_suite at world size $n (log: $log)"
  fi
done
exit $status
