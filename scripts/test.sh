#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs dependencies, builds, runs the C unit tests
# under ASan/UBSan, runs the fuzzers for a bounded time, then the full pytest suite (C unit tests
# + peer tests against ctranslate2 and sacrebleu), whose summary line closes the output.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -j"$(nproc)"
make -j"$(nproc)" SAN=1 build-san/libtern.a
make SAN=1 test-c
if [ -x scripts/fuzz_ci.sh ] && [ "${TERN_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz_ci.sh
fi
.venv/bin/python -m pytest -q tests
