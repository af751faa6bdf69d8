#!/usr/bin/env bash
# The GPU runs of the newest pieces on 2 GPUs, binaries built on the machine: stage 10's ring
# (tests, checks, benchmarks beside PyTorch's context_parallel), the chunked LM head, stage 05's
# hierarchical all-reduce under two emulated nodes, bf16 ZeRO beside PyTorch's FSDP2 with
# MixedPrecisionPolicy; the 2026 leaderboard's 8b step beside FSDP2 (lb); the distributed tests
# under two emulated nodes (emu); compute-sanitizer (san). Parts (default): cp head hier fsdp.
#   OUT=$OUT lab/device/device_new_stages.sh [part...]
# Logs under results/newstages/, packed into $OUT/newstages.tgz after every step.
set -u
B=${B:-build}
O=${OUT:?set OUT}; L=results/newstages; mkdir -p "$L"
source lab/device/device_lib.sh
export NCCL_NVLS_ENABLE=0
pack() { tar czf "$O/newstages.tgz" "$L" 2>/dev/null; }
for part in ${*:-cp head hier fsdp}; do
  case $part in
  cp)
    step cp_tests 120 "$B/10_context/test_10" --jobs 1 --filter 'ring_gpu/*'; pack
    for dt in f32 bf16; do for sp in plain zigzag; do
      step cp_check_${dt}_$sp 40 scripts/mpirun.sh 2 "$B/10_context/ring_check" --backend nccl --dtype $dt --split $sp \
        --causal 1 --N 4093 --d 128 --BH 4; pack
    done; done
    for N in 32768 131072; do for sp in plain zigzag; do
      step cp_bench_${sp}_$N 60 scripts/mpirun.sh 2 "$B/10_context/ring_bench" --N $N --d 128 --heads 16 --causal 1 \
        --split $sp --dtype bf16 --warmup 3 --iters 10 --csv "$L/ring_bench.csv"; pack
    done
      step cp_torch_$N 90 python3 -m torch.distributed.run --nproc_per_node 2 10_context/bench_torch.py --N $N --head-dim 128 \
        --heads 16 --causal 1 --iters 10 --csv "$L/torch.csv"; pack
    done ;;
  head)
    step head_tests 120 "$B/tests/test_common" --jobs 1 --filter 'head_chunk/gpu_*'; pack
    step head_acct 60 "$B/07_zero/test_07" --jobs 1 --filter 'accounting_gpu/lm_acts_formula_is_the_gpu_models'; pack
    for hc in 0 2048; do
      step head_mem_$hc 90 "$B/04_flashattn_bwd/benchmark" --model 2.7B --context 4096 --batch 4 --precision bf16 \
        --attention flash --checkpoint block --memory --warmup 1 --steps 3 --head-chunk $hc; pack
    done ;;
  hier)
    step hier_tests 120 "$B/05_collectives/test_05" --jobs 1 --filter 'emulated_nccl/hier*'; pack
    step hier_check 60 scripts/mpirun.sh --emulate-nodes 2 2 "$B/05_collectives/collectives_check" --backend nccl \
      --counts 0,1,7,1000,65537,1000003; pack
    step hier_bench 90 scripts/mpirun.sh --emulate-nodes 2 2 "$B/05_collectives/allreduce_bench" \
      --backends nccl,ring-nccl,hier-nccl --sizes 1M,10M,100M,1G --iters 5 --warmup 2; pack ;;
  fsdp)
    x=(--model xl --context 512 --batch 2 --backend nccl --precision bf16 --attention flash --steps 10 --warmup 3 --comm-timeout 120)
    step fsdp_one 90 scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" "${x[@]}" --variant none,bucketed --bucket-mb 100 \
      --csv "$L/ddp_bf16.csv"; pack
    step fsdp_ours 150 scripts/mpirun.sh 2 "$B/07_zero/zero_train" "${x[@]}" --zero 1,3 --csv "$L/zero_bf16.csv"; pack
    step fsdp_ours_rbf16 90 scripts/mpirun.sh 2 "$B/07_zero/zero_train" "${x[@]}" --zero 3 --reduce-dtype bf16 \
      --csv "$L/zero_bf16.csv"; pack
    step fsdp_torch 200 python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py \
      --model xl --precision bf16 --sdpa --csv "$L/torch_bf16.csv"; pack ;;
  cpcheck)  # the ring's checks and PyTorch's context_parallel alone (cp without our benchmark)
    for dt in f32 bf16; do for sp in plain zigzag; do
      step cp_check_${dt}_$sp 40 scripts/mpirun.sh 2 "$B/10_context/ring_check" --backend nccl --dtype $dt --split $sp \
        --causal 1 --N 4093 --d 128 --BH 4; pack
    done; done
    for N in 32768 131072; do
      step cp_torch_$N 90 python3 -m torch.distributed.run --nproc_per_node 2 10_context/bench_torch.py --N $N --head-dim 128 \
        --heads 16 --causal 1 --iters 10 --csv "$L/torch.csv"; pack
    done ;;
  hier4)  # 4 GPUs as 2 emulated nodes of 2
    step hier4_check 60 scripts/mpirun.sh --emulate-nodes 2 4 "$B/05_collectives/collectives_check" --backend nccl \
      --counts 0,1,7,1000,65537,1000003; pack
    step hier4_bench 100 scripts/mpirun.sh --emulate-nodes 2 4 "$B/05_collectives/allreduce_bench" \
      --backends nccl,ring-nccl,hier-nccl --sizes 1M,10M,100M,1G --iters 5 --warmup 2 --out "$L" --tag hier4; pack
    step flat4_bench 60 scripts/mpirun.sh 4 "$B/05_collectives/allreduce_bench" \
      --backends nccl,ring-nccl,hier-nccl --sizes 1M,10M,100M,1G --iters 5 --warmup 2 --out "$L" --tag flat4; pack ;;
  lb)  # the 2026 leaderboard's step: 8b, context 32768, batch 2 over 2 GPUs, bf16, one AdamW step
    step lb_ours 240 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model 8b --context 32768 --batch 1 --backend nccl \
      --precision bf16 --attention flash --checkpoint block --head-chunk 4096 --zero 3 --steps 5 --warmup 2 \
      --comm-timeout 300 --csv "$L/lb_ours.csv"; pack
    step lb_torch 300 python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py \
      --model 8b --context 32768 --batch 1 --precision bf16 --sdpa --variants fsdp --checkpoint block \
      --head-chunk 4096 --steps 5 --warmup 2 --csv "$L/lb_torch.csv"; pack ;;
  cp2)  # the ring at 64k and d 64, one GPU (P = 1) beside it, PyTorch's context_parallel
    for d in 64 128; do for N in 32768 65536 131072; do
      [ $d = 128 ] && [ $N != 65536 ] && continue  # d 128 at 32k and 128k: measured before
      for sp in plain zigzag; do
        step cp_bench_${sp}_${N}_d$d 60 scripts/mpirun.sh 2 "$B/10_context/ring_bench" --N $N --d $d --heads 16 --causal 1 \
          --split $sp --dtype bf16 --warmup 3 --iters 10 --csv "$L/ring_bench.csv"; pack
      done
    done; done
    for d in 64 128; do for N in 32768 65536 131072; do
      step cp_one_${N}_d$d 60 scripts/mpirun.sh 1 "$B/10_context/ring_bench" --N $N --d $d --heads 16 --causal 1 \
        --split plain --dtype bf16 --warmup 3 --iters 10 --csv "$L/ring_bench.csv"; pack
      step cp_torch_${N}_d$d 90 python3 -m torch.distributed.run --standalone --nproc_per_node 2 10_context/bench_torch.py \
        --N $N --head-dim $d --heads 16 --causal 1 --iters 10 --csv "$L/torch.csv"; pack
    done; done ;;
  emu)  # the distributed tests over NCCL with the 2 GPUs as 2 emulated nodes
    step emu_gpu 330 env BUILD="$B" scripts/test_emulated.sh --gpu; pack ;;
  san)  # compute-sanitizer over every stage's kernels, the ring's and the chunked head's included
    step sanitize 280 env BUILD="$B" scripts/gpu_sanitize.sh; pack ;;
  suite|suite4)  # the whole GPU suite (make test-gpu's binaries, from $B); suite4: the multi-GPU binaries at 4 ranks
    multi=""; for s in 05_collectives/test_05 06_ddp/test_06 07_zero/test_07 08_pipeline/test_08 09_tensor/test_09 \
      10_context/test_10 11_train/test_11; do multi+="$B/$s "; done
    if [ $part = suite ]; then
      step test_gpu 420 env BUILD="$B" TEST_GPU_LOGS="$L/test-gpu" scripts/test_gpu.sh --limit 240 --multi "$multi" \
        "$B/tests/test_common" $(for n in 01_benchmarking/test_01 02_weighted_sum/test_02 03_flashattn_fwd/test_03 \
        04_flashattn_bwd/test_04; do echo "$B/$n"; done) $multi; pack
    else
      step test_gpu_4ranks 300 env BUILD="$B" TEST_GPU_RANKS=4 TEST_GPU_LOGS="$L/test-gpu-4ranks" scripts/test_gpu.sh \
        --limit 150 --multi "$multi" $multi; pack
    fi ;;
  ring_san)
    step ring_sanitize 120 env BUILD="$B" scripts/gpu_sanitize.sh --ring-only; pack ;;
  *) echo "device_new_stages.sh: error: unknown part '$part'; parts: cp cpcheck cp2 head hier hier4 fsdp lb emu san ring_san suite suite4" >&2; exit 2 ;;
  esac
done
cat "$O/steps.txt"
