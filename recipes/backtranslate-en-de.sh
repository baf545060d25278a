#!/usr/bin/env bash
# recipes/backtranslate-en-de.sh — back-translation (Sennrich et al. 2016; sampled as Edunov et al.
# 2018) for English→German on Multi30k with `tern train`'s weighted mix.
#
#   bash recipes/backtranslate-en-de.sh                          # small settings: a few minutes
#   N_REAL=29000 N_MONO=0 REV_UPDATES=4000 UPDATES=8000 LAYERS=4 DMODEL=128 FF=512 \
#     WORK=/some/dir bash recipes/backtranslate-en-de.sh          # a real run (hours on 2 cores)
#
# 1. a joint SentencePiece vocabulary over the real pairs (VOCAB pieces);
# 2. a reverse model de→en trained on the real pairs (REV_UPDATES updates);
# 3. target-side monolingual German — the German side of Multi30k train lines that are not among
#    the real pairs (their English is never read), N_MONO lines (0: the rest of train, which then
#    needs N_REAL < 29000), or MONO=FILE (e.g. WMT22 German text) — translated into English by the
#    reverse model: beam BEAM (default 2), or one sample from the top SAMPLING_TOPK tokens when
#    SAMPLING_TOPK > 1 (Edunov et al.'s sampled back-translation);
# 4. the forward model en→de trained on `--train real.en,real.de:1 --train synth.en,mono.de:W`
#    (W = SYNTH_WEIGHT, default 0.5: every epoch a fresh half of the synthetic pairs), UPDATES
#    updates, then BLEU on Multi30k val with beam 2 (`tern score`).
# Results: $WORK/RESULTS.txt (line counts, the mix counts of the first epoch, BLEU).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/backtranslate-en-de}
THREADS=${THREADS:-2}
SEED=${SEED:-1}
N_REAL=${N_REAL:-3000}          # real pairs: Multi30k train lines 1..N_REAL
N_MONO=${N_MONO:-3000}          # monolingual German: the next N_MONO lines' German side
MONO=${MONO:-}                  # ... or this file of German text instead
REV_UPDATES=${REV_UPDATES:-200}
UPDATES=${UPDATES:-200}
LAYERS=${LAYERS:-2}; DMODEL=${DMODEL:-64}; FF=${FF:-128}; HEADS=${HEADS:-4}
VOCAB=${VOCAB:-1000}
BEAM=${BEAM:-2}
SAMPLING_TOPK=${SAMPLING_TOPK:-0}
SYNTH_WEIGHT=${SYNTH_WEIGHT:-0.5}
MAX_TOKENS=${MAX_TOKENS:-2048}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

for f in train.en train.de val.en val.de; do
  [ -f "$DATA/$f" ] || { echo "backtranslate-en-de: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
[ -x "$TERN" ] || { echo "backtranslate-en-de: $TERN not found: build with make (or set TERN_BIN)" >&2; exit 1; }
mkdir -p "$WORK"
echo "backtranslate-en-de: work directory $WORK, $N_REAL real pairs, synthetic weight $SYNTH_WEIGHT"

# data: the real pairs and the monolingual German (never the English of those lines)
head -n "$N_REAL" "$DATA/train.en" > "$WORK/real.en"
head -n "$N_REAL" "$DATA/train.de" > "$WORK/real.de"
if [ -n "$MONO" ]; then
  cp "$MONO" "$WORK/mono.de"
elif [ "$N_MONO" -gt 0 ]; then
  sed -n "$((N_REAL + 1)),$((N_REAL + N_MONO))p" "$DATA/train.de" > "$WORK/mono.de"
else
  sed -n "$((N_REAL + 1)),\$p" "$DATA/train.de" > "$WORK/mono.de"
fi
[ -s "$WORK/mono.de" ] || { echo "backtranslate-en-de: no monolingual German left (N_REAL too large)" >&2; exit 1; }
head -n 200 "$DATA/val.en" > "$WORK/val.en"
head -n 200 "$DATA/val.de" > "$WORK/val.de"

MODEL=(--layers "$LAYERS" --d-model "$DMODEL" --ff "$FF" --heads "$HEADS" --dropout 0.1 --lr 5e-3 --warmup 100
       --max-tokens "$MAX_TOKENS" --seed "$SEED" -t "$THREADS" --no-bleu --no-plot -q --keep-last 1)

# 1. vocabulary (joint: serves both directions)
[ -f "$WORK/vocab/sentencepiece.model" ] ||
  "$TERN" vocab --model-dir "$WORK/vocab" --source "$WORK/real.en" --target "$WORK/real.de" \
    --vocab-size "$VOCAB" -t "$THREADS" > /dev/null

# 2. the reverse model de→en
"$TERN" train --vocab "$WORK/vocab" --train "$WORK/real.de,$WORK/real.en" --save-dir "$WORK/reverse" \
  --max-updates "$REV_UPDATES" --resume "${MODEL[@]}"
REV=$(ls -d "$WORK"/reverse/checkpoint-* | tail -n 1)

# 3. back-translation of the monolingual German
if [ "$SAMPLING_TOPK" -gt 1 ]; then
  DECODE=(--sampling-topk "$SAMPLING_TOPK" --seed "$SEED")
else
  DECODE=(-b "$BEAM")
fi
"$TERN" translate -m "$REV" "${DECODE[@]}" -t "$THREADS" "$WORK/mono.de" "$WORK/synth.en"
n_mono=$(wc -l < "$WORK/mono.de"); n_synth=$(wc -l < "$WORK/synth.en")
[ "$n_mono" -eq "$n_synth" ] ||
  { echo "backtranslate-en-de: $n_mono German lines but $n_synth translations" >&2; exit 1; }

# 4. the forward model en→de on the weighted mix
"$TERN" train --vocab "$WORK/vocab" --save-dir "$WORK/forward" --max-updates "$UPDATES" --resume "${MODEL[@]}" \
  --train "$WORK/real.en,$WORK/real.de:1" --train "$WORK/synth.en,$WORK/mono.de:$SYNTH_WEIGHT"
FWD=$(ls -d "$WORK"/forward/checkpoint-* | tail -n 1)
"$TERN" translate -m "$FWD" -b 2 -t "$THREADS" "$WORK/val.en" "$WORK/val.hyp.de"
bleu=$("$TERN" score -r "$WORK/val.de" "$WORK/val.hyp.de")

{
  echo "real pairs:        $(wc -l < "$WORK/real.en") / $(wc -l < "$WORK/real.de")"
  echo "monolingual German: $n_mono; back-translated: $n_synth ($REV, ${DECODE[*]})"
  grep -o "mix: epoch 1 corpus .*" "$WORK/forward/train.log"
  echo "forward model:     $FWD"
  echo "val (200 lines) BLEU, beam 2: $bleu"
} | tee "$WORK/RESULTS.txt"
