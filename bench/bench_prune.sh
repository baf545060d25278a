#!/usr/bin/env bash
# bench_prune.sh — beam pruning (--prune-width, --prune-threshold) on the shipped model: seconds and
# sacreBLEU (tern score) of Multi30k test_2016_flickr en->de at beam 4 and 10, one thread, for each
# setting, against no pruning. Prints a Markdown table (docs/decoding.md quotes it).
#
#   bash bench/bench_prune.sh [LINES]
#
# Environment: TERN_BIN (default build/tern), TERN_DATA (default ../shared/data), MODEL (default
# models/en-de). LINES (default 1000: the whole test set). Each setting runs once (best of 2 where
# REPEATS=2); wall time of the whole process.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-1000}
REPEATS=${REPEATS:-1}
TERN_BIN=${TERN_BIN:-build/tern}
DATA=${TERN_DATA:-../shared/data}
MODEL=${MODEL:-models/en-de}
SRC=$DATA/multi30k/test_2016_flickr.en
REF=$DATA/multi30k/test_2016_flickr.de
[ -x "$TERN_BIN" ] || { echo "bench_prune: $TERN_BIN missing (run make)" >&2; exit 1; }
[ -f "$SRC" ] || { echo "bench_prune: $SRC missing (set TERN_DATA)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
head -n "$LINES" "$SRC" > "$TMP/src.en"
head -n "$LINES" "$REF" > "$TMP/ref.de"

echo "| beam | pruning | seconds | speed-up | BLEU | outputs changed |"
echo "|---|---|---|---|---|---|"
for B in 4 10; do
  base_t=""
  for setting in "none" "--prune-width 5" "--prune-width 3" "--prune-width 2" "--prune-threshold 0.001" \
                 "--prune-width 3 --prune-threshold 0.001"; do
    args=()
    [ "$setting" != none ] && read -r -a args <<< "$setting"
    best=""
    for _ in $(seq "$REPEATS"); do
      t0=$(date +%s.%N)
      "$TERN_BIN" translate -m "$MODEL" -b "$B" -t 1 -q "${args[@]}" "$TMP/src.en" "$TMP/out.de"
      t1=$(date +%s.%N)
      t=$(echo "$t1 - $t0" | bc -l)
      if [ -z "$best" ] || [ "$(echo "$t < $best" | bc -l)" = 1 ]; then best=$t; fi
    done
    bleu=$("$TERN_BIN" score -r "$TMP/ref.de" "$TMP/out.de" | sed -n 's/^BLEU[^=]*= *\([0-9.]*\).*/\1/p' | head -1)
    if [ "$setting" = none ]; then
      base_t=$best
      cp "$TMP/out.de" "$TMP/base.de"
    fi
    changed=$(paste -d '\t' "$TMP/base.de" "$TMP/out.de" | awk -F '\t' '$1 != $2' | wc -l)
    printf '| %s | %s | %.2f | %.2f | %s | %s |\n' "$B" "$setting" "$best" "$(echo "$base_t / $best" | bc -l)" \
      "$bleu" "$changed"
  done
done
