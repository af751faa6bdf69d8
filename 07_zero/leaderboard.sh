#!/usr/bin/env bash
# make leaderboard: the course's 2026 leaderboard step on 2 GPUs. One full AdamW step of the
# 8b-class model (d_model 4096, 34 blocks, 32 heads of 128, d_ff 11008, vocabulary 151936),
# context 32768, batch 2 (one sequence a GPU), bf16, in the configuration the accounting chose
# (accounting --lm 8b; ACCOUNTING.md "The leaderboard step"): ZeRO-3 with bf16 all-gathers and
# fp32 masters, block checkpointing, flash attention, the LM head and loss in chunks of 4096 rows.
# Then, where python3 has torch, PyTorch's answer on the same GPUs: FSDP2 with
# MixedPrecisionPolicy(bf16), block checkpointing, SDPA, the same chunked head.
#   07_zero/leaderboard.sh [--steps N] [--warmup N] [--out DIR]    (defaults 5, 2, results/leaderboard)
# Each side: the median step after the warm-up and the peak per GPU by phase; rows appended to
# DIR/ours.csv and DIR/torch.csv. Needs 2 GPUs with about 110 GB each (H200; an H100's 80 GB
# is too little: accounting --lm 8b says why); without them one line, exit 2.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
steps=5 warmup=2 out=results/leaderboard
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=${2:-}; shift 2 ;;
    --warmup) warmup=${2:-}; shift 2 ;;
    --out) out=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "leaderboard: error: unknown argument '$1' (allowed: --steps N, --warmup N, --out DIR)" >&2; exit 2 ;;
  esac
done
for v in "$steps" "$warmup"; do
  case "$v" in ''|*[!0-9]*) echo "leaderboard: error: --steps and --warmup take whole numbers, got '$v'" >&2; exit 2 ;; esac
done
[ "$steps" -ge 1 ] || { echo "leaderboard: error: --steps must be at least 1" >&2; exit 2; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${ngpu:-0}" -lt 2 ]; then
  echo "leaderboard: error: the step runs on 2 GPUs, this machine has ${ngpu:-0} (its memory a GPU: build/07_zero/accounting --lm 8b)" >&2
  exit 2
fi
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
echo "== ours: zero_train, ZeRO-3 bf16, block checkpointing, flash attention, head in chunks of 4096"
MPIRUN_TIMEOUT=${MPIRUN_TIMEOUT:-900} scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model 8b --context 32768 --batch 1 \
  --backend nccl --precision bf16 --attention flash --checkpoint block --head-chunk 4096 --zero 3 \
  --steps "$steps" --warmup "$warmup" --comm-timeout 300 --csv "$out/ours.csv"
rc=$?
if python3 -c "import torch" 2>/dev/null; then
  echo "== PyTorch: FSDP2 + MixedPrecisionPolicy(bf16), block checkpointing, SDPA, head in chunks of 4096"
  timeout -k 10 900 python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py \
    --model 8b --context 32768 --batch 1 --precision bf16 --sdpa --variants fsdp --checkpoint block --head-chunk 4096 \
    --steps "$steps" --warmup "$warmup" --csv "$out/torch.csv" || rc=1
else
  echo "== PyTorch: not run (python3 has no torch here)"
fi
exit $rc
