#!/usr/bin/env bash
# make bench-05: stage 05's benchmark, ours and PyTorch's in the same run on the same machine.
#   1. GPUs (one rank per GPU, if there are 2+): nccl, nccl-direct and ring-nccl rows, 1K..1G;
#      then torch.distributed.all_reduce over NCCL at the course's sizes;
#   2. CPU: the MPI backend (mpi: our communicator, whose all-reduce is the shared-memory one on
#      one node), MPI's own MPI_Allreduce (mpi-lib) and the ring over MPI at 2, 4 and 6
#      processes, then Gloo the same;
#   3. the table of the course (backend x size x process count) and the busbw plot (report.py).
# Env: BUILD (build dir); NP_CPU (process counts on the CPU, "2 4 6"); CPU_SIZES, GPU_MAX;
# ITERS (20), WARMUP (5); SKIP_TORCH=1; SKIP_CPU=1; SKIP_GPU=1.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=results/05_collectives
NP_CPU=${NP_CPU:-"2 4 6"}
CPU_SIZES=${CPU_SIZES:-1K,32K,1M,10M,100M,1G}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
mkdir -p "$OUT"
rm -f "$OUT"/torch.csv
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c GPU || true)
have_torch() { python3 -c "import torch.distributed" 2>/dev/null; }
torchrun() { timeout -k 10 600 python3 -m torch.distributed.run --standalone --nproc_per_node "$@"; }
status=0
if [ "${SKIP_GPU:-0}" != 1 ] && [ "$ngpu" -ge 2 ]; then
  echo "## GPUs: $ngpu x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  scripts/mpirun.sh "$ngpu" "$BUILD/05_collectives/allreduce_bench" --backends nccl,nccl-direct,ring-nccl \
    --maxbytes "${GPU_MAX:-1G}" --iters "$ITERS" --warmup "$WARMUP" --tag gpu_np"$ngpu" || status=1
  if [ "${SKIP_TORCH:-0}" != 1 ] && have_torch; then
    torchrun "$ngpu" 05_collectives/bench_torch.py --backend nccl --sizes 1K,32K,1M,10M,100M,1G \
      --iters "$ITERS" --warmup "$WARMUP" --csv "$OUT/torch.csv" || status=1
  fi
else
  echo "## GPUs: fewer than 2 (the NCCL rows need one GPU per rank): skipped"
fi
if [ "${SKIP_CPU:-0}" != 1 ]; then
  for np in $NP_CPU; do
    echo "## CPU, $np processes"
    scripts/mpirun.sh "$np" "$BUILD/05_collectives/allreduce_bench" --backends mpi,mpi-lib,ring-mpi \
      --sizes "$CPU_SIZES" --iters "$ITERS" --warmup "$WARMUP" --tag cpu_np"$np" || status=1
    if [ "${SKIP_TORCH:-0}" != 1 ] && have_torch; then
      torchrun "$np" 05_collectives/bench_torch.py --backend gloo --sizes "$CPU_SIZES" \
        --iters "$ITERS" --warmup "$WARMUP" --csv "$OUT/torch.csv" || status=1
    fi
  done
fi
python3 05_collectives/report.py "$OUT" || status=1
exit $status
