#!/usr/bin/env bash
# recipes/students-en-de.sh — the CTranslate2 paper's pipeline on Multi30k en→de: an ensemble
# teacher translates the training corpus (sequence-level distillation, the best of 4 by sentence
# BLEU against the reference), students train on the teacher's translations mixed 1:1 with the
# original pairs, are averaged, quantized to int8 and scored. The students start from a teacher
# member (Tern's models are small enough that a student of the same size is a continued,
# distilled training of it; the shallow-decoder students keep some of its decoder layers:
# `tern train --init-decoder-layers`).
#
#   WORK=/work/runs/students bash recipes/students-en-de.sh          # every student (~1 h 30 on 2 cores)
#   STUDENTS="4:4" WORK=... bash recipes/students-en-de.sh           # one of them
#
# 1. the teacher's members: the two models Tern shipped before (seed 1, commit 35b2f37, 38.92
#    BLEU on test_2016_flickr with beam 5 and length penalty 1.0; seed 2, commit 30b8d4b, 40.34),
#    read from this repository's history with `git show` (a copy without history: train them with
#    `SEED=1` and `SEED=2 bash recipes/multi30k-en-de.sh` + recipes/package-en-de.sh and set
#    MEMBERS="DIR1 DIR2"). Their ensemble: 40.64;
# 2. `tern distill` of Multi30k train (29,000 lines) with the ensemble: beam 5, 4 hypotheses,
#    length penalty 1.0, `--select bleu` (the hypothesis with the best sentence BLEU against the
#    reference: Kim & Rush's seq-inter); resumable; then `tern filter --max-repeats 2` drops the
#    translations caught in a loop ("Boston-Sch-Schel-Schel-Schel-": 231 of 29,000), which a
#    student would otherwise learn (the first 4:4 student, trained without this step, looped on 5
#    of the 1,000 test lines);
# 3. each student NAME in STUDENTS ("E:D": encoder and decoder layers) trained with `tern train
#    --init-from` the seed-2 member on `--train clean:1 --train original:1`, constant learning rate
#    (per decoder depth below), checkpoints every 100 (4:4) or 200 updates; D < 4 keeps decoder
#    layers DEC_LAYERS_<D> of the member (4:3 -> 0,1,3; 4:2 -> 0,3; 4:1 -> 3: the last layer alone
#    starts best, val nll 6.14 against 9.27 for the first); E < 4 keeps encoder layers the same way
#    (3 -> 0,1,3; 2 -> 0,3). Measured students: 4:4 (the shipped model), 4:3, 4:2, 4:1, 3:2
#    (`STUDENTS="4:2 3:2"`: 40.09 and 40.01 BLEU int8; docs/training.md);
# 4. recipes/package-en-de.sh on each: the average of the last K checkpoints, int8, the length
#    penalty chosen on val, BLEU on test_2016_flickr (beam 5, one thread) float32 and int8.
# Results: $WORK/RESULTS.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/students-en-de}
THREADS=${THREADS:-2}
STUDENTS=${STUDENTS:-"4:4 4:3 4:2 3:2"}
MEMBERS=${MEMBERS:-}
K=${K:-}   # checkpoints averaged: 10 for 4:4 (every 100 updates), 8 for the others (every 200)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for f in train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de; do
  [ -f "$DATA/$f" ] || { echo "students-en-de: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
[ -x "$TERN" ] || { echo "students-en-de: $TERN not found: build with make (or set TERN_BIN)" >&2; exit 1; }
mkdir -p "$WORK"

# 1. the members
if [ -z "$MEMBERS" ]; then
  for m in seed1:35b2f37 seed2:30b8d4b; do
    name=${m%%:*} commit=${m#*:}
    dir="$WORK/member-$name"
    if [ ! -f "$dir/model.safetensors" ]; then
      mkdir -p "$dir.tmp"
      for f in config.json model.safetensors sentencepiece.model shared_vocabulary.json; do
        git -C "$ROOT" show "$commit:models/en-de/$f" > "$dir.tmp/$f" ||
          { echo "students-en-de: no git history here: set MEMBERS (see the header)" >&2; exit 1; }
      done
      mv "$dir.tmp" "$dir"
    fi
    MEMBERS="$MEMBERS $dir"
  done
fi
read -r -a members <<< "$MEMBERS"
FIRST=${members[-1]}   # the students start from the last member (seed 2: the best)
margs=()
for m in "${members[@]}"; do margs+=(-m "$m"); done

# 2. distillation
"$TERN" distill "${margs[@]}" --src "$DATA/train.en" --ref "$DATA/train.de" -o "$WORK/distilled" \
  -b 5 -n 4 --select bleu --length-penalty 1.0 -t "$THREADS"
if [ ! -f "$WORK/clean.tgt" ]; then
  "$TERN" filter --max-repeats 2 --max-ratio 0 --max-words 0 --keep-copies --keep-duplicates \
    "$WORK/distilled.src" "$WORK/distilled.tgt" "$WORK/clean.src.tmp" "$WORK/clean.tgt.tmp" \
    --report "$WORK/clean.report"
  mv "$WORK/clean.src.tmp" "$WORK/clean.src" && mv "$WORK/clean.tgt.tmp" "$WORK/clean.tgt"
fi

# 3. the students
declare -A DEC=([3]="0,1,3" [2]="0,3" [1]="3")
declare -A ENC=([3]="0,1,3" [2]="0,3" [1]="3")
# per decoder depth: the same-size student continues a trained model (small steps); the shallow
# ones must re-learn the decoder's job with fewer layers (larger steps, less dropout, longer)
declare -A LR=([4]=2e-4 [3]=5e-4 [2]=5e-4 [1]=5e-4)
declare -A UPD=([4]=1400 [3]=2600 [2]=2600 [1]=2600)
declare -A WARM=([4]=100 [3]=200 [2]=200 [1]=200)
declare -A DROP=([4]=0.3 [3]=0.2 [2]=0.2 [1]=0.2)
declare -A SEEDS=([4]=3 [3]=4 [2]=4 [1]=4)
for s in $STUDENTS; do
  d=${s#*:} e=${s%%:*}
  name="student-${s/:/-}"
  init=()
  [ "$d" = 4 ] || init=(--init-decoder-layers "${DEC[$d]}")
  [ "$e" = 4 ] || init+=(--init-encoder-layers "${ENC[$e]}")
  mkdir -p "$WORK/$name"
  "$TERN" train --init-from "$FIRST" "${init[@]}" \
    --train "$WORK/clean.src,$WORK/clean.tgt:1" --train "$DATA/train.en,$DATA/train.de:1" \
    --valid-src "$DATA/val.en" --valid-tgt "$DATA/val.de" --save-dir "$WORK/$name/ckpt" --cache-dir "$WORK/cache" \
    --lr "${LR[$d]}" --lr-scheduler constant --warmup "${WARM[$d]}" --dropout "${DROP[$d]}" --label-smoothing 0.1 \
    --max-tokens 4096 --max-updates "${UPD[$d]}" --save-interval-updates $((d == 4 ? 100 : 200)) --keep-last 0 \
    --valid-interval-updates 261 --bleu-beam 5 --bleu-length-penalty 1.0 --seed "${SEEDS[$d]}" -t "$THREADS" \
    --no-plot --resume
done

# 4. package and score
{
  echo "teacher: ${margs[*]}"
  for s in $STUDENTS; do
    name="student-${s/:/-}"
    echo "== $name"
    k=${K:-$([ "${s#*:}" = 4 ] && echo 10 || echo 8)}
    WORK="$WORK/$name" K="$k" OUT="$WORK/$name/int8" AVG="$WORK/$name/avg" bash "$ROOT/recipes/package-en-de.sh"
  done
} 2>&1 | tee "$WORK/RESULTS.txt"
