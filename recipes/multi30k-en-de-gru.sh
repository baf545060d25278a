#!/usr/bin/env bash
# recipes/multi30k-en-de-gru.sh — English→German on Multi30k (task 1) with the GRU family
# (`tern train --architecture rnn-gru`, the SDL papers' FNMT; docs/rnn.md), on 2 cores.
#
#   bash recipes/multi30k-en-de-gru.sh
#   WORK=/some/dir THREADS=2 SEED=2 bash recipes/multi30k-en-de-gru.sh
#   MAX_UPDATES=50 WORK=/tmp/smoke bash recipes/multi30k-en-de-gru.sh    # a short smoke run
#
# Data: ../shared/data/multi30k (TERN_DATA overrides ../shared/data): train (29,000 pairs), val
# (1,014) for validation (loss; BLEU with beam 5 at epoch ends), test_2016_flickr (1,000) for the
# final score only.
#
# Model: bidirectional GRU encoder of 256 per direction, conditional GRU decoder of 256, additive
# attention 256, embeddings and deep output 256, one joint SentencePiece unigram vocabulary of
# 8,000 pieces shared by both embeddings and the output layer (tied). Adam (0.9, 0.98), lr 2e-3
# with inverse_sqrt after 1,000 warm-up updates, gradient clipping at norm 5, dropout 0.3 on the
# embeddings, label smoothing 0.1, max-tokens 4096, 12,000 updates or 3 h of wall time (measured
# 1.5 s per update on the shared 2 cores, 2,100 target tok/s: 3 h is about 7,000 updates); the last
# 5 epoch checkpoints averaged; beam 5 with the length penalty that is best on val.
#
# Resumable: run again and training continues from the last checkpoint (`--resume`).
# Results: $WORK/RESULTS.txt; the log in $WORK/ckpt/train.log. Not run in CI.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN_SRC=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/multi30k-en-de-gru}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
MAX_UPDATES=${MAX_UPDATES:-12000}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
  [ -f "$DATA/$f" ] || { echo "multi30k-en-de-gru: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
[ -x "$TERN_SRC" ] || { echo "multi30k-en-de-gru: $TERN_SRC not found: build with make (or set TERN_BIN)" >&2; exit 1; }
mkdir -p "$WORK"
[ -x "$WORK/tern" ] || cp "$TERN_SRC" "$WORK/tern"
TERN="$WORK/tern"
echo "multi30k-en-de-gru: work directory $WORK, $THREADS thread(s), seed $SEED, $($TERN --version)"

# 1. vocabulary
if [ ! -f "$WORK/vocab/sentencepiece.model" ]; then
  "$TERN" vocab --model-dir "$WORK/vocab" --source "$DATA/train.en" --target "$DATA/train.de" \
    --vocab-size 8000 --model-type unigram --character-coverage 1.0 -t "$THREADS"
fi

# 2. training
start=$(date +%s)
nice -n 5 "$TERN" train --resume \
  --architecture rnn-gru --emb-dim 256 --rnn-dim 256 --attention-dim 256 --share-embeddings \
  --vocab "$WORK/vocab" \
  --train-src "$DATA/train.en" --train-tgt "$DATA/train.de" \
  --valid-src "$DATA/val.en" --valid-tgt "$DATA/val.de" \
  --save-dir "$WORK/ckpt" --keep-last 5 \
  --dropout 0.3 --label-smoothing 0.1 --clip-norm 5 \
  --lr 0.002 --lr-scheduler inverse_sqrt --warmup 1000 --warmup-init-lr 1e-7 --adam-betas 0.9,0.98 \
  --max-tokens 4096 --max-updates "$MAX_UPDATES" --max-time 3h \
  --bleu-beam 5 --bleu-length-penalty 1.0 --log-interval 100 --seed "$SEED" -t "$THREADS"
echo "multi30k-en-de-gru: training took $(( $(date +%s) - start )) s in this invocation"

# 3. the average of the last checkpoints
n=$(ls -d "$WORK"/ckpt/checkpoint-* | wc -l)
"$TERN" average -o "$WORK/averaged" --last $(( n < 5 ? n : 5 )) "$WORK/ckpt"

# 4. length penalty on val, then test_2016_flickr with beam 5
bleu() { "$TERN" score -r "$1" "$2" | sed -n 's/^.*BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1; }
best_lp=0; best=-1
for lp in 0 0.6 1.0; do
  "$TERN" translate -m "$WORK/averaged" -b 5 --length-penalty "$lp" -t "$THREADS" -q \
    "$DATA/val.en" "$WORK/val.lp$lp.de"
  b=$(bleu "$DATA/val.de" "$WORK/val.lp$lp.de")
  echo "val: length penalty $lp: BLEU $b"
  if awk "BEGIN { exit !($b > $best) }"; then best=$b; best_lp=$lp; fi
done
"$TERN" translate -m "$WORK/averaged" -b 5 --length-penalty "$best_lp" -t "$THREADS" -q \
  "$DATA/test_2016_flickr.en" "$WORK/test.de"
{
  echo "recipe: multi30k-en-de-gru (seed $SEED)"
  echo "test_2016_flickr, averaged model, beam 5, length penalty $best_lp:"
  "$TERN" score -r "$DATA/test_2016_flickr.de" "$WORK/test.de"
} | tee "$WORK/RESULTS.txt"
