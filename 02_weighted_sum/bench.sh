#!/usr/bin/env bash
# make bench-02: our kernels (bench) and PyTorch (bench_torch.py) on the same GPU in the same
# run, merged into results/02_weighted_sum/table.md with ratios, and a plot (bandwidth.png)
# of GB/s against size when gnuplot is installed. Extra arguments go to both timers
# (e.g. --rows 1K,1M --reps 20).
# Without a GPU: one line saying so and exit status 2, before anything is run or written (the
# same in every stage's bench.sh; README, "Conventions").
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
"$B/common/envreport" --need-gpu "make bench-02" || exit $?
OUT=results/02_weighted_sum
mkdir -p "$OUT"
status=0
"$B/02_weighted_sum/bench" --out "$OUT" "$@" | tee "$OUT/cuda.md" || status=$?
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 02_weighted_sum/bench_torch.py --out "$OUT/torch.csv" "$@" | tee "$OUT/torch.md"
else
  echo "(PyTorch with CUDA not found: the table has no PyTorch columns)"; rm -f "$OUT/torch.csv"
fi
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)  # no nvidia-smi: not fatal
python3 02_weighted_sum/bench_merge.py "$OUT" "${GPU:-unknown GPU}" "make bench-02${*:+ (args: $*)}"
if command -v gnuplot >/dev/null; then
  02_weighted_sum/plot.sh "$OUT" "${GPU:-}" && echo "plot: $OUT/bandwidth.png"
else
  echo "(gnuplot not found: no plot; run 02_weighted_sum/plot.sh $OUT where it is installed)"
fi
exit $status
