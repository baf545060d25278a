#!/usr/bin/env bash
# recipes/lmbr-combine-en-de.sh — system combination on Multi30k en-de with LMBR (issue 11):
# n-best evidence from two or more Tern systems, LMBR's parameters tuned on val with
# `tern lmbr-tune`, then test_2016_flickr.
#
#   bash recipes/lmbr-combine-en-de.sh SYSTEM_A SYSTEM_B [SYSTEM_C ...]
#   WORK=/some/dir EV_BEAM=12 EV_N=12 THREADS=1 bash recipes/lmbr-combine-en-de.sh A B
#
# SYSTEMs are model directories (tern translate -m) with identical target vocabularies (for the
# ensemble rows; the evidence itself is text, read through the decoding model's SentencePiece).
#
# Steps (val is the only set anything is chosen on; test is decoded once per row):
#  1. evidence: each system's EV_N-best list (beam EV_BEAM, `i ||| hypothesis ||| score`, scores
#     log-probabilities divided by the length when EV_LP is 1) of val and of test;
#  2. each system's beam-5 BLEU on val (length penalty LP, default 1: the better of 0 and 1 on val
#     for these systems): the best one is "the best single system" (BEST); the evidence's n-best
#     lists use EV_LP (default 1: without it they are 9-11 % shorter than the references, and so
#     are LMBR's and MBR's outputs) and LMBR decodes with LMBR_LP (default 1);
#  3. `tern lmbr-tune` on val, coordinate search over small grids (GRID_* below): once with BEST,
#     once with the ensemble of all systems, both with the pooled evidence of all systems;
#     `tern mbr`'s alpha likewise on val (MBR_ALPHAS);
#  4. test_2016_flickr: each system (beam 5), the ensemble (beam 5), MBR over the pooled evidence,
#     LMBR with BEST + pooled evidence, LMBR with the ensemble + pooled evidence, with the tuned
#     parameters; BLEU from `tern score` (sacreBLEU's, 13a), sentences/s (wall) and CPU seconds of
#     the row's own command (the evidence's cost is listed in its own rows).
# Measured figures: docs/decoding.md ("System combination").
# The table goes to $WORK/RESULTS.md; everything is cached in $WORK (delete it to start over).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TERN=${TERN_BIN:-$ROOT/build/tern}
DATA=${TERN_DATA:-$ROOT/../shared/data}/multi30k
WORK=${WORK:-/tmp/tern-recipes/lmbr-combine}
THREADS=${THREADS:-1}
BEAM=${BEAM:-5}
LP=${LP:-1}
LMBR_LP=${LMBR_LP:-1}
EV_LP=${EV_LP:-1}
EV_BEAM=${EV_BEAM:-12}
EV_N=${EV_N:-12}
# the tuning set: the first DEV_LINES lines of val (the machine is shared: each setting decodes it)
DEV_LINES=${DEV_LINES:-600}
GRID_ALPHA=${GRID_ALPHA:-3,10}      # posteriors of length-normalized scores (EV_LP 1): sharper alphas
GRID_P=${GRID_P:-0.6}
GRID_R=${GRID_R:-0.8}
GRID_LAMBDA=${GRID_LAMBDA:-1,2,4}
GRID_WEIGHTS=${GRID_WEIGHTS:-}   # e.g. 0.5,2: also tune the weights of systems 2.. (system 1: 1)
ROUNDS=${ROUNDS:-1}
LMBR_CLIP=${LMBR_CLIP:-0}         # 1: --lmbr-clip (an evidence n-gram earns its posterior once per hypothesis)
LMBR_SUM=${LMBR_SUM:-0}           # 1: --lmbr-sum-gain (the length penalty divides only the NMT part; give a
                                  # wider GRID_LAMBDA, e.g. 8,32,128, and ROUNDS=2: docs/decoding.md)
MBR_ALPHAS=${MBR_ALPHAS:-1 3 10 30}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

