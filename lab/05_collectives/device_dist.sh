#!/usr/bin/env bash
# The distributed stages on a GPU machine with prebuilt binaries (built here, carried there:
# no device time spent compiling). Every step has its own time limit and writes its log
# under results/device/; after every step the whole of results/ is packed into $OUT/all.tgz
# (a step that overruns still leaves the others' results), and $OUT/steps.txt lists the steps.
#   OUT=/tmp/o lab/05_collectives/device_dist.sh 06 05
# B: the build directory carried over (default build; e.g. build-dev, built from a clean clone).
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-results/device_out}
L=results/device  # the logs (a loop below must not reuse the name)
mkdir -p "$O" "$L" results/05_collectives results/06_ddp results/07_zero
export NCCL_NVLS_ENABLE=0 SETUP_SKIP=1 LD_LIBRARY_PATH=$PWD/.criterion/lib:${LD_LIBRARY_PATH:-}
B=${B:-build}
TORCHRUN="python3 -m torch.distributed.run --standalone --nproc_per_node"  # a variable: `timeout` cannot run a shell function
. lab/device/device_lib.sh  # step, last_ok
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$L/gpu.txt" 2>&1
for s in "$@"; do
  case $s in
  06)
    step ddp_xl_fp32 200 scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" --model xl --context 512 --batch 2 \
      --variant all --bucket-mb 1,10,100,1000 --steps 10 --warmup 3 --csv results/06_ddp/ours.csv
    step torch_xl_fp32 180 python3 -m torch.distributed.run --standalone --nproc_per_node 2 06_ddp/bench_torch_ddp.py --model xl --csv results/06_ddp/torch.csv
    step t06 150 "$B/06_ddp/test_06" --jobs 1
    ;;
  12)  # stage 06, issue 12: the XL table with PyTorch's plan (1+25), the timelines, PyTorch in the same call
    step ddp_xl_fp32 260 scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" --model xl --context 512 --batch 2 \
      --variant all --bucket-mb 1,10,100,1000,25,1+25 --steps 10 --warmup 3 --csv results/06_ddp/ours.csv
    step torch_xl_fp32 150 $TORCHRUN 2 06_ddp/bench_torch_ddp.py --model xl --csv results/06_ddp/torch.csv
    step ddp_xl_timeline 120 scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" --model xl --context 512 --batch 2 \
      --variant flat,overlap,bucketed --bucket-mb 100 --steps 3 --warmup 2 --timeline results/06_ddp/timeline
    step t06_gpu 120 "$B/06_ddp/test_06" --jobs 1 --filter 'ddp_train_nccl/*'
    ;;
  07)  # stage 07, issue 13: every level on XL beside PyTorch's DDP / ZeRO / FSDP2, and the GPU tests
    step t07_gpu 150 "$B/07_zero/test_07" --jobs 1 --filter 'zero_train_nccl/*'
    step zero_xl 240 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model xl --context 512 --batch 2 \
      --zero all --backend nccl --steps 10 --warmup 3 --csv results/07_zero/ours.csv
    step zero_xl_course 120 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model xl --context 512 --batch 2 \
      --zero 1 --shard course --backend nccl --steps 10 --warmup 3 --csv results/07_zero/ours.csv
    step torch_zero_xl 240 $TORCHRUN 2 07_zero/bench_torch_zero.py --model xl --csv results/07_zero/torch.csv
    ;;
  emb)  # the embedding backward after its rewrite: the model's GPU tests (bits vs the CPU) and its roofline row
    step t01_model_gpu 90 "$B/01_benchmarking/test_01" --jobs 1 --filter 'model_gpu/*'
    step roofline_emb 60 "$B/04_flashattn_bwd/roofline" --only embed_fwd,embed_bwd,adamw --out results/roofline_emb
    ;;
  07gpu)  # stage 07 after ZeRO-2 moved onto the unit engine: the GPU tests, then XL ZeRO-2 alone (its real footprint)
    step t07_gpu 180 "$B/07_zero/test_07" --jobs 1 --filter 'zero_train_nccl/*'
    step zero_xl_z2 120 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model xl --context 512 --batch 2 \
      --zero 2 --backend nccl --steps 10 --warmup 3 --csv results/07_zero/ours.csv
    ;;
  07ckpt)  # stage 07: activation checkpointing under ZeRO-2/3's unit hooks: the GPU tests, XL ZeRO-3 and ZeRO-2 with block
    step t07_ckpt 120 "$B/07_zero/test_07" --jobs 1 --filter 'zero_train_nccl/checkpoint*'
    step zero_xl_z3_block 150 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model xl --context 512 --batch 2 \
      --zero 3 --checkpoint block --backend nccl --steps 10 --warmup 3 --csv results/07_zero/ours.csv
    step zero_xl_z2_block 150 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model xl --context 512 --batch 2 \
      --zero 2 --checkpoint block --backend nccl --steps 10 --warmup 3 --csv results/07_zero/ours.csv
    ;;
  07phase)  # stage 07: each level alone on XL (built sharded), its peaks by phase and its step time
    for z in 0 1 2 3; do
      step zero_xl_phase_z$z 120 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model xl --context 512 --batch 2 \
        --zero $z --backend nccl --steps 10 --warmup 3 --csv results/07_zero/phase.csv
    done
    ;;
  07wall)  # stage 07: the memory wall — 2.7B's width, ever deeper, per level, until one does not fit
    [ -n "${WALL_SKIP_ALL:-}" ] || step zero_27b 120 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model 2.7B --context 512 --batch 2 \
      --zero all --backend nccl --steps 2 --warmup 1 --csv results/07_zero/wall.csv
    # ascending per level; the loop stops at the first failure (sharded construction: a single
    # level builds only what it keeps, so the walls should sit near 76 / 98 / 114 / 134 blocks:
    # 16, 12, 10 and 8 bytes a parameter + 0.23 GiB of activations a block on 139.8 GiB)
    # WALL_LEVELS: level:L,L,... per level, space-separated
    # ZeRO-3's lean construction makes each rank's shard on the host (model_init_params_range, an
    # OpenMP loop): with mpirun.sh's default of one thread, 6.7 G elements take over two minutes
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / 2 ))}
    for lv in ${WALL_LEVELS:-0:72,76,80 1:92,96,100 2:104,112,116 3:120,128,136,144}; do
      for nl in $(tr , " " <<< "${lv#*:}"); do
        step wall_z${lv%%:*}_L$nl ${WALL_LIMIT:-120} scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model 2.7B --layers $nl --context 512 \
          --batch 2 --zero ${lv%%:*} --backend nccl --steps 2 --warmup 1 --csv results/07_zero/wall.csv
        last_ok || break
      done
    done
    ;;
  08fo)  # issue 14: the forward-only GPU executor (the trainer's --pp evaluation) against the flush loss
    step t08_fo 150 "$B/08_pipeline/test_08" --jobs 1 --filter 'pp_train_nccl/forward_only*'
    ;;
  gputests)  # every stage's GPU tests after the model's per-block refactor (01, 06, 07, 08, 09)
    step t01_gpu 90 "$B/01_benchmarking/test_01" --jobs 1 --filter 'model_gpu/*'
    step t08_range 60 "$B/08_pipeline/test_08" --jobs 1 --filter 'model_gpu_range/*'
    step t08_nccl 150 "$B/08_pipeline/test_08" --jobs 1 --filter 'pp_train_nccl/*'
    step t06_gpu 60 "$B/06_ddp/test_06" --jobs 1 --filter 'ddp_train_nccl/*'
    step t07_gpu 60 "$B/07_zero/test_07" --jobs 1 --filter 'zero_train_nccl/*'
    step t09_gpu 200 "$B/11_train/test_11" --jobs 1 --filter 'train_gpu/*'
    ;;
  08bench)  # stage 08 on 2 GPUs: every schedule, m = 8, 16 (32: M32=1), measured bubble vs formula
    for m in 8 16 ${M32:+32}; do for sc in gpipe 1f1b interleaved zbh1; do
      step pp_${sc}_m$m 60 scripts/mpirun.sh 2 "$B/08_pipeline/pp_train" --backend nccl --model large --context 512 \
        --batch $((2*m)) --micro-batches $m --schedule $sc --steps 3
    done; done
    ;;
  08m)  # issue 14: every schedule at m = 1 .. 32 (PP_MS), micro-batches of 2 rows; interleaved needs m a multiple of p
    for m in ${PP_MS:-1 2 4 8 16 32}; do for sc in gpipe 1f1b interleaved zbh1; do
      [ $sc = interleaved ] && [ $((m % 2)) != 0 ] && continue
      step pp_${sc}_m$m 75 scripts/mpirun.sh 2 "$B/08_pipeline/pp_train" --backend nccl --model large --context 512 \
        --batch $((2*m)) --micro-batches $m --schedule $sc --steps 3 --warmup 1
    done; done
    ;;
  08tl)  # issue 14: the measured timeline of every schedule beside the simulated one (m = 8)
    mkdir -p results/08_pipeline
    for sc in gpipe 1f1b interleaved zbh1; do
      step pp_tl_$sc 75 scripts/mpirun.sh 2 "$B/08_pipeline/pp_train" --backend nccl --model large --context 512 \
        --batch 16 --micro-batches 8 --schedule $sc --steps 3 --warmup 1 --timeline results/08_pipeline/gpu_$sc
    done
    ;;
  08vs)  # issue 14: DDP and ZeRO on the same two GPUs and the same global batch (16 sequences of 512) as pp m = 8
    step zero_large_b8 150 scripts/mpirun.sh 2 "$B/07_zero/zero_train" --model large --context 512 --batch 8 \
      --zero 0,1,3 --backend nccl --steps 4 --warmup 1 --csv results/08_pipeline/vs_zero.csv
    ;;
  18|18run|18ck)  # issue 18 on 2 GPUs: the --pp GPU tests, the small model under every parallel option (18run);
    # XL checkpoint writes and resumes vs dd (18ck; the resume asks for the step it holds, so it reads,
    # checks and stops: its time is the read's)
    mkdir -p results/09
    [ -s results/09/lic.bin ] || "$B/11_train/tokenize" --in /usr/share/common-licenses --out results/09/lic.bin > "$L/tokenize.log" 2>&1
    if [ $s != 18ck ]; then
      step t09_pp 300 "$B/11_train/test_11" --jobs 1 --filter 'train_gpu/*pp2*'
      for opt in "--dp" "--zero 1" "--zero 2" "--zero 3" "--pp 2 --schedule 1f1b --micro-batches 8" \
                 "--pp 2 --schedule zbh1 --micro-batches 8"; do
        tag=$(echo "$opt" | tr -d ' -' | cut -c1-20)
        bpr=8; case $opt in --pp*) bpr=2 ;; esac  # 16 sequences a step in every run (pp: 8 micro-batches of 2)
        step train2_$tag 120 scripts/mpirun.sh 2 "$B/11_train/train" --data results/09/lic.bin --backend nccl \
          --precision fp32 --model small --context 256 --batch $bpr --steps 300 --eval-every 100 --log-every 50 \
          --peak-tflops 67 $opt --out results/09/gpu2_$tag
      done
      step dd_write 90 dd if=/dev/zero of=/tmp/dd.bin bs=64M count=64 oflag=direct conv=fsync
      rm -f /tmp/dd.bin
    fi
    if [ $s != 18run ]; then
      for z in 1 3; do
        step ckxl_z${z}_write 240 scripts/mpirun.sh 2 "$B/11_train/train" --data results/09/lic.bin --backend nccl \
          --model xl --context 128 --batch 1 --steps 2 --zero $z --ckpt-dir /tmp/ckxl$z --log-every 1
        step ckxl_z${z}_resume 240 scripts/mpirun.sh 2 "$B/11_train/train" --data results/09/lic.bin --backend nccl \
          --model xl --context 128 --batch 1 --steps 2 --zero $z --ckpt-dir /tmp/ckxl$z --resume --log-every 1
        du -sh /tmp/ckxl$z/* >> "$L/ckxl_sizes.txt" 2>&1; rm -rf /tmp/ckxl$z
      done
    fi
    ;;
  torch06)
    step torch_xl_fp32 150 python3 -m torch.distributed.run --standalone --nproc_per_node 2 06_ddp/bench_torch_ddp.py --model xl --csv results/06_ddp/torch.csv
    step torch_xl_bf16 90 python3 -m torch.distributed.run --standalone --nproc_per_node 2 06_ddp/bench_torch_ddp.py --model xl --precision bf16 --variants none,ddp --csv results/06_ddp/torch.csv
    ;;
  06bf16)
    step ddp_xl_bf16 120 scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" --model xl --context 512 --batch 2 --precision bf16 \
      --variant flat,overlap,bucketed,none --bucket-mb 25 --steps 10 --warmup 3 --csv results/06_ddp/ours.csv
    step torch_xl_bf16 120 python3 -m torch.distributed.run --standalone --nproc_per_node 2 06_ddp/bench_torch_ddp.py --model xl --precision bf16 --variants none,ddp --csv results/06_ddp/torch.csv
    ;;
  05)
    step bench05_gpu 120 scripts/mpirun.sh 2 "$B/05_collectives/allreduce_bench" --backends nccl,nccl-direct,ring-nccl \
      --op all --tag gpu_np2
    for ch in 16M 128M 512M; do
      step ring_chunk_$ch 40 scripts/mpirun.sh 2 "$B/05_collectives/allreduce_bench" --backends ring-nccl \
        --sizes 1M,10M,100M,1G --ring-chunk $ch --tag ring_chunk_$ch --out results/05_collectives/chunks
    done
    step t05_gpu 120 "$B/05_collectives/test_05" --jobs 1 --filter 'collectives_nccl/*'
    ;;
  05cpu)  # the MPI backend beside Gloo on the host CPU, same call
    for np in 2 4 6; do
      step bench05_cpu$np 60 scripts/mpirun.sh $np "$B/05_collectives/allreduce_bench" --backends ${CPU_BACKENDS:-mpi,ring-mpi} \
        --sizes 1K,1M,10M,100M --tag cpu_np$np
      step gloo_np$np 60 $TORCHRUN $np 05_collectives/bench_torch.py --backend gloo --sizes 1K,1M,10M,100M \
        --csv results/05_collectives/torch.csv
    done
    ;;
  san)  # the GPU ring's kernels under compute-sanitizer, 2 ranks
    for tool in memcheck racecheck; do
      step sanitize_$tool 90 scripts/mpirun.sh 2 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
        "$B/05_collectives/collectives_check" --backend nccl --counts 1,7,65537
    done
    ;;
  esac
done
