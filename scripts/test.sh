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
# LeakSanitizer's suppressions: memory that is not Tern's (tests/lsan.supp says which and why)
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# Runs C unit test programs a core at a time (as tests/test_c_units.py runs them under xdist):
# run_c_tests LABEL PROGRAM... with the environment the caller exports; prints "LABEL: N passed,
# M failed" (and each failure's last lines); fails when any failed.
run_c_tests() {
  local label=$1; shift
  local dir pass=0 fail=0 t
  dir=$(mktemp -d)
  for t in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
    { "$t" > "$dir/$(basename "$t").log" 2>&1 && echo 0 || echo $?; } > "$dir/$(basename "$t").rc" &
  done
  wait
  for t in "$@"; do
    if [ "$(cat "$dir/$(basename "$t").rc")" = 0 ]; then pass=$((pass + 1)); else
      fail=$((fail + 1)); echo "FAIL $t ($label)"; tail -20 "$dir/$(basename "$t").log"; fi
  done
  rm -rf "$dir"
  echo "$label: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
san_c_tests=()
for c in tests/c/test_*.c; do san_c_tests+=("build-san/tests/$(basename "$c" .c)"); done
make -j"$(nproc)" SAN=1 "${san_c_tests[@]}"
run_c_tests "C unit tests under ASan/UBSan" "${san_c_tests[@]}"
# Every instruction set this CPU allows below its own (the uncapped runs below cover the top one),
# with Tern's libraries capped alike: Tern's dispatch (TERN_MAX_CPU_ISA), oneDNN's
# (ONEDNN_MAX_CPU_ISA) and, at AVX2, OpenBLAS's core type (Haswell: what OpenBLAS runs on an
# AVX2-only Zen 3 or Haswell). The peer is not capped: MKL_ENABLE_INSTRUCTIONS=AVX2 (or AVX512) on an
# Intel CPU sends CTranslate2's int8 GEMM to MKL's u8*s8 kernel without VNNI, whose 16-bit pair sums
# saturate (its int8 log-probs then move by up to 0.9 from exact: the reference would be wrong, not
# Tern), while uncapped MKL is exact, as it is on an AVX2-only AMD CPU (docs/kernels.md). Under each cap: every C
# unit test (plain build: test_kernels checks every kernel the cap selects against its reference) and
# the kernel tests under ASan/UBSan. Under the AVX2 cap (the AVX2-only machines CI also runs on:
# Zen 3) also the pytest files whose results depend on float arithmetic (ARITH_TESTS: parity with
# CTranslate2 and PyTorch, the searches on real models, the shipped model's BLEU, quantization-aware
# training against int8 decoding), so that an AVX-512
# machine shows what an AVX2-only one would (docs/kernels.md); the caps between AVX2 and the top one
# (AVX512_CORE, AVX512_CORE_VNNI: no machine CI runs on stops there) run their kernels' C tests only,
# which keeps CI within its 30 minutes on a 2-core AVX512_CORE_BF16 Xeon (the ARITH_TESTS took
# ~65 s a cap there). On an AVX2-only CPU the list of lower caps is empty: the uncapped runs
# are the AVX2 runs. A cap costs ~3 min on a 2-core Zen 3 (C units ~40 s, ARITH_TESTS ~2 min); the
# recurrent families' arithmetic is covered per cap by their C units (test_rnn_grad, test_rnn_gru,
# test_gnmt: double-precision references), their PyTorch comparisons run uncapped only.
ARITH_TESTS=(tests/test_translate_peer.py tests/test_ensemble_peer.py tests/test_translate_text.py
  tests/test_search_constraints.py tests/test_screen.py tests/test_shipped_model.py
  tests/test_train_torch.py tests/test_qat_torch.py)
caps=$(build/tern cpu --caps)
echo "== instruction-set caps this CPU allows: $(echo $caps) (top one: the uncapped runs)"
for cap in $(echo "$caps" | head -n -1); do
  capenv=(TERN_MAX_CPU_ISA=$cap ONEDNN_MAX_CPU_ISA=$cap)
  [ "$cap" = AVX2 ] && capenv+=(OPENBLAS_CORETYPE=Haswell)
  echo "== cap $cap (${capenv[*]}): every C unit test"
  ( export "${capenv[@]}"; run_c_tests "cap $cap C unit tests" build/tests/test_* )
  echo "== cap $cap: kernel tests under ASan/UBSan"
  env "${capenv[@]}" build-san/tests/test_kernels | grep -E "int8 GEMM|int8 packed|gemm_s8v|packed float32|test_kernels"
  [ "$cap" = AVX2 ] || continue
  echo "== cap $cap: the arithmetic-dependent peer tests"
  env "${capenv[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider -n "$(nproc)" --dist loadfile "${ARITH_TESTS[@]}"
done
if [ -f scripts/fuzz_ci.sh ] && [ "${TERN_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz_ci.sh
fi
# Bad input, raw text, formats, the C API example, continuous batching (greedy and beam), the
# scorer/filter and the server under ASan + UBSan (tests/test_serve_prod.py: X-Forwarded-For and
# --trusted-proxies parsing, TLS, the access log, the connection watchdog; tests/c/test_netaddr.c
# runs in `make SAN=1 test-c` above).
san_tests=(tests/test_translate_text.py tests/test_examples.py tests/test_generation_config.py)
for t in tests/test_score_peer.py tests/test_filter.py tests/test_serve.py tests/test_serve_prod.py tests/test_html_tags.py \
         tests/test_translate_file.py; do  # test_translate_file: /translate_file's zip, XML and UTF-8 parsing, bad files
  [ -f "$t" ] && san_tests+=("$t")
done
echo "== CLI tests against the ASan/UBSan build (build-san/tern)"
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider -n "$(nproc)" --dist loadfile "${san_tests[@]}"
# LibreTranslate's request forms, /detect and its bad input under ASan/UBSan (the parsers; the
# accuracy and pivot cases run in the full suite)
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_langid.py \
  -k "bad_input or request_forms or detect_api_keys"
# Hugging Face checkpoints under ASan/UBSan: bad checkpoints, greedy, force decoding and raw text on
# the first shape (the whole file runs in the full suite)
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_hf_marian.py \
  -k "d32 and (bad_checkpoints or greedy or raw_text)"
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_hf_m2m100.py \
  -k "nllb and (bad_checkpoints or greedy or raw_text or languages)"
# `tern convert --to hf` (refusals, Tern reading the export back) and multilingual serving (unknown
# languages, concurrent requests of several languages) under ASan/UBSan; the whole files run in the full suite
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_hf_export.py \
  -k "refusals or reads_export_back"
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_serve_multilingual.py \
  -k "unknown or concurrent"
# Continuous beam search under ASan/UBSan: three of test_continuous's cases (all of them, the Python
# API's included, run in the full suite on the plain build; the sanitizer build is ~6x slower)
TERN_BIN=build-san/tern .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_continuous.py \
  -k "beam4-bs4 or beam5-minlen3 or beam4-paper-prune"
# The search's processors (prefixes, suppression, restriction, constraints, LMBR) and `tern mbr`.
TERN_BIN=build-san/tern SEARCH_DRIVER=build-san/tests/tools/search_driver \
  PREFIX_API_DRIVER=build-san/tests/tools/prefix_api_driver .venv/bin/python -m pytest -q \
  -p no:cacheprovider -n "$(nproc)" --dist loadfile tests/test_search_constraints.py tests/test_lmbr.py \
  tests/test_mbr.py -k "not speed"
echo "== full test suite (one test file per worker, a worker per core: pytest-xdist)"
.venv/bin/python -m pytest -q -n "$(nproc)" --dist loadfile tests