[ $# -ge 2 ] || { echo "usage: $0 SYSTEM_A SYSTEM_B [SYSTEM_C ...]" >&2; exit 2; }
for f in val.en val.de test_2016_flickr.en test_2016_flickr.de; do
  [ -f "$DATA/$f" ] || { echo "lmbr-combine: $DATA/$f not found (set TERN_DATA)" >&2; exit 1; }
done
[ -x "$TERN" ] || { echo "lmbr-combine: $TERN not found: build with make (or set TERN_BIN)" >&2; exit 1; }
SYS=("$@")
NS=${#SYS[@]}
mkdir -p "$WORK"
cd "$WORK"
TEST=test_2016_flickr

now() { echo "$EPOCHREALTIME"; }
bleu() { "$TERN" score -r "$DATA/$1.de" "$2" | sed -n "s/^BLEU[^=]*= *\([0-9.]*\).*/\1/p"; }
lines() { wc -l < "$DATA/$1.en"; }
# timed OUT CMD...: runs CMD > OUT unless OUT exists, records its wall seconds in OUT.sec and its
# CPU seconds (user + system) in OUT.cpu (on a shared machine the CPU time is the steadier figure)
timed() {
  local out=$1; shift
  if [ ! -s "$out" ] || [ ! -f "$out.sec" ]; then
    local t0; t0=$(now)
    /usr/bin/time -f "%U + %S" -o "$out.cpu" "$@" > "$out.tmp"
    mv "$out.tmp" "$out"
    echo "$(now) - $t0" | bc -l > "$out.sec"
  fi
}
cpu() { [ -f "$1.cpu" ] && bc -l < "$1.cpu" | xargs printf '%.1f' || echo "?"; }
speed() { echo "$(lines "$1") / $(cat "$2.sec")" | bc -l | xargs printf '%.0f'; }
secs() { xargs printf '%.1f' < "$1.sec"; }

EV_VAL=() EV_TEST=() MS=()
for i in "${!SYS[@]}"; do
  s=${SYS[$i]}
  MS+=(-m "$s")
  for set in val $TEST; do
    timed "ev$i.$set.nbest" "$TERN" translate -m "$s" -b "$EV_BEAM" -n "$EV_N" --length-penalty "$EV_LP" \
      -t "$THREADS" -q "$DATA/$set.en"
    timed "sys$i.$set.b$BEAM.lp$LP" "$TERN" translate -m "$s" -b "$BEAM" --length-penalty "$LP" -t "$THREADS" -q \
      "$DATA/$set.en"
  done
  EV_VAL+=(--lmbr-evidence "ev$i.val.nbest")
  EV_TEST+=(--lmbr-evidence "ev$i.$TEST.nbest")
done

# the best single system: highest beam-5 BLEU on val
best=0 best_bleu=-1
for i in "${!SYS[@]}"; do
  b=$(bleu val "sys$i.val.b$BEAM.lp$LP")
  echo "system $i (${SYS[$i]}): val BLEU $b"
  if (( $(echo "$b > $best_bleu" | bc -l) )); then best=$i best_bleu=$b; fi
done
echo "best single system on val: $best (${SYS[$best]})"

head -n "$DEV_LINES" "$DATA/val.en" > dev.en
head -n "$DEV_LINES" "$DATA/val.de" > dev.de
GW=()
[ -n "$GRID_WEIGHTS" ] && GW=(--grid-weights "$GRID_WEIGHTS")
[ "$LMBR_CLIP" = 1 ] && GW+=(--lmbr-clip)
[ "$LMBR_SUM" = 1 ] && GW+=(--lmbr-sum-gain)
tune() { # tune OUT MODEL-ARGS...
  local out=$1; shift
  [ -s "$out" ] && grep -q '^best:' "$out" && return 0
  "$TERN" lmbr-tune "$@" -s dev.en -r dev.de "${EV_VAL[@]}" -b "$BEAM" --length-penalty "$LMBR_LP" \
    -t "$THREADS" --grid-alpha "$GRID_ALPHA" --grid-p "$GRID_P" --grid-r "$GRID_R" --grid-lambda "$GRID_LAMBDA" \
    "${GW[@]}" --rounds "$ROUNDS" > "$out.tmp" 2> "$out.err"
  mv "$out.tmp" "$out"
}
best_opts() { grep '^best:' "$1" | sed 's/^best: //; s/  BLEU.*//'; }

# the two tunings run side by side (each on one thread)
tune tune.best.txt -m "${SYS[$best]}" &
p1=$!
tune tune.ens.txt "${MS[@]}" &
p2=$!
wait $p1 && wait $p2
OPT_BEST=$(best_opts tune.best.txt)
OPT_ENS=$(best_opts tune.ens.txt)
echo "tuned (best single + evidence): $OPT_BEST"
echo "tuned (ensemble + evidence):    $OPT_ENS"

# MBR's alpha on val
mbr_alpha=1 mbr_val=-1
EVF_VAL=() EVF_TEST=()
for i in "${!SYS[@]}"; do EVF_VAL+=("ev$i.val.nbest"); EVF_TEST+=("ev$i.$TEST.nbest"); done
for a in $MBR_ALPHAS; do
  "$TERN" mbr --alpha "$a" --lines "$DEV_LINES" "${EVF_VAL[@]}" 2> /dev/null > mbr.dev.$a
  b=$("$TERN" score -r dev.de mbr.dev.$a | sed -n "s/^BLEU[^=]*= *\([0-9.]*\).*/\1/p")
  echo "mbr alpha $a: val BLEU $b"
  if (( $(echo "$b > $mbr_val" | bc -l) )); then mbr_alpha=$a mbr_val=$b; fi
done

# test
timed "ens.$TEST.b$BEAM.lp$LP" "$TERN" translate "${MS[@]}" -b "$BEAM" --length-penalty "$LP" -t "$THREADS" -q \
  "$DATA/$TEST.en"
timed "mbr.$TEST" "$TERN" mbr --alpha "$mbr_alpha" --lines "$(lines $TEST)" "${EVF_TEST[@]}"
# shellcheck disable=SC2086
timed "lmbr.best.$TEST" "$TERN" translate -m "${SYS[$best]}" -b "$BEAM" --length-penalty "$LMBR_LP" -t "$THREADS" -q "${EV_TEST[@]}" $OPT_BEST \
  "$DATA/$TEST.en"
# shellcheck disable=SC2086
timed "lmbr.ens.$TEST" "$TERN" translate "${MS[@]}" -b "$BEAM" --length-penalty "$LMBR_LP" -t "$THREADS" -q "${EV_TEST[@]}" $OPT_ENS \
  "$DATA/$TEST.en"

{
  echo "beam $BEAM, length penalty $LP (LMBR: $LMBR_LP); evidence: beam $EV_BEAM, $EV_N-best, length penalty $EV_LP"
  echo
  echo "| system | beam | $TEST BLEU | val BLEU (LMBR, MBR: first $DEV_LINES lines) | sentences/s ($THREADS thread) | CPU s |"
  echo "|---|---|---|---|---|---|"
  for i in "${!SYS[@]}"; do
    echo "| $i: ${SYS[$i]} | $BEAM | $(bleu $TEST "sys$i.$TEST.b$BEAM.lp$LP") | $(bleu val "sys$i.val.b$BEAM.lp$LP") | $(speed $TEST "sys$i.$TEST.b$BEAM.lp$LP") | $(cpu "sys$i.$TEST.b$BEAM.lp$LP") |"
  done
  for i in "${!SYS[@]}"; do
    echo "| evidence $i: $EV_N-best of ${SYS[$i]} | $EV_BEAM | | | $(speed $TEST "ev$i.$TEST.nbest") | $(cpu "ev$i.$TEST.nbest") |"
  done
  echo "| ensemble (all systems) | $BEAM | $(bleu $TEST "ens.$TEST.b$BEAM.lp$LP") | | $(speed $TEST "ens.$TEST.b$BEAM.lp$LP") | $(cpu "ens.$TEST.b$BEAM.lp$LP") |"
  echo "| MBR (BLEU utility) over the pooled evidence, alpha $mbr_alpha | | $(bleu $TEST "mbr.$TEST") | $mbr_val | $(speed $TEST "mbr.$TEST") (reranking only) | $(cpu "mbr.$TEST") |"
  echo "| LMBR: system $best + pooled evidence | $BEAM | $(bleu $TEST "lmbr.best.$TEST") | $(grep '^best:' tune.best.txt | sed 's/.*BLEU \([0-9.]*\).*/\1/') | $(speed $TEST "lmbr.best.$TEST") | $(cpu "lmbr.best.$TEST") |"
  echo "| LMBR: ensemble + pooled evidence | $BEAM | $(bleu $TEST "lmbr.ens.$TEST") | $(grep '^best:' tune.ens.txt | sed 's/.*BLEU \([0-9.]*\).*/\1/') | $(speed $TEST "lmbr.ens.$TEST") | $(cpu "lmbr.ens.$TEST") |"
  echo
  echo "LMBR (system $best): $OPT_BEST"
  echo "LMBR (ensemble): $OPT_ENS"
} > RESULTS.md
cat RESULTS.md
