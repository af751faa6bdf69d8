#!/usr/bin/env bash
# Stage 10 on GPUs: builds, runs the ring_gpu tests, ring_check on every dtype/split/mask, and the
# benchmarks (ours, plain and zigzag, and PyTorch's context_parallel) on P GPUs.
#   lab/10_context/device_gpu.sh OUTDIR [P]
# Writes OUTDIR/{build.log,test_gpu.log,check.log,ring_bench.csv,torch.csv,bench.log}.
set -u
cd "$(dirname "$0")/../.."
out=${1:?give an output folder}; P=${2:-2}
mkdir -p "$out"
B=${BUILD:-build}
make -j16 all > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
TEST_GPU_RANKS=$P $B/10_context/test_10 --filter 'ring_gpu/*' --verbose > "$out/test_gpu.log" 2>&1; echo "ring_gpu tests: exit $?" | tee -a "$out/test_gpu.log"
for dt in f32 bf16; do for sp in plain zigzag; do for c in 0 1; do
  scripts/mpirun.sh $P $B/10_context/ring_check --backend nccl --dtype $dt --split $sp --causal $c --N 4099 --d 128 --BH 4 >> "$out/check.log" 2>&1
  echo "exit $?" >> "$out/check.log"
done; done; done
for sp in plain zigzag; do for N in 8192 32768 131072; do
  scripts/mpirun.sh $P $B/10_context/ring_bench --N $N --d 128 --heads 16 --causal 1 --split $sp --dtype bf16 \
      --warmup 3 --iters 20 --csv "$out/ring_bench.csv" >> "$out/bench.log" 2>&1
done; done
for N in 8192 32768 131072; do
  python3 -m torch.distributed.run --nproc_per_node $P 10_context/bench_torch.py --N $N --head-dim 128 --heads 16 \
      --causal 1 --iters 20 --csv "$out/torch.csv" >> "$out/bench.log" 2>&1
done
tail -n 40 "$out/check.log" "$out/bench.log"
