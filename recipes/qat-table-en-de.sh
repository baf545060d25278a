#!/usr/bin/env bash
# recipes/qat-table-en-de.sh — docs/training.md's table 4(b) (issue 28 point 4b; the contrast of GNMT's
# Table 1 on this CPU): float32 vs int8 decoding of models fine-tuned with and without
# quantization-aware training (`tern train --qat int8`), BLEU on Multi30k test_2016_flickr
# (beam 5, length penalty 1, `tern score`: sacreBLEU's defaults).
#
# Transformer: the shipped models/en-de (stored int8, read as float32) fine-tuned UPDATES updates
# (constant lr LR, dropout 0.3, the full Multi30k training set) three times from the same start with
# the same batches: plain, with --qat int8 (weights) and with --qat int8-act (weights and every
# linear layer's input rows). Each checkpoint is decoded in float32 and, after `tern convert
# --quantize int8` (every DESC_Q8 matrix per row: what QAT rounded), in int8. (docs/training.md's
# table started from the second release, commit 30b8d4b: MODEL=DIR sets the start.)
# GNMT: recipes/gnmt-qat-en-de.sh's shape (2+2 layers, hidden 128, 8000 pairs, GNMT_UPDATES
# updates) trained three ways: plain, with GNMT's clips (delta 1 annealed from 8, gamma 25: its
# quantized inference keeps 16-bit states), and with the clips plus --qat int8; each decoded in
# float32, int8 (post-training; for a clipped model this is GNMT's quantized path with 16-bit
# states) on the whole test set; and the plain model put on GNMT's quantized path post-training
# (`tern convert --gnmt-clip-delta 1 --gnmt-clip-gamma 25`: the clips it never trained with).
#
#   WORK=/tmp/qat-table bash recipes/qat-table-en-de.sh            # both
#   PART=transformer WORK=/tmp/qat-table bash recipes/qat-table-en-de.sh
#
# Prints one line per (model, decoding): BLEU and its n-gram precisions. Run again to reuse the
# trained checkpoints.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/qat-table}
PART=${PART:-all}
UPDATES=${UPDATES:-300}
LR=${LR:-1e-4}
GNMT_UPDATES=${GNMT_UPDATES:-2000}
THREADS=${THREADS:-1}
START=${MODEL:-$ROOT/models/en-de}
mkdir -p "$WORK" && cd "$WORK"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

score() { "$TERN" score -r "$DATA/test_2016_flickr.de" "$1" | head -1 | sed 's/^BLEU|[^=]*= //'; }
# per-token nll of the test references under forced decoding (tern rescore): the finer measure
nll() { "$TERN" rescore -m "$1" -s "$DATA/test_2016_flickr.en" --target "$DATA/test_2016_flickr.de" \
    --compute-type "$2" -t "$THREADS" | awk -F'[|][|][|]' '{ n += split($1, a, " "); s += $2 } END { printf "%.5f", -s / n }'; }
same() { echo "$(paste -d '\t' "$1" "$2" | awk -F'\t' '$1==$2' | wc -l) of $(wc -l < "$1") outputs identical"; }
decode() { # model-dir compute-type out
  "$TERN" translate -m "$1" --compute-type "$2" -b 5 --length-penalty 1.0 -t "$THREADS" -q \
    < "$DATA/test_2016_flickr.en" > "$3"
}

if [ "$PART" = all ] || [ "$PART" = transformer ]; then
  mkdir -p shipped # the starting point (stored int8; float32 = its dequantized weights)
  for ct in float32 int8; do decode "$START" "$ct" "shipped/hyp.$ct.de"; done
  for ct in float32 int8; do echo "transformer, models/en-de, $ct: $(score "shipped/hyp.$ct.de")"; done
  echo "transformer, models/en-de: $(same shipped/hyp.float32.de shipped/hyp.int8.de)"
  echo "transformer, models/en-de: test nll float32 $(nll "$START" float32), int8 $(nll "$START" int8)"
  for qat in none int8 int8-act; do
    mkdir -p "tf-$qat"
    [ -d "tf-$qat/save/checkpoint-$(printf %08d "$UPDATES")" ] ||
      "$TERN" train --init-from "$START" --train-src "$DATA/train.en" --train-tgt "$DATA/train.de" \
        --valid-src "$DATA/val.en" --valid-tgt "$DATA/val.de" --save-dir "tf-$qat/save" --cache-dir cache \
        --lr "$LR" --lr-scheduler constant --dropout 0.3 --max-tokens 4096 --max-updates "$UPDATES" \
        --valid-interval-updates "$UPDATES" --no-bleu --no-plot -q --keep-last 1 -t "$THREADS" --qat "$qat" --resume
    CK="tf-$qat/save/checkpoint-$(printf %08d "$UPDATES")"
    [ -d "tf-$qat/int8" ] || "$TERN" convert --from "$CK" -o "tf-$qat/int8" --quantize int8
    decode "$CK" float32 "tf-$qat/hyp.float32.de"
    decode "tf-$qat/int8" int8 "tf-$qat/hyp.int8.de"
    for ct in float32 int8; do echo "transformer, qat $qat, $ct: $(score "tf-$qat/hyp.$ct.de")"; done
    echo "transformer, qat $qat: $(same "tf-$qat/hyp.float32.de" "tf-$qat/hyp.int8.de")"
    echo "transformer, qat $qat: test nll float32 $(nll "$CK" float32), int8-as-float32 $(nll "tf-$qat/int8" float32)," \
      "int8 $(nll "tf-$qat/int8" int8)"
    "$TERN" score -r "$DATA/test_2016_flickr.de" --paired-bs "tf-$qat/hyp.float32.de" "tf-$qat/hyp.int8.de" | tail -2 | head -1
  done
