#!/usr/bin/env bash
# make bench-03: stage 03's benchmarks on the GPU, ours and PyTorch's in the same run.
#   1. the naive-attention sweep (batch 8, 1 head, fp32, d x N): forward, backward, memory
#   2. the flash sweep (batch 1, causal, d x N x dtype): our flash forward vs our naive forward
#   3. the same shapes in PyTorch: SDPA flash / cuDNN / efficient, naive, naive + torch.compile
#   4. the combined table and plots (bench_report.py; gnuplot for the PNGs if present)
# Env: BUILD (default build), QUICK=1 (fewer N), VARIANTS="64:0,..." (bf16 kernel per head dim),
#      COMPILE_N (N for torch.compile, default 1024,4096,16384), TORCH=0 (skip PyTorch),
#      RESULTS (output directory, default results).
# Without a GPU: one line saying so and exit status 2, before anything is run or written (the
# same in every stage's bench.sh; README, "Conventions").
set -uo pipefail
FAILED=0
step() { "$@" || { echo "bench-03: step failed (exit $?): $*" >&2; FAILED=1; }; }
BUILD=${BUILD:-build}
"$BUILD/common/envreport" --need-gpu "make bench-03" || exit $?
B=$BUILD/03_flashattn_fwd
R=${RESULTS:-results}
mkdir -p "$R"
if [ "${QUICK:-0}" = 1 ]; then
  NS=128,512,2048,8192,16384,32768,65536
  NAIVE_REPS="--reps 5 --warmup 1 --budget-ms 150"
  FLASH_REPS="--reps 10 --warmup 2 --budget-ms 150"
else
  NS=128,256,512,1024,2048,4096,8192,16384,32768,65536
  NAIVE_REPS="--reps 20"
  FLASH_REPS="--reps 20"
fi
V=${VARIANTS:+--variants $VARIANTS}

echo "## naive attention sweep"
step $B/bench --sweep naive $NAIVE_REPS --csv $R/03_naive.csv
echo "## flash sweep (ours)"
step $B/bench --sweep flash --B 1 --H 1 --N $NS $FLASH_REPS $V --csv $R/03_flash.csv
if [ "${TORCH:-1}" = 1 ] && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "## flash sweep (PyTorch)"
  step python3 03_flashattn_fwd/bench_torch.py --B 1 --H 1 --N $NS --compile-d 64 --compile-N "${COMPILE_N:-1024,4096,16384}" \
    --compile-dtype bf16 ${TORCH_REPS:-$FLASH_REPS} --csv $R/03_torch.csv
else
  echo "(PyTorch with CUDA not found: the PyTorch columns are left out)"
fi
step python3 03_flashattn_fwd/bench_report.py --ours $R/03_flash.csv --torch $R/03_torch.csv \
  --naive $R/03_naive.csv --out $R/03_report.md --plots $R
exit $FAILED
