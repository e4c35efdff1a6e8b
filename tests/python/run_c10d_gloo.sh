#!/usr/bin/env bash
# pytorch's own test/distributed/test_c10d_gloo.py (its CPU tests) on gloo, then on
# collie, through c10d_gloo_suite.py; prints each test's pair of outcomes and fails when
# a test gloo passes does not pass on collie (unless the driver lists it as not
# applicable, with the reason).
#   run_c10d_gloo.sh <build dir> [c10d_gloo_suite.py arguments: -k ...]
# The two pytorch files are not in this repository (the wheel does not ship them):
# put test_c10d_gloo.py and test_c10d_common.py of pytorch's test/distributed/ into
# $COLLIE_C10D_UPSTREAM (default ~/.cache/collie/upstream/pytorch-c10d). Without them,
# or without torch, exit 77 (ctest: skipped).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/torch_env.sh" "$1"
shift
upstream="${COLLIE_C10D_UPSTREAM:-$HOME/.cache/collie/upstream/pytorch-c10d}"
for f in test_c10d_gloo.py test_c10d_common.py; do
  if [ ! -f "$upstream/$f" ]; then
    echo "SKIP: no $upstream/$f (pytorch's test/distributed/$f; see docs/pytorch.md)"
    exit 77
  fi
done
"$py" -c "import expecttest" 2>/dev/null ||
  "$py" -m pip --disable-pip-version-check --no-input -q install expecttest
# A rank that hangs fails its test after this long instead of torch's 300 s.
export DISTRIBUTED_TESTS_DEFAULT_TIMEOUT="${DISTRIBUTED_TESTS_DEFAULT_TIMEOUT:-60}"
for backend in gloo collie; do
  log="$build/c10d_gloo_$backend.log"
  timeout 1200 "$py" "$here/c10d_gloo_suite.py" --backend "$backend" --upstream "$upstream" \
    --json "$build/c10d_gloo_$backend.json" "$@" >"$log" 2>&1 || {
    tail -40 "$log"
    echo "FAIL: the $backend run did not finish (log: $log)"
    exit 1
  }
  grep '^c10d_gloo_suite:' "$log"
done
"$py" "$here/c10d_gloo_suite.py" --compare "$build/c10d_gloo_gloo.json" \
  "$build/c10d_gloo_collie.json"
