#!/usr/bin/env bash
# recipes/shrink-gru.sh — the unfold-and-shrink curve of docs/shrink.md: K small GRU members
# (Multi30k en→de, one shared SentencePiece vocabulary, different seeds), their ensemble
# (logit-mean), the unfolded model (`tern shrink --size 1`) and shrunk ones (75 %, 50 %, 1/K);
# BLEU (greedy, test_2016_flickr, `tern score` = sacreBLEU), words/s on 1 thread, size on disk.
#
#   bash recipes/shrink-gru.sh
#   K=3 MINUTES=12 WORK=/some/dir bash recipes/shrink-gru.sh
#
# Members: embeddings 128, GRUs 128, attention 128, tied projection; Adam lr 2e-3 inverse_sqrt,
# dropout 0.2, label smoothing 0.1, max-tokens 2048, MINUTES of wall time each (default 20; a
# rerun resumes them up to MINUTES), the K trained side by side on one thread each. Greedy decoding,
# at most 80 tokens. Results: $WORK/RESULTS.txt; logs in $WORK/m<k>/train.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/shrink-gru}
K=${K:-2}
MINUTES=${MINUTES:-20}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} OMP_NUM_THREADS=1
for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
  [ -f "$DATA/$f" ] || { echo "shrink-gru: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
mkdir -p "$WORK"

# 1. one vocabulary for every member (the unfolded model has one)
[ -f "$WORK/vocab/sentencepiece.model" ] ||
  "$TERN" vocab --model-dir "$WORK/vocab" --source "$DATA/train.en" --target "$DATA/train.de" \
    --vocab-size 4000 --model-type unigram --character-coverage 1.0 -t 1

# 2. K members, side by side
for k in $(seq 1 "$K"); do
  ( nice -n 5 "$TERN" train --resume --architecture rnn-gru --emb-dim 128 --rnn-dim 128 --attention-dim 128 \
      --share-embeddings --vocab "$WORK/vocab" \
      --train-src "$DATA/train.en" --train-tgt "$DATA/train.de" --valid-src "$DATA/val.en" --valid-tgt "$DATA/val.de" \
      --save-dir "$WORK/m$k" --keep-last 1 --dropout 0.2 --label-smoothing 0.1 --clip-norm 5 \
      --lr 0.002 --lr-scheduler inverse_sqrt --warmup 400 --warmup-init-lr 1e-7 --adam-betas 0.9,0.98 \
      --max-tokens 2048 --max-updates 100000 --max-time "${MINUTES}m" --log-interval 100 --seed "$k" -t 1 \
      > "$WORK/m$k.log" 2>&1 ) &
done
wait
members=()
for k in $(seq 1 "$K"); do members+=(-m "$(ls -d "$WORK"/m$k/checkpoint-* | tail -1)"); done

# 3. the ensemble, the unfolded model, the shrunk ones: BLEU, words/s (1 thread), size
src="$DATA/test_2016_flickr.en"; ref="$DATA/test_2016_flickr.de"
words=$(wc -w < "$src")
row() { # name, then tern translate's -m arguments
  local name=$1; shift
  local t0 t1 bleu
  t0=$(date +%s.%N)
  "$TERN" translate "$@" -b 1 --max-decoding-length 80 -t 1 -q "$src" "$WORK/$name.de"
  t1=$(date +%s.%N)
  bleu=$("$TERN" score -r "$ref" "$WORK/$name.de" | sed -n 's/^.*BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1)
  printf '%-14s BLEU %6s  %7.0f words/s\n' "$name" "$bleu" "$(awk "BEGIN { print $words / ($t1 - $t0) }")"
}
{
  echo "shrink-gru: K=$K members of $MINUTES min, $(date -u +%FT%TZ), $("$TERN" --version)"
  for k in $(seq 1 "$K"); do row "member$k" "${members[@]:$(( 2 * k - 2 )):2}"; done
  row ensemble "${members[@]}" --ensemble-mode logit-mean
  for s in 1 0.75 0.5 "1/$K"; do
    name="shrunk-$(echo "$s" | tr / _)"
    "$TERN" shrink "${members[@]}" --size "$s" -o "$WORK/$name"
    row "$name" -m "$WORK/$name"
    echo "$name: $(du -k "$WORK/$name/model.safetensors" | cut -f1) KiB on disk"
  done
  echo "member1: $(du -k "$(ls -d "$WORK"/m1/checkpoint-* | tail -1)/model.safetensors" | cut -f1) KiB on disk"
} | tee "$WORK/RESULTS.txt"
