#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs dependencies, builds, runs the C unit tests
# under ASan/UBSan, runs the fuzzers for a bounded time, runs the CLI-level tests against a
# sanitizer build of `tern`, then the full pytest suite (C unit tests + peer tests against
# ctranslate2, sacreBLEU and the others), whose summary line closes the output.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -j"$(nproc)"
make -j"$(nproc)" SAN=1 build-san/libtern.a build-san/libtern.so build-san/tern build-san/examples/translate_api \
  build-san/examples/translate_api_shared \
  build-san/tests/tools/search_driver build-san/tests/tools/prefix_api_driver
make SAN=1 test-c
# Every instruction set this CPU allows below its own (the uncapped runs above and below cover the
# top one): the kernel tests under ASan/UBSan and the int8 agreement with CTranslate2, with Tern's
# dispatch, oneDNN's and MKL's (CTranslate2's int8 GEMM here) capped alike (docs/kernels.md).
caps=$(build/tern cpu --caps)
echo "== instruction-set caps this CPU allows: $(echo $caps) (top one: the uncapped runs)"
for cap in $(echo "$caps" | head -n -1); do
  mkl=""; case $cap in AVX2) mkl=AVX2;; AVX512_CORE) mkl=AVX512;; esac
  echo "== cap $cap: kernel tests (ASan/UBSan) and int8 agreement with CTranslate2"
  TERN_MAX_CPU_ISA=$cap ONEDNN_MAX_CPU_ISA=$cap MKL_ENABLE_INSTRUCTIONS=$mkl build-san/tests/test_kernels | grep -E "int8 GEMM|int8 packed|gemm_s8v|packed float32|test_kernels"
  TERN_MAX_CPU_ISA=$cap ONEDNN_MAX_CPU_ISA=$cap MKL_ENABLE_INSTRUCTIONS=$mkl \
    .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/test_translate_peer.py -k int8 | grep -E "agreement|median|passed|failed"
done
if [ -f scripts/fuzz_ci.sh ] && [ "${TERN_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz_ci.sh
fi
# Bad input, raw text, formats, the C API example, continuous batching (greedy and beam), the
# scorer/filter and the server under ASan + UBSan.
san_tests=(tests/test_translate_text.py tests/test_examples.py)
for t in tests/test_score_peer.py tests/test_filter.py tests/test_serve.py; do [ -f "$t" ] && san_tests+=("$t"); done
echo "== CLI tests against the ASan/UBSan build (build-san/tern)"
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider "${san_tests[@]}"
# Continuous beam search under ASan/UBSan: three of test_continuous's cases (all of them, the Python
# API's included, run in the full suite on the plain build; the sanitizer build is ~6x slower)
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_continuous.py \
  -k "beam4-bs4 or beam5-minlen3 or beam4-paper-prune"
# The search's processors (prefixes, suppression, restriction, constraints, LMBR) and `tern mbr`.
TERN_BIN=build-san/tern SEARCH_DRIVER=build-san/tests/tools/search_driver \
  PREFIX_API_DRIVER=build-san/tests/tools/prefix_api_driver .venv/bin/python -m pytest -q \
  -p no:cacheprovider tests/test_search_constraints.py tests/test_lmbr.py tests/test_mbr.py -k "not speed"
echo "== full test suite"
.venv/bin/python -m pytest -q tests
