#!/usr/bin/env bash
# The distributed stages on a GPU machine with prebuilt binaries (built here, carried there:
# no device time spent compiling). Every step has its own time limit and writes its log
# straight into $OUT (so a step that overruns still leaves the others' logs).
#   OUT=/tmp/o scripts/device_dist.sh 05 06
set -u
cd "$(dirname "$0")/.."
O=${OUT:-results/device}
mkdir -p "$O"
export NCCL_NVLS_ENABLE=0 SETUP_SKIP=1 LD_LIBRARY_PATH=$PWD/.criterion/lib:${LD_LIBRARY_PATH:-}
B=build
step() {  # step NAME SECONDS command...
  local name=$1 secs=$2; shift 2
  echo "[$(date -u +%H:%M:%S)] $name (limit ${secs}s)" | tee -a "$O/steps.txt"
  timeout -k 5 "$secs" "$@" > "$O/$name.log" 2>&1
  echo "[$(date -u +%H:%M:%S)]   $name exit $?" | tee -a "$O/steps.txt"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$O/gpu.txt" 2>&1
for s in "$@"; do
  case $s in
  05)
    step t05 150 "$B/05_collectives/test_05" --jobs 1
    step bench05_gpu 150 scripts/mpirun.sh 2 "$B/05_collectives/allreduce_bench" --backends nccl,nccl-direct,ring-nccl --tag gpu_np2
    step torch05_nccl 90 python3 -m torch.distributed.run --standalone --nproc_per_node 2 05_collectives/bench_torch.py --backend nccl --csv results/05_collectives/torch.csv
    for np in 2 4 6; do
      step bench05_cpu$np 100 scripts/mpirun.sh $np "$B/05_collectives/allreduce_bench" --backends mpi,ring-mpi --sizes 1K,1M,10M,100M --tag cpu_np$np
      step torch05_gloo$np 60 python3 -m torch.distributed.run --standalone --nproc_per_node $np 05_collectives/bench_torch.py --backend gloo --sizes 1K,1M,10M,100M --csv results/05_collectives/torch.csv
    done
    step report05 30 python3 05_collectives/report.py results/05_collectives
    cp results/05_collectives/*.csv results/05_collectives/report.md "$O/" 2>/dev/null
    ;;
  06)
    step t06 120 "$B/06_ddp/test_06" --jobs 1
    ;;
  esac
done
tar czf "$O/results.tgz" results 2>/dev/null
