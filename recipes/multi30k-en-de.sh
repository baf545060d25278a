#!/usr/bin/env bash
# recipes/multi30k-en-de.sh — English→German on Multi30k (task 1) with `tern train`, on 2 cores.
#
#   bash recipes/multi30k-en-de.sh            # everything: vocabulary, training, averaging, BLEU
#   WORK=/some/dir THREADS=2 bash recipes/multi30k-en-de.sh
#   SEED=2 WORK=/some/dir2 bash recipes/multi30k-en-de.sh   # another seed (ensemble members)
#
# Data: ../shared/data/multi30k (TERN_DATA overrides ../shared/data): train (29,000 pairs) to train
# on, val (1,014) to validate on (loss, and BLEU with beam 5 at each epoch end), test_2016_flickr
# (1,000) for the final score only.
#
# Model and recipe: fairseq's Multi30k "transformer_tiny" set-up (Wu et al. 2021; see
# ../shared/REFERENCE.md) with a wider feed-forward: 4+4 layers, d 128, ff 512, 4 heads, pre-norm,
# ReLU, one joint SentencePiece unigram vocabulary of 8,000 pieces shared by both embeddings and
# the output projection; Adam (0.9, 0.98), decoupled weight decay 1e-4, inverse_sqrt with lr 0.005
# after 2,000 warm-up updates from 1e-7, no clipping, dropout 0.3, label smoothing 0.1,
# max-tokens 4096, 8,000 updates (about 59 epochs) or 3 hours of wall time, whichever comes first
# (validation BLEU at epoch ends with beam 5 and length penalty 1);
# the last 10 epoch checkpoints averaged; beam 5 with the length penalty that is best on val.
#
# Resumable: run the script again and training continues exactly where the last checkpoint left
# it (`--resume`); finished steps are skipped. Results: $WORK/RESULTS.txt, curves in
# $WORK/ckpt/curves.png, the log in $WORK/ckpt/train.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN_SRC=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/multi30k-en-de}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
# libgomp's spinning barriers collapse when the cores are shared with other work: sleep instead.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
  [ -f "$DATA/$f" ] || { echo "multi30k-en-de: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
[ -x "$TERN_SRC" ] || { echo "multi30k-en-de: $TERN_SRC not found: build with make (or set TERN_BIN)" >&2; exit 1; }
mkdir -p "$WORK"
# a private copy of the binary: rebuilding the tree does not change a run under way
[ -x "$WORK/tern" ] || cp "$TERN_SRC" "$WORK/tern"
TERN="$WORK/tern"
echo "multi30k-en-de: work directory $WORK, $THREADS thread(s), seed $SEED, $($TERN --version)"

# 1. vocabulary: one SentencePiece model over both sides of the training data
if [ ! -f "$WORK/vocab/sentencepiece.model" ]; then
  "$TERN" vocab --model-dir "$WORK/vocab" --source "$DATA/train.en" --target "$DATA/train.de" \
    --vocab-size 8000 --model-type unigram --character-coverage 1.0 -t "$THREADS"
fi

# 2. training (continues from the newest checkpoint when there is one)
# A run that dies (a crash, a kill -9) is resumed from its last checkpoint, 5 times at most.
start=$(date +%s)
attempt=1
until nice -n 5 "$TERN" train --resume \
  --vocab "$WORK/vocab" \
  --train-src "$DATA/train.en" --train-tgt "$DATA/train.de" \
  --valid-src "$DATA/val.en" --valid-tgt "$DATA/val.de" \
  --save-dir "$WORK/ckpt" --keep-last 10 \
  --layers 4 --d-model 128 --ff 512 --heads 4 --pre-norm --activation relu --share-embeddings \
  --dropout 0.3 --label-smoothing 0.1 \
  --lr 0.005 --lr-scheduler inverse_sqrt --warmup 2000 --warmup-init-lr 1e-7 \
  --adam-betas 0.9,0.98 --adam-eps 1e-8 --weight-decay 0.0001 \
  --max-tokens 4096 --max-updates 8000 --max-time 3h \
  --bleu-beam 5 --bleu-length-penalty 1.0 --log-interval 100 --seed "$SEED" -t "$THREADS"
do
  rc=$?
  echo "multi30k-en-de: tern train exited with status $rc (attempt $attempt); resuming" >&2
  [ "$attempt" -lt 5 ] || exit "$rc"
  attempt=$((attempt + 1))
done
echo "multi30k-en-de: training took $(( $(date +%s) - start )) s in this invocation (see train.log for the total)"

# 3. the average of the last 10 checkpoints (one per epoch)
"$TERN" average -o "$WORK/averaged" --last 10 "$WORK/ckpt"

# 4. the length penalty (0, 0.6 or 1.0; CTranslate2's score / length^alpha) chosen on val with the
#    averaged model, then test_2016_flickr with beam 5: the last checkpoint and the average
bleu() { "$TERN" score -r "$1" "$2" | sed -n 's/^.*BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1; }
: > "$WORK/val_lp.txt"
for lp in 0 0.6 1.0; do
  "$TERN" translate -m "$WORK/averaged" -b 5 --length-penalty $lp -t "$THREADS" -q "$DATA/val.en" "$WORK/val.lp$lp.de"
  echo "val, averaged, beam 5, length penalty $lp: BLEU $(bleu "$DATA/val.de" "$WORK/val.lp$lp.de")" | tee -a "$WORK/val_lp.txt"
done
best_lp=$(awk '{lp = $7; sub(":", "", lp); if ($9 > best) { best = $9; b = lp } } END { print b }' "$WORK/val_lp.txt")
last=$(ls -d "$WORK"/ckpt/checkpoint-* | sort | tail -1)
{
  echo "Multi30k en-de, test_2016_flickr, beam 5, length penalty $best_lp (best on val), sacreBLEU defaults (tern score)"
  echo "training: $(grep ' done (' "$WORK/ckpt/train.log" | tail -1 | cut -c 23-)"
  cat "$WORK/val_lp.txt"
  for m in "$last" "$WORK/averaged"; do
    "$TERN" translate -m "$m" -b 5 --length-penalty "$best_lp" -t "$THREADS" -q "$DATA/test_2016_flickr.en" \
      "$WORK/test.$(basename "$m").de"
    echo "test_2016_flickr, $(basename "$m"): $("$TERN" score -r "$DATA/test_2016_flickr.de" "$WORK/test.$(basename "$m").de")"
  done
} | tee "$WORK/RESULTS.txt"
