#!/usr/bin/env bash
# recipes/package-en-de.sh — turns the checkpoints of recipes/multi30k-en-de.sh into the shipped
# model models/en-de: the average of the last K checkpoints (K=10, as the training recipe averages),
# quantized to int8 (per-row scales), with the length penalty (0, 0.6 or 1.0) that is best on val
# with the float32 average (as the training recipe chooses it) written into OUT's
# generation_config.json beside beam 5 (the model's decoding defaults), then scored on test_2016_flickr
# with beam 5 and one thread (sacreBLEU defaults, through `tern score`), float32 and int8.
#
#   WORK=/work/runs/seed2 bash recipes/package-en-de.sh
#   WORK=... K=10 LP=1.0 OUT=/tmp/en-de AVG=/tmp/en-de-f32 bash recipes/package-en-de.sh
#
# LP given: no search on val. AVG given: the float32 average is kept there. An existing
# MODEL_CARD.md in OUT is kept (the card is written by hand from this script's output).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/multi30k-en-de}
K=${K:-10}
LP=${LP:-}
OUT=${OUT:-$ROOT/models/en-de}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
AVG=${AVG:-$tmp/avg}
bleu() { "$TERN" score -r "$1" "$2" | sed -n 's/^.*BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1; }

"$TERN" average -o "$AVG" --last "$K" "$WORK/ckpt"
[ ! -f "$OUT/MODEL_CARD.md" ] || cp "$OUT/MODEL_CARD.md" "$tmp/MODEL_CARD.md"
rm -rf "$OUT"
"$TERN" convert --from "$AVG" -o "$OUT" --quantize int8
[ ! -f "$tmp/MODEL_CARD.md" ] || cp "$tmp/MODEL_CARD.md" "$OUT/MODEL_CARD.md"

if [ -z "$LP" ]; then
  best=-1
  for lp in 0 0.6 1.0; do
    "$TERN" translate -m "$AVG" -b 5 --length-penalty "$lp" -t 1 -q "$DATA/val.en" "$tmp/val.de"
    b=$(bleu "$DATA/val.de" "$tmp/val.de")
    echo "val, float32 average of the last $K, beam 5, length penalty $lp: BLEU $b"
    if awk -v b="$b" -v best="$best" 'BEGIN { exit !(b > best) }'; then best=$b; LP=$lp; fi
  done
fi
echo "length penalty $LP"
# The model's decoding defaults (what `tern translate -m models/en-de` uses without flags)
printf '{\n  "num_beams": 5,\n  "length_penalty": %s\n}\n' "$LP" > "$OUT/generation_config.json"
for m in "$AVG" "$OUT"; do
  name=$([ "$m" = "$OUT" ] && echo "int8 ($OUT)" || echo "float32 average")
  "$TERN" translate -m "$m" -b 5 --length-penalty "$LP" -t 1 -q "$DATA/test_2016_flickr.en" "$tmp/hyp.de"
  echo "test_2016_flickr, beam 5, length penalty $LP, $name: $("$TERN" score -r "$DATA/test_2016_flickr.de" -m bleu,chrf "$tmp/hyp.de" | tr '\n' ' ')"
done
du -sh "$OUT"
du -b "$OUT"/model.safetensors
