#!/usr/bin/env bash
# bench/train_mpi.sh — training speed of data-parallel `tern train` (MPI) on the Multi30k recipe's
# model (recipes/multi30k-en-de.sh: 4+4 layers, d 128, ff 512, 4 heads, joint vocabulary of 8,000
# pieces, max-tokens 4096, dropout 0.3), same total batch in every configuration (2 batches of
# 4096 tokens per update):
#   1x2  one process, 2 threads, --update-freq 2
#   2x1  mpirun -np 2, 1 thread each, --update-freq 1, all-reduce during the backward pass
#   2x1n the same with --no-comm-overlap (all-reduce after the backward pass)
# ROUNDS rounds of the three, interleaved (the machine may be shared: compare within a round),
# UPDATES updates each; tok/s = target tokens / seconds in training steps (the trainer's own
# figure, from its final log line), and the all-reduce line of the MPI runs.
#
#   bash bench/train_mpi.sh                 # WORK=/tmp/tern-bench-mpi ROUNDS=2 UPDATES=30
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-bench-mpi}
ROUNDS=${ROUNDS:-2}
UPDATES=${UPDATES:-30}
BUCKET_MB=${BUCKET_MB:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # we run as root on the test machines
MPIRUN=(mpirun --oversubscribe --bind-to none -np 2)
mkdir -p "$WORK"
if [ ! -f "$WORK/vocab/sentencepiece.model" ]; then
  "$TERN" vocab --model-dir "$WORK/vocab" --source "$DATA/train.en" --target "$DATA/train.de" \
    --vocab-size 8000 --model-type unigram --character-coverage 1.0 -t 2
fi
ARGS=(--vocab "$WORK/vocab" --train-src "$DATA/train.en" --train-tgt "$DATA/train.de" --cache-dir "$WORK/cache"
  --layers 4 --d-model 128 --ff 512 --heads 4 --pre-norm --activation relu --share-embeddings
  --dropout 0.3 --label-smoothing 0.1 --lr 0.005 --warmup 2000 --weight-decay 0.0001
  --max-tokens 4096 --max-updates "$UPDATES" --no-bleu --no-plot -q --log-interval 1000 --seed 1
  --bucket-mb "$BUCKET_MB")
report() { # name save_dir
  local done
  done=$(grep ' done (' "$2/train.log" | tail -1)
  printf '%-5s %s\n' "$1" "$(echo "$done" | sed -n 's/.*: \([0-9]* target tokens in [0-9.]* s of training steps ([0-9]* tok\/s)\).*/\1/p')"
  grep -h 'all-reduce:' "$2/train.log" | sed 's/^\[[^]]*\] /      /' || true
}
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r ($(uptime | sed 's/.*load/load/'))"
  rm -rf "$WORK/s12" "$WORK/s21" "$WORK/s21n"
  OMP_NUM_THREADS=2 "$TERN" train "${ARGS[@]}" -t 2 --update-freq 2 --save-dir "$WORK/s12"
  report 1x2 "$WORK/s12"
  OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$TERN" train "${ARGS[@]}" -t 1 --update-freq 1 --save-dir "$WORK/s21"
  report 2x1 "$WORK/s21"
  OMP_NUM_THREADS=1 "${MPIRUN[@]}" "$TERN" train "${ARGS[@]}" -t 1 --update-freq 1 --no-comm-overlap \
    --save-dir "$WORK/s21n"
  report 2x1n "$WORK/s21n"
done
