#!/usr/bin/env bash
# recipes/ensemble-en-de.sh — Multi30k en-de models alone and as one ensemble (issue 9's quality
# proof): each member alone, then `tern translate -m A -m B ...` with both --ensemble-mode values
# (equal weights), on test_2016_flickr and val, beam 5. One table: BLEU and chrF2 (`tern score`,
# sacreBLEU defaults), seconds, target tokens/s (SentencePiece pieces of the output, counted with
# spm_encode and the first member's model) and peak RSS (/usr/bin/time -v); then each ensemble's
# BLEU gain over its best member.
#
#   bash recipes/ensemble-en-de.sh /work/runs/seed2/averaged /work/runs/seed3/averaged
#   LP=0 THREADS=2 SETS=test_2016_flickr bash recipes/ensemble-en-de.sh models/en-de OTHER_MODEL
#
# LP: length penalty for every run (default 1.0); BEAM (5); THREADS (1); SETS (test_2016_flickr val);
# TERN_BIN, TERN_DATA as in the other recipes. BLEU and chrF are exact (one thread or several: the
# search is deterministic); seconds and tokens/s depend on what else runs on the machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
LP=${LP:-1.0}
BEAM=${BEAM:-5}
THREADS=${THREADS:-1}
SETS=${SETS:-test_2016_flickr val}
[ $# -ge 2 ] || { echo "usage: $0 MODEL_DIR MODEL_DIR [MODEL_DIR...]" >&2; exit 2; }
for m in "$@"; do
  [ -f "$m/config.json" ] || { echo "ensemble-en-de: $m is not a model directory" >&2; exit 1; }
done
command -v spm_encode > /dev/null || { echo "ensemble-en-de: spm_encode not found (Debian package sentencepiece)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "ensemble-en-de: /usr/bin/time not found (Debian package time)" >&2; exit 1; }
SPM=$1/sentencepiece.model
[ -f "$SPM" ] || SPM=$1/target.spm.model
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME SET -m A [-m B ...] [--ensemble-mode M]: one row of the table
run() {
  local name=$1 set=$2
  shift 2
  /usr/bin/time -v -o "$tmp/time" "$TERN" translate "$@" -b "$BEAM" --length-penalty "$LP" -t "$THREADS" -q \
    "$DATA/$set.en" "$tmp/hyp.de"
  local secs rss toks scores bleu chrf
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, a, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + a[i]; print s}' "$tmp/time")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$tmp/time")
  toks=$(spm_encode --model="$SPM" < "$tmp/hyp.de" | wc -w)
  scores=$("$TERN" score -r "$DATA/$set.de" -m bleu,chrf "$tmp/hyp.de")
  bleu=$(echo "$scores" | sed -n 's/^BLEU[^=]*= \([0-9.]*\).*$/\1/p')
  chrf=$(echo "$scores" | sed -n 's/^chrF[^=]*= \([0-9.]*\).*$/\1/p')
  printf "| %s | %s | %s | %s | %s | %.0f | %s |\n" "$set" "$name" "$bleu" "$chrf" "$secs" \
    "$(echo "$toks / $secs" | bc -l)" "$rss" | tee -a "$tmp/rows"
}

echo "$# models, beam $BEAM, length penalty $LP, $THREADS thread(s), $($TERN --version)"
i=0
for m in "$@"; do i=$((i + 1)); echo "member $i: $m"; done
echo
echo "| set | system | BLEU | chrF2 | seconds | target tokens/s | peak RSS (MB) |"
echo "|---|---|---:|---:|---:|---:|---:|"
all=()
for m in "$@"; do all+=(-m "$m"); done
for set in $SETS; do
  i=0
  for m in "$@"; do
    i=$((i + 1))
    run "member $i" "$set" -m "$m"
  done
  for mode in logprob-mean prob-mean; do
    run "ensemble of $#, $mode" "$set" "${all[@]}" --ensemble-mode "$mode"
  done
done
echo
# the gain of each ensemble over its best member, per set
awk -F' [|] ' '{ set = $1; sub(/^[|] /, "", set) }
  $2 ~ /^member/ { if (!(set in best) || $3 + 0 > best[set]) best[set] = $3 + 0 }
  $2 ~ /^ensemble/ { printf "%s, %s: BLEU %+.2f over the best member (%.2f)\n", set, $2, $3 - best[set], best[set] }' "$tmp/rows"
