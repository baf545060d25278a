#!/usr/bin/env bash
# Builds the fuzz targets (model loaders, the text segmenter of `tern serve`; make fuzz: clang +
# libFuzzer + ASan/UBSan) and runs each
# for a bounded time on a seed corpus written at run time (tiny valid models, see
# fuzz/fuzz_common.h), with the format's dictionary. Exits non-zero when a target crashes, leaks,
# hits undefined behaviour or a timeout; the input that did it is kept in build-fuzz/artifacts/.
#   TERN_FUZZ_SECONDS   seconds per target (default 30: CI stays under 30 minutes), except
#   TERN_FUZZ_SHORTLIST_SECONDS  for fuzz_shortlist (default 10: its reader is small, ~14,000
#                       inputs a second; CI's budget is nearly used)
#   TERN_FUZZ_MARIAN_SECONDS  for fuzz_marian_npz and fuzz_marian_bin (default 20 each: Marian's
#                       model directory is written to /dev/shm per input, ~1,000 inputs a second)
#   TERN_FUZZ_CORPUS    keep the corpus here between runs (default: a temporary directory)
#   TERN_FUZZ_JOBS      targets run at once (default: nproc; each target is one libFuzzer process on
#                       one core, so running them side by side gives each the same time and executions
#                       as one after the other, in a fraction of the wall time)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${TERN_FUZZ_SECONDS:-30}

if ! command -v clang >/dev/null; then
  echo "fuzz_ci.sh: clang is missing (scripts/setup.sh installs it)" >&2
  exit 1
fi
make -j"$(nproc)" --no-print-directory fuzz

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus_root=${TERN_FUZZ_CORPUS:-$work/corpus}
mkdir -p build-fuzz/artifacts "$corpus_root"

jobs=${TERN_FUZZ_JOBS:-$(nproc)}
names=()
for target in build-fuzz/fuzz_*; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  names+=("$name")
  corpus="$corpus_root/$name"
  mkdir -p "$corpus"
  TERN_FUZZ_SEEDS="$corpus" "$target" -runs=0 >/dev/null 2>&1   # writes the seeds
  dict="fuzz/${name#fuzz_}.dict"
  t=$seconds
  [ "$name" = fuzz_shortlist ] && t=${TERN_FUZZ_SHORTLIST_SECONDS:-10}
  case $name in fuzz_marian_*) t=${TERN_FUZZ_MARIAN_SECONDS:-20} ;; esac
  args=(-max_total_time="$t" -timeout=10 -rss_limit_mb=2048 -max_len=16384
        -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-")
  [ -f "$dict" ] && args+=(-dict="$dict")
  echo "== $name: ${t}s on $(ls "$corpus" | wc -l) seed inputs" > "$work/$name.head"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  { "$target" "${args[@]}" "$corpus" >"$work/$name.log" 2>&1 && echo 0 || echo $?; } > "$work/$name.rc" &
done
wait
status=0
for name in "${names[@]}"; do
  cat "$work/$name.head"
  if [ "$(cat "$work/$name.rc")" = 0 ]; then
    grep -E "^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added)" \
      "$work/$name.log" || true
  else
    status=1
    echo "FAIL $name: see the report below; the input is in build-fuzz/artifacts/" >&2
    tail -60 "$work/$name.log" >&2
  fi
done
exit $status
