#!/usr/bin/env bash
# Training with flash attention vs PyTorch, same GPU, same run: our bf16 train step (small and
# medium, batch 4, contexts 512/1024/2048) with naive and with flash attention, beside PyTorch's
# bf16 autocast eager and bf16 + SDPA + torch.compile train steps. Table:
# results/04_flashattn_bwd/train/compare.md (ratio = ours / torch; below 1 we are faster).
#   04_flashattn_bwd/train_compare.sh
#   TRAIN_SIZES=small TRAIN_CONTEXTS=512 04_flashattn_bwd/train_compare.sh     (quicker)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BENCH_OUT=${BENCH_OUT:-results/04_flashattn_bwd/train} \
COMPARE_BIN=$BUILD/04_flashattn_bwd/benchmark \
COMPARE_SIZES=${TRAIN_SIZES:-small medium} \
COMPARE_CONTEXT=${TRAIN_CONTEXTS:-512 1024 2048} \
COMPARE_MODES=train COMPARE_PRECISIONS=bf16 COMPARE_ATTENTIONS="naive flash" \
COMPARE_TORCH_VARIANTS=bf16 COMPARE_COMPILE=1 \
COMPARE_WARMUP=${TRAIN_WARMUP:-3} COMPARE_STEPS=${TRAIN_STEPS:-10} \
BUILD=$BUILD exec 01_benchmarking/compare.sh
