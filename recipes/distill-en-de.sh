#!/usr/bin/env bash
# recipes/distill-en-de.sh — sequence-level knowledge distillation (Kim & Rush 2016) for
# English→German on Multi30k: a teacher translates the training corpus with `tern distill`, and a
# small student is trained with `tern train` on the teacher's translations, mixed by weight with
# the original pairs.
#
#   bash recipes/distill-en-de.sh                              # small settings: a few minutes
#   N_TRAIN=29000 UPDATES=8000 LAYERS=4 DMODEL=128 FF=512 NBEST=4 SELECT=bleu \
#     WORK=/some/dir bash recipes/distill-en-de.sh            # a real run (hours on 2 cores)
#
# 1. the teacher: TEACHER (default the shipped models/en-de; several directories separated by
#    spaces: an ensemble, -m A -m B) translates Multi30k train's first N_TRAIN English lines with
#    `tern distill` (beam BEAM, NBEST hypotheses, SELECT score|bleu|chrf against the German
#    reference): $WORK/distilled.src / distilled.tgt. Resumable: run the recipe again after an
#    interruption and the distillation continues where it stopped;
# 2. a joint SentencePiece vocabulary (VOCAB pieces) over the English and the teacher's German;
# 3. the student (LAYERS, DMODEL, FF, HEADS) trained for UPDATES updates on
#    `--train distilled.src,distilled.tgt:1 --train orig.en,orig.de:ORIG_WEIGHT` (ORIG_WEIGHT 0:
#    the distilled corpus alone);
# 4. BLEU on test_2016_flickr (its first N_TEST lines; 0: all 1000) with beam 2 (`tern score`),
#    the student's and, for comparison, the teacher's.
# Results: $WORK/RESULTS.txt (line counts, the mix of the first epoch, both BLEU scores).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/distill-en-de}
TEACHER=${TEACHER:-$ROOT/models/en-de}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
N_TRAIN=${N_TRAIN:-3000}        # Multi30k train lines 1..N_TRAIN (29000: all)
N_TEST=${N_TEST:-0}             # test_2016_flickr lines scored (0: all)
BEAM=${BEAM:-4}
NBEST=${NBEST:-1}
SELECT=${SELECT:-score}
COMPUTE=${COMPUTE:-auto}        # the teacher's --compute-type (int8: faster)
ORIG_WEIGHT=${ORIG_WEIGHT:-0.5}
UPDATES=${UPDATES:-200}
LAYERS=${LAYERS:-2}; DMODEL=${DMODEL:-64}; FF=${FF:-128}; HEADS=${HEADS:-4}
VOCAB=${VOCAB:-1000}
MAX_TOKENS=${MAX_TOKENS:-2048}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

for f in train.en train.de test_2016_flickr.en test_2016_flickr.de; do
  [ -f "$DATA/$f" ] || { echo "distill-en-de: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
[ -x "$TERN" ] || { echo "distill-en-de: $TERN not found: build with make (or set TERN_BIN)" >&2; exit 1; }
TEACHER_ARGS=()
for m in $TEACHER; do TEACHER_ARGS+=(-m "$m"); done
mkdir -p "$WORK"
echo "distill-en-de: work directory $WORK, teacher ${TEACHER_ARGS[*]}, $N_TRAIN lines"

head -n "$N_TRAIN" "$DATA/train.en" > "$WORK/orig.en.new"
head -n "$N_TRAIN" "$DATA/train.de" > "$WORK/orig.de.new"
# keep the files (and their times) when unchanged, so that a rerun resumes the distillation
for s in en de; do
  if cmp -s "$WORK/orig.$s.new" "$WORK/orig.$s" 2>/dev/null; then rm "$WORK/orig.$s.new"
  else mv "$WORK/orig.$s.new" "$WORK/orig.$s"; fi
done
if [ "$N_TEST" -gt 0 ]; then
  head -n "$N_TEST" "$DATA/test_2016_flickr.en" > "$WORK/test.en"
  head -n "$N_TEST" "$DATA/test_2016_flickr.de" > "$WORK/test.de"
else
  cp "$DATA/test_2016_flickr.en" "$WORK/test.en"; cp "$DATA/test_2016_flickr.de" "$WORK/test.de"
fi

# 1. the teacher's translations of the training corpus
DISTILL=(-b "$BEAM" -n "$NBEST" --select "$SELECT" --compute-type "$COMPUTE" -t "$THREADS")
"$TERN" distill "${TEACHER_ARGS[@]}" --src "$WORK/orig.en" --ref "$WORK/orig.de" -o "$WORK/distilled" "${DISTILL[@]}"
n_src=$(wc -l < "$WORK/orig.en"); n_tgt=$(wc -l < "$WORK/distilled.tgt")
[ "$n_src" -eq "$n_tgt" ] || { echo "distill-en-de: $n_src lines but $n_tgt translations" >&2; exit 1; }

# 2. vocabulary
[ -f "$WORK/vocab/sentencepiece.model" ] ||
  "$TERN" vocab --model-dir "$WORK/vocab" --source "$WORK/orig.en" --target "$WORK/distilled.tgt" \
    --target "$WORK/orig.de" --vocab-size "$VOCAB" -t "$THREADS" > /dev/null

# 3. the student
TRAIN=(--train "$WORK/distilled.src,$WORK/distilled.tgt:1")
if [ "$ORIG_WEIGHT" != 0 ]; then TRAIN+=(--train "$WORK/orig.en,$WORK/orig.de:$ORIG_WEIGHT"); fi
"$TERN" train --vocab "$WORK/vocab" --save-dir "$WORK/student" --max-updates "$UPDATES" --resume "${TRAIN[@]}" \
  --layers "$LAYERS" --d-model "$DMODEL" --ff "$FF" --heads "$HEADS" --dropout 0.1 --lr 5e-3 --warmup 100 \
  --max-tokens "$MAX_TOKENS" --seed "$SEED" -t "$THREADS" --no-bleu --no-plot -q --keep-last 1
STUDENT=$(ls -d "$WORK"/student/checkpoint-* | tail -n 1)

# 4. BLEU on test_2016_flickr: the student, and the teacher for comparison
"$TERN" translate -m "$STUDENT" -b 2 -t "$THREADS" "$WORK/test.en" "$WORK/test.student.de"
"$TERN" translate "${TEACHER_ARGS[@]}" -b 2 --compute-type "$COMPUTE" -t "$THREADS" "$WORK/test.en" "$WORK/test.teacher.de"
bleu_student=$("$TERN" score -r "$WORK/test.de" "$WORK/test.student.de")
bleu_teacher=$("$TERN" score -r "$WORK/test.de" "$WORK/test.teacher.de")

{
  echo "training lines:    $n_src; distilled: $n_tgt (${DISTILL[*]})"
  grep -o "mix: epoch 1 corpus .*" "$WORK/student/train.log" || true
  echo "student:           $STUDENT ($LAYERS layers, d $DMODEL, ff $FF, $UPDATES updates)"
  echo "test_2016_flickr ($(wc -l < "$WORK/test.en") lines), beam 2: student BLEU: $bleu_student"
  echo "test_2016_flickr ($(wc -l < "$WORK/test.en") lines), beam 2: teacher BLEU: $bleu_teacher"
} | tee "$WORK/RESULTS.txt"
