#!/usr/bin/env bash
# torch_collie as a pip package: builds its wheel with pip from ./python and installs it
# into a fresh venv, then checks that `import torch_collie` and `python -m
# torch_collie.info` work with neither PYTHONPATH nor LD_LIBRARY_PATH (libcollie comes
# from inside the package), that a 2-rank DDP step runs under torchrun, and that `pip
# uninstall` leaves no file behind.
#   run_torch_pip_test.sh <build dir>
# CI cannot afford another libcollie build: COLLIE_BUILD_DIR points pip at this build
# (its libcollie, and the extension objects torch_env.sh compiled under <build>/python
# with the same interpreter and flags, so pip only links). The fresh venv sees torch
# through a .pth file naming the project venv's site-packages (no 540 MB download); it
# has no pip of its own (the project venv's pip installs into it with --python). pip
# runs with --no-index (it never reaches the network) and --no-deps: the package
# requires the torch it was built against, and that torch is there, but
# scripts/python-env.sh installs it without its CUDA dependencies, which pip would go
# looking for. Exit 77 only when torch cannot be installed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/torch_env.sh" "$1"
unset PYTHONPATH LD_LIBRARY_PATH

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fresh="$tmp/venv"
"$py" -m venv --without-pip "$fresh"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site="$(purelib "$fresh/bin/python")"
purelib "$py" >"$site/collie-project-venv.pth"

pip=("$py" -m pip --disable-pip-version-check)
COLLIE_BUILD_DIR="$build" "${pip[@]}" wheel --no-index --no-deps --no-build-isolation \
  -w "$tmp/wheel" "$root/python" >"$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; echo "FAIL: pip wheel ./python"; exit 1; }
"${pip[@]}" --python "$fresh/bin/python" install --no-index --no-deps "$tmp"/wheel/*.whl \
  >>"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; echo "FAIL: pip install"; exit 1; }
[[ -f "$site/torch_collie/libcollie.so.0" ]] ||
  { ls -R "$site/torch_collie"; echo "FAIL: libcollie.so.0 not in the package"; exit 1; }

cd "$tmp"  # away from the source tree: only the installed package can be imported
"$fresh/bin/python" -m torch_collie.info | tee "$tmp/info.txt"
grep -q "^libcollie .*($site/torch_collie/libcollie.so.0)" "$tmp/info.txt" ||
  { echo "FAIL: the loaded libcollie is not the packaged one"; exit 1; }
timeout 180 "$fresh/bin/python" -m torch.distributed.run --standalone --nproc_per_node 2 \
  "$here/torch_launch_check.py" >"$tmp/torchrun.log" 2>&1 ||
  { cat "$tmp/torchrun.log"; echo "FAIL: DDP step under torchrun"; exit 1; }
[[ $(grep -o "launch check ok" "$tmp/torchrun.log" | wc -l) == 2 ]] ||
  { cat "$tmp/torchrun.log"; echo "FAIL: DDP step under torchrun"; exit 1; }
echo "2-rank DDP step from the installed package: ok"

"${pip[@]}" --python "$fresh/bin/python" -q uninstall -y torch_collie
if "$fresh/bin/python" -c "import torch_collie" 2>/dev/null; then
  echo "FAIL: torch_collie still imports after pip uninstall"
  exit 1
fi
left=$(find "$site" -iname "*torch_collie*" -o -name "libcollie*")
[[ -z "$left" ]] || { echo "$left"; echo "FAIL: pip uninstall left files"; exit 1; }
echo "pip uninstall: nothing left"
