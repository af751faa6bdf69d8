#!/usr/bin/env bash
# make bench-04: stage 04's benchmark, ours and PyTorch's in the same run on the same GPU.
#   1. the leaderboard point (batch 1, 16 heads, N 16384, d 64, bf16, causal, fwd+bwd), ours
#      then PyTorch SDPA (flash, cuDNN);
#   2. the sweep: batch 1, 16 heads, causal, N 128..65536, d 16..128, bf16 (fp32 up to N 8192);
#   3. the side-by-side table and the plot (compare.py).
# Env: BUILD (build dir); N_LIST, D_LIST (shorter sweeps); LB_REPS (leaderboard reps, 100);
# BENCH_ARGS / TORCH_ARGS (extra flags for the two sweeps); SKIP_LB=1 skips step 1. Each row
# names the dispatch row that ran (the lab's bench_rungs times the kernels that lost).
# Without a GPU: one line saying so and exit status 2, before anything is run or written (the
# same in every stage's bench.sh; README, "Conventions").
set -euo pipefail
BUILD=${BUILD:-build}
"$BUILD/common/envreport" --need-gpu "make bench-04" || exit $?
N_LIST=${N_LIST:-128,256,512,1024,2048,4096,8192,16384,32768,65536}
D_LIST=${D_LIST:-16,32,64,128}
mkdir -p results
have_torch() { python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; }
echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if [ "${SKIP_LB:-0}" != 1 ]; then
  echo "## leaderboard"
  "$BUILD/04_flashattn_bwd/bench" --mode leaderboard --lb-reps "${LB_REPS:-100}"
  if have_torch; then
    # --do-bench: SDPA's fwd+bwd under triton's do_bench too, the statistic `bench` prints beside ours
    python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
      --reps "${LB_REPS:-100}" --budget-ms 100000 --do-bench --csv results/04_leaderboard_torch.csv
  fi
fi
echo "## sweep"
# shellcheck disable=SC2086
"$BUILD/04_flashattn_bwd/bench" --mode sweep --N "$N_LIST" --d "$D_LIST" ${BENCH_ARGS:-}
if have_torch; then
  # shellcheck disable=SC2086
  python3 04_flashattn_bwd/bench_torch.py --N "$N_LIST" --d "$D_LIST" --csv results/04_torch.csv ${TORCH_ARGS:-}
else
  echo "(PyTorch with CUDA not found: the PyTorch columns stay empty)"
fi
python3 04_flashattn_bwd/compare.py