fi

if [ "$PART" = all ] || [ "$PART" = gnmt ]; then
  head -n 8000 "$DATA/train.en" > g-train.en && head -n 8000 "$DATA/train.de" > g-train.de
  head -n 300 "$DATA/val.en" > g-valid.en && head -n 300 "$DATA/val.de" > g-valid.de
  [ -d g-vocab ] || "$TERN" vocab --model-dir g-vocab --source g-train.en --target g-train.de --vocab-size 2000 -t 1
  # plain: no constraint; clip: GNMT's (recipes/gnmt-qat-en-de.sh); clip-qat: the clips and --qat int8
  for run in plain clip clip-qat; do
    extra=()
    case $run in
      clip) extra=(--gnmt-clip-delta 1 --gnmt-clip-delta-start 8 --gnmt-clip-anneal 500 --gnmt-clip-gamma 25) ;;
      clip-qat) extra=(--gnmt-clip-delta 1 --gnmt-clip-delta-start 8 --gnmt-clip-anneal 500 --gnmt-clip-gamma 25
                       --qat int8) ;;
    esac
    mkdir -p "g-$run"
    [ -d "g-$run/save/checkpoint-$(printf %08d "$GNMT_UPDATES")" ] ||
      "$TERN" train --architecture gnmt --vocab g-vocab --cache-dir g-cache --save-dir "g-$run/save" --layers 2 \
        --hidden 128 --init-uniform 0.1 --clip-norm 5 -t "$THREADS" --no-plot -q --train-src g-train.en \
        --train-tgt g-train.de --valid-src g-valid.en --valid-tgt g-valid.de --max-tokens 2000 --lr 5e-3 \
        --warmup 100 --dropout 0.1 --max-updates "$GNMT_UPDATES" --valid-interval-updates 250 --no-bleu \
        --keep-last 1 --seed 1 --resume "${extra[@]}"
    CK="g-$run/save/checkpoint-$(printf %08d "$GNMT_UPDATES")"
    for ct in float32 int8; do
      decode "$CK" "$ct" "g-$run/hyp.$ct.de"
      echo "gnmt, $run, $ct: $(score "g-$run/hyp.$ct.de")"
    done
    echo "gnmt, $run: $(same "g-$run/hyp.float32.de" "g-$run/hyp.int8.de")"
    echo "gnmt, $run: test nll float32 $(nll "$CK" float32), int8 $(nll "$CK" int8)"
    if [ "$run" = plain ]; then
      # GNMT's quantized inference post-training: the plain model given the clips it never trained
      # with (tern convert --gnmt-clip-delta/--gnmt-clip-gamma), its int8 the 16-bit-state path
      [ -d g-plain-ptq ] || "$TERN" convert --from "$CK" -o g-plain-ptq --gnmt-clip-delta 1 --gnmt-clip-gamma 25
      for ct in float32 int8; do
        decode g-plain-ptq "$ct" "g-plain-ptq/hyp.$ct.de"
        echo "gnmt, plain + clips post-training, $ct: $(score "g-plain-ptq/hyp.$ct.de")"
      done
      echo "gnmt, plain + clips post-training: int8 vs the plain float32: $(same g-plain/hyp.float32.de g-plain-ptq/hyp.int8.de)"
      echo "gnmt, plain + clips post-training: test nll float32 $(nll g-plain-ptq float32), int8 $(nll g-plain-ptq int8)"
    fi
  done
  # Figure 4's analogue (docs/img/gnmt-clip-curves.png): the training loss of the plain and the
  # clipped run, averaged over 50 updates, and their validation losses
  awk 'NR > 1 { s += $3; n++; if (n == 50) { print $1, s / n; s = 0; n = 0 } }' g-plain/save/train_curve.tsv > g-plain.loss
  awk 'NR > 1 { s += $3; n++; if (n == 50) { print $1, s / n; s = 0; n = 0 } }' g-clip/save/train_curve.tsv > g-clip.loss
  awk 'NR > 1 { print $1, $3 }' g-plain/save/valid_curve.tsv > g-plain.valid
  awk 'NR > 1 { print $1, $3 }' g-clip/save/valid_curve.tsv > g-clip.valid
  gnuplot -e "set terminal pngcairo size 800,480; set output 'gnmt-clip-curves.png'; \
    set xlabel 'update'; set ylabel 'loss per target token (label-smoothed)'; set key top right; \
    set title 'GNMT 2+2, hidden 128, 8000 Multi30k pairs: with and without the clips'; \
    plot 'g-plain.loss' w l lw 2 t 'train, no clips', 'g-clip.loss' w l lw 2 t 'train, clips (delta 8 -> 1 over 500, gamma 25)', \
         'g-plain.valid' w lp t 'valid, no clips', 'g-clip.valid' w lp t 'valid, clips'"
  echo "wrote $WORK/gnmt-clip-curves.png"
fi
