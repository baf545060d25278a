#!/usr/bin/env bash
# bench/bench_vmap.sh — target vocabulary reduction on the shipped model: builds a vocabulary map
# from Multi30k train with `tern vmap`, then translates test_2016_flickr with and without it
# (greedy and beam 4, float32 and int8, THREADS intra-op threads, batches of BATCH sentences),
# interleaved, REPS times; prints seconds (median), output words/s, the speed ratio and BLEU.
#
#   bash bench/bench_vmap.sh                 # THREADS=1 BATCH=32 REPS=3 MODEL=models/en-de
#   TOPK=500 TOPN=20 bash bench/bench_vmap.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
MODEL=${MODEL:-$ROOT/models/en-de}
THREADS=${THREADS:-1}; BATCH=${BATCH:-32}; REPS=${REPS:-3}; TOPK=${TOPK:-200}; TOPN=${TOPN:-20}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
"$TERN" vmap -m "$MODEL" --source "$DATA/train.en" --target "$DATA/train.de" -o "$WORK/vmap.txt" \
  --top-k "$TOPK" --top-n "$TOPN"
echo "model $MODEL, $(nproc) cores, $THREADS thread(s), batches of $BATCH, map top-k $TOPK top-n $TOPN, $REPS reps"
printf '| search | type | seconds (full) | seconds (vmap) | speed-up | words/s (full) | words/s (vmap) | BLEU (full) | BLEU (vmap) | identical |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
bleu() { "$TERN" score -r "$DATA/test_2016_flickr.de" "$1" | sed -n 's/^BLEU[^=]*= \([0-9.]*\).*$/\1/p' | head -1; }
for b in 1 4; do
  for ct in float32 int8; do
    declare -A T=()
    for r in $(seq "$REPS"); do
      for v in full vmap; do
        extra=(); [ "$v" = vmap ] && extra=(--vmap "$WORK/vmap.txt")
        s=$(date +%s.%N)
        "$TERN" translate -q -m "$MODEL" -b $b --compute-type $ct -t "$THREADS" -w 1 --max-batch-size "$BATCH" \
          "${extra[@]}" "$DATA/test_2016_flickr.en" "$WORK/out.$v"
        T[$v]+="$(echo "$(date +%s.%N) - $s" | bc) "
      done
    done
    med() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    tf=$(med "${T[full]}"); tv=$(med "${T[vmap]}")
    nf=$(wc -w < "$WORK/out.full"); nv=$(wc -w < "$WORK/out.vmap")
    same=$(paste -d'\t' "$WORK/out.full" "$WORK/out.vmap" | awk -F'\t' '$1==$2' | wc -l)
    printf '| %s | %s | %.2f | %.2f | %.2f | %.0f | %.0f | %s | %s | %d/1000 |\n' "$([ $b = 1 ] && echo greedy || echo "beam $b")" \
      "$ct" "$tf" "$tv" "$(echo "$tf / $tv" | bc -l)" "$(echo "$nf / $tf" | bc -l)" "$(echo "$nv / $tv" | bc -l)" \
      "$(bleu "$WORK/out.full")" "$(bleu "$WORK/out.vmap")" "$same"
    unset T
  done
done
