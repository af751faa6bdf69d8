#!/usr/bin/env bash
# Loss curves of several `train` runs in one PNG (train.csv: step,lr,loss,grad_norm,tokens_per_s,
# eval_loss): the training loss as a line per run, its evaluation losses as points.
#   scripts/plot_loss.sh out.png "title" label=path/train.csv [label=path/train.csv ...]
set -eu
if [ $# -lt 3 ]; then echo "usage: scripts/plot_loss.sh OUT.png TITLE LABEL=CSV [LABEL=CSV ...]" >&2; exit 2; fi
command -v gnuplot >/dev/null || { echo "plot_loss.sh: gnuplot not found (scripts/setup.sh installs it)" >&2; exit 2; }
out=$1 title=$2; shift 2
plots=""
i=1
for a in "$@"; do
  label=${a%%=*} csv=${a#*=}
  [ -r "$csv" ] || { echo "plot_loss.sh: cannot read $csv (give LABEL=CSV)" >&2; exit 2; }
  plots="$plots '$csv' using 1:3 with lines lw 1 lc $i title '$label train',"
  plots="$plots '$csv' using 1:(\$6 > 0 ? \$6 : NaN) with linespoints pt 7 ps 1 lw 2 lc $i title '$label eval',"
  i=$((i + 1))
done
tmp="$out.tmp.png"  # written whole, then renamed: no half-written plot left behind
gnuplot <<GP
set terminal pngcairo size 1000,600
set output '$tmp'
set datafile separator ','
set datafile missing ''
set key top right
set grid
set title '$title'
set xlabel 'step'
set ylabel 'loss (nats per token)'
plot ${plots%,}
GP
mv "$tmp" "$out"
echo "wrote $out"
