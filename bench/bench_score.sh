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
# time (its Python API, start-up and imports excluded). Wall and CPU (user + system) times are both
# reported: CPU time is the steadier one on a shared machine. Both tools must print the same scores.
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
# best() runs "$@" REPEATS times (output to $TMP/out) and prints "WALL CPU": the minimum wall
# seconds and the minimum CPU seconds (user + system, from the shell's `times`) over the runs.
# CPU time is the steadier figure on a shared machine.
best() {
  local bw="" bc=""
  for _ in $(seq "$REPEATS"); do
    local t0 t1 c
    t0=$(now)
    c=$( { "$@" > "$TMP/out" 2>/dev/null; times; } | tail -1 |
         awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); n += a[1] * 60 + a[2] } printf "%d", n * 1e6 }')
    t1=$(now)
    local w=$(( (t1 - t0) / 1000 ))
    if [ -z "$bw" ] || [ "$w" -lt "$bw" ]; then bw=$w; fi
    if [ -z "$bc" ] || [ "$c" -lt "$bc" ]; then bc=$c; fi
  done
  awk -v w="$bw" -v c="$bc" 'BEGIN { printf "%.4f %.3f\n", w / 1e6, c / 1e6 }'
}

read -r T_TERN C_TERN < <(best "$TERN_BIN" score -r "$REF" "$HYP" -m bleu,chrf -b -w 4)
OUT_TERN=$(grep -o '[0-9][0-9.]*' "$TMP/out" | tr '\n' ' ')
read -r T_SACRE C_SACRE < <(best "$SACREBLEU" "$REF" -i "$HYP" -m bleu chrf -b -w 4)
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
echo "                     wall      CPU (user+sys)"
echo "tern score           ${T_TERN} s  ${C_TERN} s"
echo "sacrebleu CLI        ${T_SACRE} s  ${C_SACRE} s"
echo "sacrebleu API        ${T_API} s            (in-process wall time, imports excluded)"
awk -v a="$T_SACRE" -v b="$T_TERN" -v c="$C_SACRE" -v d="$C_TERN" -v e="$T_API" \
  'BEGIN { printf "ratio sacrebleu CLI / tern: %.1fx wall, %.1fx CPU; sacrebleu API / tern: %.1fx wall\n", a / b, c / d, e / b }'
