#!/usr/bin/env bash
# Installs everything Tern needs to build and test, on a fresh Debian 12 machine.
# Debian packages for the build; a Python virtual environment (.venv) for the test-time peers
# (ctranslate2, pymarian, sacrebleu, numpy, pytest, sentencepiece); transformers beside Debian's torch.
# Idempotent: safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PKGS=(build-essential pkg-config python3-venv
  libdnnl-dev libopenblas-dev
  libsentencepiece-dev sentencepiece
  libcjson-dev libutf8proc-dev libxxhash-dev zlib1g-dev clang libclang-rt-14-dev libomp-14-dev
  gnuplot-nox
  time bc  # /usr/bin/time and bc: recipes/ensemble-en-de.sh, recipes/lmbr-combine-en-de.sh
  libopenmpi-dev openmpi-bin  # MPI: data-parallel `mpirun -np N tern train` (tests/test_train_mpi.py)
  libicu-dev  # ICU's sentence break iterator (src/text/sentences.c: sentence splitting)
  libminizip-dev libyaml-dev  # Marian's model.npz (a zip of .npy arrays) and its YAML options and vocabularies (src/model/marian_format.c)
  libmicrohttpd-dev  # HTTP server of `tern serve` (src/serve/); Debian's is built with GnuTLS: --ssl-cert
  libzip-dev libxml2-dev  # /translate_file and --file-format: .docx/.odt are zip + XML (src/serve/docfile.c)
  openssl  # tests/test_serve_prod.py: a self-signed certificate made at test time for `tern serve --ssl-cert`
  libcld2-dev  # language identification (CLD2): `tern filter --langid`, the server's /detect and source auto
  patchelf  # python/setup.py: the wheel's vendored libraries find each other ($ORIGIN RUNPATHs)
  man-db  # `man -l`: tests/test_install.py renders the man pages `make install` writes
  debhelper lintian)  # `make deb` (debian/: dpkg-buildpackage, dh), lintian on its .debs: tests/test_deb.py

# --- training tests (issue 3) -------------------------------------------------------------------
# tests/test_train_torch.py compares the C training step with PyTorch: Debian's python3-torch
# (1.13, for Debian's /usr/bin/python3 -- the tests run it there, not in .venv, whose pyenv Python
# has no torch) on OpenBLAS: libopenblas0-pthread provides the libblas.so.3 alternative that
# Debian's torch calls (without it, the reference BLAS: ~13x slower). PyPI's torch would pull
# gigabytes of CUDA wheels. TERN_NO_TORCH=1 skips it (the comparison then skips, or fails in CI).
if [ "${TERN_NO_TORCH:-0}" != 1 ]; then
  DEB_PKGS+=(python3-torch libopenblas0-pthread)
fi

# --- web page test of `tern serve` (issues 12, 31) ------------------------------------------------
# tests/test_page.py drives Debian's headless Chromium through chromedriver (Selenium from
# tests/requirements.txt). TERN_NO_BROWSER=1 leaves them out (the test then skips, saying why).
if [ "${TERN_NO_BROWSER:-0}" != 1 ]; then
  DEB_PKGS+=(chromium chromium-driver)
fi

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${TERN_NO_PYTHON:-0}" != 1 ]; then
  PY=${PYTHON:-python3}
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
fi

# --- Hugging Face checkpoints (issue 26) ---------------------------------------------------------
# tests/test_hf_marian.py and tests/test_hf_m2m100.py check Tern's reading of Hugging Face MarianMT
# and M2M-100/NLLB checkpoints against transformers itself: transformers (and sentencepiece, for
# MarianTokenizer, NllbTokenizer and M2M100Tokenizer) from PyPI into Debian's /usr/bin/python3, beside its python3-torch (the test virtual environment has no torch).
# Where that Python has no torch (TERN_NO_TORCH=1), nothing is installed and the test skips.
HF_PKGS=("transformers==4.40.2" "sentencepiece==0.2.0")
if [ "${TERN_NO_PYTHON:-0}" != 1 ]; then
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    /usr/bin/python3 -c "import sentencepiece, transformers as t; assert t.__version__ == '4.40.2'" 2>/dev/null ||
      /usr/bin/python3 -m pip install -q --disable-pip-version-check --break-system-packages "${HF_PKGS[@]}"
  else
    echo "setup.sh: /usr/bin/python3 has no torch: transformers not installed (tests/test_hf_marian.py skips)"
  fi
fi
