#!/bin/sh
# bench_ensemble.sh — peak memory (max RSS, /usr/bin/time -v) and speed of ensembles of 1, 2 and 4
# copies of one model (each member loads its own weights: members share nothing), translating the
# first LINES lines of Multi30k test_2016_flickr.en with beam BEAM.
#   bench/bench_ensemble.sh [MODEL] [LINES] [BEAM] [THREADS]   (defaults: models/en-de 200 5 1)
# TERN_ARGS adds options to every run (e.g. TERN_ARGS="--max-batch-tokens 512").
# Prints one row per ensemble size: members, seconds, target tokens/s, max RSS (MB), and whether
# the output equals the single model's (logprob-mean of identical members = the model's scores).
set -eu
MODEL=${1:-models/en-de}
LINES=${2:-200}
BEAM=${3:-5}
THREADS=${4:-1}
TERN=${TERN_BIN:-build/tern}
DATA=${TERN_DATA:-../shared/data}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
head -n "$LINES" "$DATA/multi30k/test_2016_flickr.en" > "$TMP/in.en"
printf "%-8s %8s %10s %12s %s\n" members seconds tokens/s max_rss_MB same_as_1
for K in 1 2 4; do
    ARGS=""
    i=0
    while [ $i -lt $K ]; do ARGS="$ARGS -m $MODEL"; i=$((i + 1)); done
    # shellcheck disable=SC2086
    /usr/bin/time -v -o "$TMP/time.$K" "$TERN" translate $ARGS -b "$BEAM" -t "$THREADS" -q ${TERN_ARGS:-} "$TMP/in.en" "$TMP/out.$K"
    secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, a, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + a[i]; print s}' "$TMP/time.$K")
    rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$TMP/time.$K")
    toks=$(wc -w < "$TMP/out.$K")
    same=$(cmp -s "$TMP/out.1" "$TMP/out.$K" && echo yes || echo no)
    printf "%-8s %8s %10.0f %12s %s\n" "$K" "$secs" "$(echo "$toks / $secs" | bc -l)" "$rss" "$same"
done
