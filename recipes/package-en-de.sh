#!/usr/bin/env bash
# recipes/package-en-de.sh — turns the checkpoints of recipes/multi30k-en-de.sh into the shipped
# model models/en-de: the average of the last K checkpoints, quantized to int8 (per-row scales),
# scored on test_2016_flickr with beam 5 (sacreBLEU defaults, through `tern score`).
#
#   WORK=/tmp/tern-recipes/multi30k-en-de K=5 bash recipes/package-en-de.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/multi30k-en-de}
K=${K:-5}
OUT=${OUT:-$ROOT/models/en-de}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$TERN" average -o "$tmp/avg" --last "$K" "$WORK/ckpt"
rm -rf "$OUT"
"$TERN" convert --from "$tmp/avg" -o "$OUT" --quantize int8
for m in "$tmp/avg" "$OUT"; do
  "$TERN" translate -m "$m" -b 5 -t 1 -q "$DATA/test_2016_flickr.en" "$tmp/hyp.de"
  echo "$(basename "$m"): $("$TERN" score -r "$DATA/test_2016_flickr.de" -m bleu,chrf "$tmp/hyp.de" | tr '\n' ' ')"
done
du -sh "$OUT"
