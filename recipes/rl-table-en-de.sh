#!/usr/bin/env bash
# recipes/rl-table-en-de.sh — the GNMT paper's Table 2/3 contrast on Multi30k en→de (issue 28 point
# 4a): the ML model (the shipped models/en-de) against the same model after RL refinement with the
# GLEU reward (recipes/rl-refine-en-de.sh, whose settings are passed through: OPT, LR, M, VALID,
# UPDATES, SEED, THREADS), each decoded on val and test_2016_flickr (the Multi30k sets in
# ../shared/data; its 2017/2018 test sets are not there) with beam 5 and
#   - no length normalization and no coverage penalty (alpha 0, beta 0),
#   - CTranslate2's length penalty 1.0 (score / |Y|), the model card's setting,
#   - GNMT's length normalization and coverage penalty (lp(Y) = (5 + |Y|)^alpha / 6^alpha, alpha 0.2,
#     beta 0.2, the paper's Table 2 values),
# scored by `tern score` (sacreBLEU's defaults). Prints a Markdown table.
#
#   OPT=sgd LR=0.1 M=6 VALID=20 UPDATES=40 THREADS=1 SEED=1 WORK=/tmp/rltab bash recipes/rl-table-en-de.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
MODEL=${MODEL:-$ROOT/models/en-de}
export OPT=${OPT:-sgd} LR=${LR:-0.1} M=${M:-6} VALID=${VALID:-20} UPDATES=${UPDATES:-40} SEED=${SEED:-1}
export THREADS=${THREADS:-1} WORK=${WORK:-/tmp/tern-recipes/rl-table-en-de} MODEL
bash "$ROOT/recipes/rl-refine-en-de.sh"
RUN=$WORK/$OPT-seed$SEED
best=$(awk '!/^#/ && $6 >= 0 { if ($6 > b) { b = $6; u = $1 } } END { print u }' "$RUN/ckpt/valid_curve.tsv")
REFINED=$(printf '%s/ckpt/checkpoint-%08d' "$RUN" "$best")
bleu() { "$TERN" score -r "$1" "$2" | sed -n 's/^.*BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1; }
configs=("none:--length-penalty 0 --coverage-penalty 0"
         "plain1:--length-penalty 1.0 --coverage-penalty 0"
         "gnmt:--length-norm gnmt --length-penalty 0.2 --coverage-penalty 0.2")
echo "| model | decoding | val BLEU | test_2016_flickr BLEU |"
echo "|---|---|---|---|"
for m in "ML:$MODEL" "ML+RL (update $best):$REFINED"; do
  name=${m%%:*} dir=${m#*:}
  for c in "${configs[@]}"; do
    cname=${c%%:*} flags=${c#*:}
    row="| $name | $cname |"
    for set in val test_2016_flickr; do
      out=$WORK/table.$(basename "$dir").$cname.$set.de
      # float32 compute for both models (the refined checkpoints are float32; the shipped one is int8)
      [ -f "$out" ] || { "$TERN" translate -m "$dir" --compute-type float32 -b 5 $flags -t "$THREADS" -q \
          "$DATA/$set.en" "$out.tmp" && mv "$out.tmp" "$out"; }
      row="$row $(bleu "$DATA/$set.de" "$out") |"
    done
    echo "$row"
  done
done
