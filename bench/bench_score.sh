#!/usr/bin/env bash
# bench_score.sh — seconds to score the WMT22 en-de test set (2,037 lines) with BLEU + chrF:
# `tern score` next to the `sacrebleu` CLI on the same files, measured in one run.
#
#   bash bench/bench_score.sh [REPEATS]
#
# Environment: TERN_BIN (default build/tern), SACREBLEU (default .venv/bin/sacrebleu), PYTHON
# (default .venv/bin/python), TERN_DATA (default ../shared/data). The hypothesis is reference A
# with every fifth word dropped (awk, deterministic), so that the scores are not 100. Each tool runs
# REPEATS times (default 5) one after the other; the best (minimum) wall time of each is reported,
# whole process included (start-up, reading, scoring, printing), and also sacreBLEU's in-process
# time (its Python API, start-up and imports excluded). Both tools must print the same scores.
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${1:-5}
TERN_BIN=${TERN_BIN:-build/tern}
SACREBLEU=${SACREBLEU:-.venv/bin/sacrebleu}
PYTHON=${PYTHON:-.venv/bin/python}
DATA=${TERN_DATA:-../shared/data}
REF=$DATA/wmt22/generaltest2022.en-de.ref.A.de
[ -x "$TERN_BIN" ] || { echo "bench_score: $TERN_BIN missing (run make)" >&2; exit 1; }
[ -x "$SACREBLEU" ] || { echo "bench_score: $SACREBLEU missing (run scripts/setup.sh)" >&2; exit 1; }
[ -f "$REF" ] || { echo "bench_score: $REF missing (set TERN_DATA)" >&2; exit 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HYP=$TMP/hyp.de
awk '{ out = ""; for (i = 1; i <= NF; i++) if (i % 5) out = out (out == "" ? "" : " ") $i; print out }' \
    "$REF" > "$HYP"
LINES=$(wc -l < "$REF")

now() { date +%s%N; }
best() { # best wall seconds of REPEATS runs of "$@" (output to $TMP/out)
  local b=""
  for _ in $(seq "$REPEATS"); do
    local t0 t1
    t0=$(now); "$@" > "$TMP/out" 2>/dev/null; t1=$(now)
    local s=$(( t1 - t0 ))
    if [ -z "$b" ] || [ "$s" -lt "$b" ]; then b=$s; fi
  done
  awk -v ns="$b" 'BEGIN { printf "%.4f", ns / 1e9 }'
}

T_TERN=$(best "$TERN_BIN" score -r "$REF" "$HYP" -m bleu,chrf -b -w 4)
OUT_TERN=$(grep -o '[0-9][0-9.]*' "$TMP/out" | tr '\n' ' ')
T_SACRE=$(best "$SACREBLEU" "$REF" -i "$HYP" -m bleu chrf -b -w 4)
OUT_SACRE=$(grep -o '[0-9][0-9.]*' "$TMP/out" | tr '\n' ' ')
T_API=$("$PYTHON" - "$REF" "$HYP" "$REPEATS" <<'EOF'
import sys, time
from sacrebleu.metrics import BLEU, CHRF
ref = [l.rstrip() for l in open(sys.argv[1], encoding="utf-8", newline="\n")]
hyp = [l.rstrip() for l in open(sys.argv[2], encoding="utf-8", newline="\n")]
best = None
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    BLEU().corpus_score(hyp, [ref]); CHRF().corpus_score(hyp, [ref])
    t = time.perf_counter() - t0
    best = t if best is None or t < best else best
print(f"{best:.4f}")
EOF
)
if [ "$OUT_TERN" != "$OUT_SACRE" ]; then
  echo "bench_score: scores differ: tern [$OUT_TERN] sacrebleu [$OUT_SACRE]" >&2
  exit 1
fi
echo "WMT22 en-de, $LINES lines, BLEU + chrF, best of $REPEATS (BLEU chrF2 = ${OUT_TERN% })"
echo "tern score           ${T_TERN} s"
echo "sacrebleu CLI        ${T_SACRE} s"
echo "sacrebleu API        ${T_API} s  (in-process, imports excluded)"
awk -v a="$T_SACRE" -v b="$T_TERN" -v c="$T_API" \
  'BEGIN { printf "ratio sacrebleu CLI / tern = %.1fx; sacrebleu API / tern = %.1fx\n", a / b, c / b }'
