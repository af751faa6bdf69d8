#!/usr/bin/env bash
# The single-GPU measurements the course's questions rest on (issue 16) and the trainer on one
# GPU (issue 18), on one GPU with prebuilt binaries (built here, carried there). Steps as in
# device_dist.sh (lab/device/device_lib.sh: a time limit each, logs under results/device/, all of
# results/ packed into $OUT/all.tgz after every step).
#   OUT=/tmp/o B=build-dev scripts/device_h100.sh tests ckpt ctxmax sizes ...
# Parts:
#   tests     the GPU tests of activation checkpointing, the dtype table, the profiler (01),
#             and the roofline (04)
#   ckpt      activation checkpointing: XL, batch 4, context 2048, bf16 train step, every policy
#   ckpt1024  none, block, every-7 at context 1024 (where none fits): the recompute's cost
#   ctxmax    the longest context each checkpointing policy trains XL at (batch 4, bf16)
#   sizes     benchmarking_script (b): every size, context 512, 5 warm-up + 10 timed steps
#   nsys      nsys_profile: the CUPTI kernel summary, every size x context 128..1024, fp32 and
#             bf16, one train step (its forward phase is the forward-only answer)
#   memfwd    memory_profiling (a): 2.7B forward-only memory timeline (fp32, bf16)
#   naive     pytorch_attention: our naive sweep up to the out-of-memory rows, and PyTorch's
#             naive attention eager and compiled over the same grid (torch_compile (a))
#   flash     flash_benchmarking: the whole grid, fp32 to N 65536, ours and PyTorch's
#   roofline  every kernel against the measured peaks (04's roofline)
#   lb        the leaderboard point: our median and the course's do_bench mean, PyTorch's SDPA with do_bench
#   flashbig  fp32 d 128 at N 32768 and 65536 (cut off by the flash part's limit on 2026-11-23)
#   train1    issue 18: the small model on real text, one GPU, fp32 and bf16
#   compile   torch_compile (b): the whole model compiled vs eager beside ours
#   san       compute-sanitizer memcheck/racecheck over every stage's kernels (scripts/gpu_sanitize.sh)
#   gpu34     stages 03 and 04's whole test binaries (their GPU tests run, the rest again)
#   fwdov     issue 15: the overlapped wgmma forward (d 64, 128): its GPU tests, compute-sanitizer,
#             every variant at N 4096 and 16384 beside SDPA flash and cuDNN in the same call
#   fa3       issue 15: the FlashAttention-3-style forward's checks (flash_fwd_bf16_fa3.cu; first run 2026-11-26):
#             smoke runs with short limits first (a hang costs a minute, not the call), then the
#             GPU tests and memcheck/racecheck/synccheck; if a smoke run fails, memcheck on the
#             smallest shapes instead, for the diagnosis
#   sweep15   issue 15's tables from one run, PyTorch beside: bench-04 (the leaderboard with
#             do_bench, then forward + backward over d 16..128 x N 128..65536, bf16, fp32 to
#             N 8192) with the defaults (fa3 forward, version 21 backward; 20 at d 128); then the forward
#             alone over the same grid, 16 heads, bf16: the default, the old default (entry 0,
#             mma.sync) and SDPA flash / cuDNN
#   train15   the bf16 train step with --attention flash (fa3 forward, version 19 backward at the
#             models' head dim 64) beside naive attention and PyTorch eager / compiled, context
#             512, small and medium, one run (train_compare.sh); then ours alone at 1024 and 2048
#   fa3ncu    ncu (SpeedOfLight, scheduler and warp-state stalls, pipes) on one launch each of the
#             default, wgmma-ov and fa3 forwards at N 16384, d 64 and 128
#   flashmodel the model trained with the default flash attention (fa3 forward, version 21
#             backward; head dim 64) under compute-sanitizer memcheck, one bf16 step
#   (bwd128, v21, ldt21, ldtab: the backward ladder's parts, now lab/04_flashattn_bwd/device_04.sh.
#   pp22, v22: the parts that ran backward version 22, version 21's kernel with its consumers in
#             ping-pong, in two forms, and fa3 w16's first runs, on 2026-11-26; version 22 lost and
#             was removed, so were they: their logs were dropped with them, the commits 06ebd55 and 634f0ed hold the code)
#   fa3bench  its timings: every forward variant at N 4096 and 16384 (d 64, 128), the leaderboard
#             point with fa3's forward (do_bench mean too), d 128 forward + backward with fa3 and
#             backward version 20; SDPA flash and cuDNN in the same call
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-results/device_out}
L=results/device
R=results/h100
mkdir -p "$O" "$L" "$R"
export LD_LIBRARY_PATH=$PWD/.criterion/lib:${LD_LIBRARY_PATH:-}
B=${B:-build}
BM="$B/01_benchmarking/benchmark"
. lab/device/device_lib.sh  # step, last_ok
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$L/gpu.txt" 2>&1
# variant_index D PREFIX: the index of the first bf16 forward variant at head dim D whose name
# starts with PREFIX, read from the variant table (flash_fwd_bf16_dD.cu), so that a part names
# its kernel and not a number that shifts when a variant is added.
variant_index() {
  grep -o '^    {"[^"]*"' "03_flashattn_fwd/flash_fwd_bf16_d$1.cu" | sed 's/^    {"//; s/"$//' |
    awk -v p="$2" 'index($0, p) == 1 {print NR - 1; exit}'
}
for s in "$@"; do
  case $s in
  tests)
    step t01_ckpt_prec 150 "$B/01_benchmarking/test_01" --jobs 1 --filter '@(checkpoint|precision|profiler)/*'
    [ -x "$B/04_flashattn_bwd/test_04" ] && step t04_roofline 90 "$B/04_flashattn_bwd/test_04" --jobs 1 --filter 'roofline*/*'
    ;;
  ckpt)  # bf16: fp32 XL at context 2048 does not fit 80 GB without checkpointing either way
    for k in none block every-2 every-4 every-7 every-12 every-24 every-48; do
      step ckpt_$k 60 "$BM" --model xl --context 2048 --batch 4 --mode train --precision bf16 \
        --checkpoint $k --warmup 2 --steps 5 --memory --out $R/ckpt --csv ckpt.csv
    done
    ;;
  ckpt1024)  # the recompute's cost where none fits too: XL at context 1024
    for k in none block every-7; do
      step ckpt1024_$k 60 "$BM" --model xl --context 1024 --batch 4 --mode train --precision bf16 \
        --checkpoint $k --warmup 2 --steps 5 --out $R/ckpt --csv ckpt1024.csv
    done
    ;;
  ctxmax)  # the first context that does not fit ends each policy's search
    for k in none block every-7; do
      for T in 2048 4096 6144 8192 12288 16384 24576 32768; do
        step ctx_${k}_$T 90 "$BM" --model xl --context $T --batch 4 --mode train --precision bf16 \
          --checkpoint $k --warmup 1 --steps 1 --out $R/ctxmax --csv ctxmax.csv
        last_ok && ! grep -q "OOM" "$L/ctx_${k}_$T.log" || break
      done
    done
    ;;
  sizes)
    step sizes_5x10 300 env BUILD="$B" BENCH_OUT=$R/sizes BENCH_PARTS=sizes BENCH_CONTEXTS=512 \
      BENCH_WARMUP=5 BENCH_STEPS=10 01_benchmarking/bench.sh
    ;;
  nsys)
    for size in small medium large xl 2.7B; do for T in 128 256 512 1024; do for p in fp32 bf16; do
      step prof_${size}_${T}_$p 60 "$BM" --model $size --context $T --batch 4 --mode train --precision $p \
        --warmup 1 --steps 1 --profile --out $R/nsys --csv nsys.csv
    done; done; done
    ;;
  memfwd)
    for p in fp32 bf16; do
      step memfwd_$p 60 "$BM" --model 2.7B --context 512 --batch 4 --mode forward --precision $p \
        --warmup 1 --steps 2 --memory --out $R/memfwd --csv memfwd.csv
    done
    ;;
  naive)
    step naive_ours 120 "$B/03_flashattn_fwd/bench" --sweep naive --N 256,1024,4096,8192,16384,32768,65536 \
      --csv $R/naive/03_naive.csv
    step naive_torch 240 python3 03_flashattn_fwd/bench_torch_naive.py --N 256,1024,4096,8192,16384,32768 \
      --csv $R/naive/torch_naive.csv
    ;;
  flash)
    step flash_ours 240 "$B/04_flashattn_bwd/bench" --mode sweep --f32-max-N 65536 --naive-max-N 65536 \
      --warmup 2 --reps 10 --budget-ms 400 --csv $R/flash/04_sweep.csv
    step flash_fwd_ours 120 "$B/03_flashattn_fwd/bench" --sweep flash --H 16 --naive-max-N 65536 \
      --warmup 2 --reps 10 --budget-ms 400 --csv $R/flash/03_flash.csv
    [ -n "${FLASH_TORCH:-}" ] && step flash_torch 200 python3 04_flashattn_bwd/bench_torch.py --f32-max-N 65536 --naive-max-N 65536 \
      --warmup 2 --reps 10 --budget-ms 400 --csv $R/flash/04_torch.csv
    ;;
  lb)  # the leaderboard point with the course's statistic (do_bench's mean) beside our median, and PyTorch's
    step lb_ours 120 "$B/04_flashattn_bwd/bench" --mode leaderboard --lb-reps 100 --csv $R/lb/04_leaderboard.csv
    step lb_torch 180 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
      --reps 100 --budget-ms 100000 --do-bench --csv $R/lb/04_leaderboard_torch.csv
    ;;
  flashbig)  # the fp32 d 128 points the flash part's time limit cut off
    step flash_f32_d128 420 "$B/04_flashattn_bwd/bench" --mode sweep --dtype f32 --d 128 --N 32768,65536 \
      --f32-max-N 65536 --naive-max-N 65536 --warmup 1 --reps 3 --budget-ms 400 --csv $R/flash/04_sweep_f32_d128.csv
    ;;
  san)
    step sanitize 300 env BUILD="$B" scripts/gpu_sanitize.sh
    ;;
  gpu34)
    step t03 200 "$B/03_flashattn_fwd/test_03" --jobs 1
    step t04 300 "$B/04_flashattn_bwd/test_04" --jobs 1
    ;;
  fwdov)
    step t03_cuda 200 "$B/03_flashattn_fwd/test_03" --jobs 1 --filter 'cuda/*'
    # variant:d of the wgmma-ov entries (flash_fwd_bf16_d64.cu, _d128.cu)
    for vd in $(variant_index 64 "wgmma-ov w8 "):64 $(variant_index 64 "wgmma-ov w12 "):64 $(variant_index 128 "wgmma-ov w8 "):128; do
      for tool in memcheck racecheck; do
        step san_ov_${vd%%:*}_${vd#*:}_$tool 120 compute-sanitizer --tool $tool --error-exitcode 9 \
          "$B/03_flashattn_fwd/flash_fwd" --device cuda --dtype bf16 --variant ${vd%%:*} --d ${vd#*:} \
          --B 1 --H 2 --Nq 333 --Nk 201 --causal --check --out ''
        last_ok || grep -h 'check vs\|SUMMARY' "$L/san_ov_${vd%%:*}_${vd#*:}_$tool.log"
      done
    done
    mkdir -p $R/fwdov
    step scan_ov 240 "$B/03_flashattn_fwd/bench" --sweep flash --N 4096,16384 --d 64,128 --dtype bf16 --H 16 \
      --scan-variants --reps 20 --csv $R/fwdov/03_scan.csv
    step torch_fwd 180 python3 03_flashattn_fwd/bench_torch.py --H 16 --N 4096,16384 --d 64,128 --dtype bf16 \
      --impls sdpa_flash,sdpa_cudnn --reps 20 --csv $R/fwdov/03_torch.csv
    ;;
  fa3)
    v64=$(variant_index 64 "fa3 "); v128=$(variant_index 128 "fa3 ")
    echo "fa3 variants: d 64 -> $v64, d 128 -> $v128" | tee -a "$O/steps.txt"
    fa3_ok=1
    for vd in $v64:64 $v128:128; do
      for c in "" --causal; do  # ragged both ways: partial query and key tiles, Nq != Nk
        step fa3_smoke_d${vd#*:}${c:+_causal} 60 "$B/03_flashattn_fwd/flash_fwd" --device cuda --dtype bf16 \
          --variant ${vd%%:*} --d ${vd#*:} --B 1 --H 2 --Nq 333 --Nk 201 $c --check --out '' || fa3_ok=0
      done
    done
    if [ $fa3_ok = 1 ]; then
      step t03_cuda_fa3 300 "$B/03_flashattn_fwd/test_03" --jobs 1 --filter 'cuda/*'
      for vd in $v64:64 $v128:128; do
        for tool in memcheck racecheck synccheck; do
          step san_fa3_${vd#*:}_$tool 150 compute-sanitizer --tool $tool --error-exitcode 9 \
            "$B/03_flashattn_fwd/flash_fwd" --device cuda --dtype bf16 --variant ${vd%%:*} --d ${vd#*:} \
            --B 1 --H 2 --Nq 333 --Nk 201 --causal --check --out ''
        done
      done
    else  # the smallest shapes under memcheck: one tile, then two, causal and not
      for vd in $v64:64 $v128:128; do
        for shape in "128 128" "256 256"; do
          set -- $shape
          step fa3_diag_d${vd#*:}_$1 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$B/03_flashattn_fwd/flash_fwd" --device cuda --dtype bf16 --variant ${vd%%:*} --d ${vd#*:} \
            --B 1 --H 1 --Nq $1 --Nk $2 --check --out ''
        done
      done
    fi
    ;;
  flashmodel)
    step san_flash_model 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/04_flashattn_bwd/benchmark" \
      --model small --context 200 --batch 1 --mode train --precision bf16 --attention flash --warmup 0 --steps 1 \
      --out $R/flashmodel
    ;;
  fa3bench)  # the timings, once fa3 has passed: forward scan, then forward + backward with it, PyTorch in the same call
    v64=$(variant_index 64 "fa3 "); v128=$(variant_index 128 "fa3 ")
    mkdir -p $R/fa3
    step scan_fa3 240 "$B/03_flashattn_fwd/bench" --sweep flash --N 4096,16384 --d 64,128 --dtype bf16 --H 16 \
      --scan-variants --reps 20 --csv $R/fa3/03_scan.csv
    step torch_fwd_fa3 180 python3 03_flashattn_fwd/bench_torch.py --H 16 --N 4096,16384 --d 64,128 --dtype bf16 \
      --impls sdpa_flash,sdpa_cudnn --reps 20 --csv $R/fa3/03_torch.csv
    step lb_fa3 120 "$B/04_flashattn_bwd/bench" --mode leaderboard --fwd-variants 64:$v64 --lb-reps 100 \
      --csv $R/fa3/04_leaderboard_fa3.csv
    step fb128_fa3 120 "$B/04_flashattn_bwd/bench" --mode sweep --dtype bf16 --d 128 --N 16384 --H 16 \
      --fwd-variants 128:$v128 --naive-max-N 0 --csv $R/fa3/04_d128_fa3_v20.csv
    step torch_fb128 120 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 128 --dtype bf16 \
      --impls sdpa_flash,sdpa_cudnn --reps 20 --csv $R/fa3/04_d128_torch.csv
    ;;
  sweep15)
    step bench04 330 env BUILD="$B" LB_REPS=50 BENCH_ARGS="--reps 10 --warmup 2 --budget-ms 250" \
      TORCH_ARGS="--reps 10 --warmup 2 --budget-ms 250" 04_flashattn_bwd/bench.sh
    mkdir -p $R/sweep15
    step fwd_default 90 "$B/03_flashattn_fwd/bench" --sweep flash --H 16 --dtype bf16 --naive-max-N 0 \
      --reps 10 --warmup 2 --budget-ms 250 --csv $R/sweep15/03_fwd_default.csv
    step fwd_entry0 90 "$B/03_flashattn_fwd/bench" --sweep flash --H 16 --dtype bf16 --d 64,128 --naive-max-N 0 \
      --variants 64:0,128:0 --reps 10 --warmup 2 --budget-ms 250 --csv $R/sweep15/03_fwd_entry0.csv
    step fwd_torch 150 python3 03_flashattn_fwd/bench_torch.py --H 16 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
      --reps 10 --warmup 2 --budget-ms 250 --csv $R/sweep15/03_fwd_torch.csv
    ;;
  train15)
    step train512 420 env BUILD="$B" BENCH_OUT=$R/train15 TRAIN_CONTEXTS=512 04_flashattn_bwd/train_compare.sh
    for size in small medium; do for T in 1024 2048; do
      step train_${size}_$T 60 "$B/04_flashattn_bwd/benchmark" --model $size --context $T --batch 4 --mode train \
        --precision bf16 --attention flash --warmup 3 --steps 10 --out $R/train15 --csv train_long.csv
    done; done
    ;;
  fa3ncu)  # ncu's view of the stalls: the default, wgmma-ov and fa3 forwards at N 16384 (clocks left alone)
    for d in 64 128; do
      for name in "$( [ $d = 64 ] && echo 'w4 mt2 bk64' || echo 'w8 mt1 bk64')" "wgmma-ov w8 " "fa3 "; do
        v=$(variant_index $d "$name"); tag=$(echo "$name" | tr -c 'a-z0-9\n' '_' | sed 's/_*$//')
        step ncu_fwd_d${d}_$tag 150 ncu --clock-control none -k regex:"flash_fwd" -c 1 --print-details all \
          --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
          --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats \
          --section InstructionStats "$B/03_flashattn_fwd/flash_fwd" --device cuda --dtype bf16 --variant $v \
          --d $d --B 1 --H 16 --Nq 16384 --Nk 16384 --causal --out ''  # the report: $L/ncu_fwd_*.log
      done
    done
    ;;
  roofline)
    step roofline 120 "$B/04_flashattn_bwd/roofline" --out $R/roofline
    ;;
  train1)  # 600 steps of 16 x 256 tokens: a fixed budget of 2.46 M tokens
    mkdir -p $R/train && "$B/11_train/tokenize" --in /usr/share/common-licenses --out $R/train/lic.bin > "$L/tokenize.log" 2>&1
    for p in bf16 fp32; do
      step train1_$p 150 "$B/11_train/train" --data $R/train/lic.bin --backend nccl --precision $p --model small \
        --context 256 --batch 16 --steps 600 --eval-every 100 --log-every 50 --peak-tflops $([ $p = bf16 ] && echo 989 || echo 67) \
        --out $R/train/gpu1_$p
    done
    ;;
  compile)
    step compile_model 300 python3 01_benchmarking/bench_torch.py --sizes small,medium --contexts 512 --batch 4 \
      --variants bf16,bf16-compile --modes forward,train --compile-modes forward,train --warmup 3 --steps 10 \
      --out $R/compile --csv torch_compile
    ;;
  *) echo "device_h100.sh: unknown part '$s' (see the header for the list)" >&2; exit 2 ;;
  esac
done
