# Sourced by the PyTorch test runners: the Python environment and torch_collie built
# against this build's libcollie.
#   source torch_env.sh <build dir>     sets $py, $build, $root; exports PYTHONPATH
# Installs torch on first use (scripts/python-env.sh, cached under ~/.cache/collie) and
# exits 77 (ctest: skipped) only when torch cannot be installed. Builds under a lock:
# ctest may start both runners at once.
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if ! venv=$("$root/scripts/python-env.sh"); then
  echo "SKIP: torch could not be installed into the Python environment (see above)"
  exit 77
fi
py="$venv/bin/python"
mkdir -p "$build/python"
(
  flock 9
  cd "$root/python" && MAX_JOBS=2 COLLIE_BUILD_DIR="$build" "$py" setup.py -q build \
    --build-base "$build/python" --build-lib "$build/python/lib" >"$build/python-build.log" 2>&1
) 9>"$build/python/.build-lock" || { cat "$build/python-build.log"; exit 1; }
export PYTHONPATH="$build/python/lib${PYTHONPATH:+:$PYTHONPATH}"
export COLLIE_TIMEOUT="${COLLIE_TIMEOUT:-20s}"
export OMP_NUM_THREADS=1
# torch's flight recorder dumps a rank's trace when a collie call fails (tests make
# calls fail on purpose): into the build tree, not torch's default ~/.cache/torch.
export TORCH_FR_DUMP_TEMP_FILE="${TORCH_FR_DUMP_TEMP_FILE:-$build/python/fr_trace_rank_}"
