#!/usr/bin/env bash
# recipes/rl-refine-en-de.sh — RL refinement with the GLEU reward (GNMT paper §5; docs/training.md,
# "RL refinement") of the shipped Multi30k model models/en-de: `tern train --init-from models/en-de
# --rl-gleu`, validation BLEU (beam 5, length penalty 1.0, the model's decoding settings) every
# VALID updates deciding early stopping, then the best checkpoint by val BLEU and the starting
# model scored on test_2016_flickr (beam 5, length penalty 1.0, one thread, float32, sacreBLEU's
# defaults through `tern score`).
#
#   SEED=1 WORK=/work/runs/rl bash recipes/rl-refine-en-de.sh
#   SEED=2 OPT=sgd LR=0.1 UPDATES=40 VALID=20 bash recipes/rl-refine-en-de.sh
#
# OPT adam: Adam (0.9, 0.98) at a constant LR; OPT sgd: plain SGD at LR (the paper's) — both
# clipped at norm 5. Run again to resume (exact: the samples' seed is a function of --seed and the
# update count). Prints: "start: test BLEU X", "refined (update N, val BLEU V): test BLEU Y",
# "gain: Y - X".
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
MODEL=${MODEL:-$ROOT/models/en-de}
SEED=${SEED:-1}
OPT=${OPT:-adam}
LR=${LR:-2e-5}
M=${M:-6}
ALPHA=${ALPHA:-0.017}
MAXTOK=${MAXTOK:-1024}
UPDATES=${UPDATES:-200}
VALID=${VALID:-40}
PATIENCE=${PATIENCE:-3}
THREADS=${THREADS:-2}
WORK=${WORK:-/tmp/tern-recipes/rl-en-de}
RUN=$WORK/$OPT-seed$SEED
mkdir -p "$RUN"
bleu() { "$TERN" score -r "$1" "$2" | sed -n 's/^.*BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1; }

case "$OPT" in
  adam) optflags=(--lr "$LR" --lr-scheduler constant) ;;
  sgd) optflags=(--lr "$LR" --lr-scheduler gnmt --sgd-start 0 --sgd-lr "$LR" --decay-start 1000000000 --decay-interval 1 --decay-times 0) ;;
  *) echo "OPT must be adam or sgd" >&2; exit 2 ;;
esac

# the starting model's scores (float32 compute, as the refined checkpoints)
if [ ! -f "$WORK/start.test.de" ]; then
  "$TERN" translate -m "$MODEL" --compute-type float32 -b 5 --length-penalty 1.0 -t "$THREADS" -q \
    "$DATA/test_2016_flickr.en" "$WORK/start.test.de.tmp"
  mv "$WORK/start.test.de.tmp" "$WORK/start.test.de"
fi
if [ ! -f "$WORK/start.val.de" ]; then
  "$TERN" translate -m "$MODEL" --compute-type float32 -b 5 --length-penalty 1.0 -t "$THREADS" -q \
    "$DATA/val.en" "$WORK/start.val.de.tmp"
  mv "$WORK/start.val.de.tmp" "$WORK/start.val.de"
fi
start_test=$(bleu "$DATA/test_2016_flickr.de" "$WORK/start.test.de")
echo "start: val BLEU $(bleu "$DATA/val.de" "$WORK/start.val.de"), test BLEU $start_test"

"$TERN" train --init-from "$MODEL" --rl-gleu --rl-alpha "$ALPHA" --rl-samples "$M" --seed "$SEED" \
  --train-src "$DATA/train.en" --train-tgt "$DATA/train.de" --valid-src "$DATA/val.en" --valid-tgt "$DATA/val.de" \
  --max-tokens "$MAXTOK" --max-updates "$UPDATES" --valid-interval-updates "$VALID" \
  --bleu-beam 5 --bleu-length-penalty 1.0 --early-stop-metric bleu --patience "$PATIENCE" \
  "${optflags[@]}" --clip-norm 5 --keep-last 0 --log-interval 10 --no-progress --no-plot -t "$THREADS" -q \
  --save-dir "$RUN/ckpt" --resume

# the best checkpoint by validation BLEU (valid_curve.tsv: update epoch loss nll ppl bleu)
best=$(awk '!/^#/ && $6 >= 0 { if ($6 > b) { b = $6; u = $1 } } END { print u " " b }' "$RUN/ckpt/valid_curve.tsv")
set -- $best
dir=$(printf '%s/ckpt/checkpoint-%08d' "$RUN" "$1")
"$TERN" translate -m "$dir" -b 5 --length-penalty 1.0 -t "$THREADS" -q "$DATA/test_2016_flickr.en" "$RUN/test.de"
refined=$(bleu "$DATA/test_2016_flickr.de" "$RUN/test.de")
echo "refined ($OPT, seed $SEED, update $1, val BLEU $2): test BLEU $refined"
echo "gain: $(awk -v a="$refined" -v b="$start_test" 'BEGIN { printf "%+.2f", a - b }')"
