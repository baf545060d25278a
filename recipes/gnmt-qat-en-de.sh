#!/usr/bin/env bash
# recipes/gnmt-qat-en-de.sh — GNMT's quantizable model (Wu et al. 2016, section 6; docs/training.md,
# "Quantization-aware training") on a Multi30k slice: a 2+2-layer GNMT (hidden 128) trained with
# the cell/residual clip delta 1 (annealed linearly from 8 over the first 500 updates) and the
# logit clip gamma 25, then test_2016_flickr's first TEST lines translated (beam 4, one thread)
# in float32 and in GNMT's quantized inference (int8 products, 16-bit states: --compute-type
# int8), both scored by `tern score` (sacreBLEU's defaults).
#
#   WORK=/tmp/gnmt-qat bash recipes/gnmt-qat-en-de.sh
#
# Run again to resume. Prints "float32: BLEU ...", "int8: BLEU ..." and how many lines are equal.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/gnmt-qat}
NTRAIN=${NTRAIN:-8000}
UPDATES=${UPDATES:-2000}
TEST=${TEST:-500}
THREADS=${THREADS:-2}
mkdir -p "$WORK" && cd "$WORK"
head -n "$NTRAIN" "$DATA/train.en" > train.en && head -n "$NTRAIN" "$DATA/train.de" > train.de
head -n 300 "$DATA/val.en" > valid.en && head -n 300 "$DATA/val.de" > valid.de
head -n "$TEST" "$DATA/test_2016_flickr.en" > test.en && head -n "$TEST" "$DATA/test_2016_flickr.de" > test.de
[ -d vocab ] || "$TERN" vocab --model-dir vocab --source train.en --target train.de --vocab-size 2000 -t 1
resume=()
ls -d save/checkpoint-* > /dev/null 2>&1 && resume=(--resume)
"$TERN" train --architecture gnmt --vocab vocab --cache-dir cache --save-dir save --layers 2 --hidden 128 \
  --init-uniform 0.1 --clip-norm 5 -t "$THREADS" --no-plot -q --train-src train.en --train-tgt train.de \
  --valid-src valid.en --valid-tgt valid.de --max-tokens 2000 --lr 5e-3 --warmup 100 --dropout 0.1 \
  --max-updates "$UPDATES" --valid-interval-updates 500 --no-bleu --keep-last 1 \
  --gnmt-clip-delta 1 --gnmt-clip-delta-start 8 --gnmt-clip-anneal 500 --gnmt-clip-gamma 25 "${resume[@]}"
CK=$(ls -d save/checkpoint-* | tail -1)
for ct in float32 int8; do
  "$TERN" translate -m "$CK" --compute-type "$ct" -b 4 -t 1 -q < test.en > "hyp.$ct.de"
  echo "$ct: $("$TERN" score -r test.de "hyp.$ct.de" | head -1)"
done
echo "identical lines: $(paste -d '\t' hyp.float32.de hyp.int8.de | awk -F'\t' '$1==$2' | wc -l) / $TEST"
