#!/usr/bin/env bash
# Creates (once) the Python environment the PyTorch backend is built and tested in,
# and prints its directory. Idempotent: a complete environment is reused as is.
#
#   venv=$(scripts/python-env.sh)     # default: ~/.cache/collie/venv ($COLLIE_VENV)
#
# PyPI's Linux torch wheels are CUDA builds whose nvidia-* dependencies weigh
# ~2.3 GB more. For CPU use we install torch with --no-deps plus its pure-Python
# dependencies, and python/make_cuda_stubs.py writes tiny stand-ins for the CUDA
# libraries that torch's shared objects link against (torch.cuda.is_available()
# is then False). Download ~540 MB; about 2 minutes on a fresh machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${COLLIE_VENV:-$HOME/.cache/collie/venv}"
torch_version="${COLLIE_TORCH_VERSION:-2.15.0}"
python="${PYTHON:-python3}"
stamp="$venv/.collie-torch-$torch_version"

if [[ -f "$stamp" ]] && "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "$venv"
  exit 0
fi

start=$(date +%s)
{
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input -q)
  "${pip[@]}" install --no-deps "torch==$torch_version"
  # torch's own requirements minus the nvidia-*/cuda-*/triton ones, plus numpy and
  # ninja (torch.utils.cpp_extension builds with it).
  "${pip[@]}" install filelock 'typing-extensions>=4.13.0' 'setuptools>=77.0.3' \
    'sympy>=1.13.3' 'networkx>=2.5.1' jinja2 'fsspec>=0.8.5' numpy ninja
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$venv/bin/python" "$root/python/make_cuda_stubs.py" "$site/torch/lib"
  "$venv/bin/python" -c "import torch, torch.distributed as d; assert d.is_available(); \
torch.ones(2).sum()"
  touch "$stamp"
} 1>&2
echo "python-env: torch $torch_version ready in $venv after $(($(date +%s) - start)) s" >&2
echo "$venv"
