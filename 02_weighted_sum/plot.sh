#!/usr/bin/env bash
# plot.sh [RESULTS_DIR] [GPU name]: draws RESULTS_DIR/bandwidth.png from the plot_<dtype>.dat files bench_merge.py writes:
# GB/s against the size of x, for the copy, our forward/backward, and PyTorch's.
set -eu
OUT=${1:-results/02_weighted_sum}
GPU=${2:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)}
gnuplot <<GP
set terminal pngcairo size 1400,560 font ",11" noenhanced
set output "$OUT/bandwidth.png"
set multiplot layout 1,2 title "weighted sum, D = 1024: GB/s (bytes read + written / median time) ${GPU:+on $GPU}"
set logscale x 2
set xlabel "size of x (MiB)"
set ylabel "GB/s"
set grid
set key top left
set yrange [0:*]
do for [dt in "f32 bf16"] {
  set title dt
  f = sprintf("$OUT/plot_%s.dat", dt)
  plot f using 1:2 with linespoints lw 2 dt 2 lc rgb "black" title "cudaMemcpy D2D", \
       f using 1:3 with linespoints lw 2 lc rgb "#1f77b4" title "ours forward", \
       f using 1:4 with linespoints lw 2 lc rgb "#d62728" title "ours backward", \
       f using 1:5 with linespoints lw 1 dt 3 lc rgb "#d62728" title "ours backward (atomic grad_w)", \
       f using 1:6 with linespoints lw 1 dt 4 lc rgb "#1f77b4" title "PyTorch forward", \
       f using 1:7 with linespoints lw 1 dt 4 lc rgb "#d62728" title "PyTorch backward"
}
unset multiplot
GP
