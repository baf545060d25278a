#!/usr/bin/env bash
# Installs PyPI's torch (the build `pip install torch` gives its users: MKL and oneDNN linked in)
# into a separate virtual environment, .venv-torch-pypi (git-ignored), for bench/bench_train.py's
# "torch-pypi" side. Only the training-speed bench uses it: neither the build, the tests nor CI
# need it, and Tern itself downloads nothing.
#
#     bench/setup_torch_pypi.sh               # torch $TORCH_VERSION into .venv-torch-pypi
#     TORCH_VERSION=2.14.1 bench/setup_torch_pypi.sh
#
# PyPI has only the CUDA build of torch for Linux x86-64 (the CPU-only wheel lives on
# download.pytorch.org, not PyPI): with its nvidia-* dependencies about 4-5 GB on disk. The CPU
# code (MKL, oneDNN) is the same in both builds; the bench never touches CUDA.
# Idempotent: does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
VENV=${TERN_TORCH_PYPI_VENV:-.venv-torch-pypi}
PY=${PYTHON:-python3}

if [ -x "$VENV/bin/python" ] &&
   [ "$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)" = "$TORCH_VERSION" ]; then
  echo "setup_torch_pypi: $VENV already has torch $TORCH_VERSION"
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
    "torch==$TORCH_VERSION" numpy
fi
"$VENV/bin/python" - <<'PY'
import re, torch
cfg = torch.__config__.show()
print(f"setup_torch_pypi: torch {torch.__version__}")
for key in ("BLAS_INFO", "LAPACK_INFO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP"):
    m = re.search(rf"{key}=([^,\n]*)", cfg)
    print(f"  {key}={m.group(1) if m else '?'}")
for line in cfg.splitlines():
    if re.search(r"Math Kernel|oneAPI|oneDNN|MKL-DNN|OpenMP|CPU capability", line):
        print("  " + line.strip())
PY
