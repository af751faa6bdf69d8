#!/usr/bin/env bash
# The distributed stages on 4 GPUs (H100 or H200), built on the machine itself, in one call of at
# most 600 s (the build takes about 90 of them):
#   SETUP_SKIP=1 CRITERION_HOME=$PWD/.criterion make -j16 all lab && OUT=/tmp/o lab/device/device_4gpu.sh [PART...]
# Parts (default: all of them, in this order, each under its own `timeout -k 10 N`; N below, or
# the part's share of GPU4_BUDGET when that is smaller):
#   suite4  100 s  the multi-GPU tests at 4 ranks (TEST_GPU_RANKS=4; the same assertions as at 2):
#                  05 collectives_nccl (every operation, a dead rank, the bench rows), 06
#                  ddp_train_nccl, 07 zero_train_nccl (every level, ZeRO-3 alone), 09 the killed
#                  DDP run that resumes bit-exact
#   coll4    50 s  stage 05's collective table at 4 ranks: allreduce_bench, nccl, nccl-direct and
#                  the workbook's ring (ring-nccl), every operation, 1M 10M 100M 1G
#   scale4  180 s  XL fp32, context 512, batch 2 a rank: DDP bucketed 100 MiB (the no-communication
#                  baseline, variant none, last in the same job: its replicas drift apart) and ZeRO
#                  0-3 at 4, then 2 GPUs; PyTorch's DDP / ZeRO / FSDP2 at 4 (torchrun, localhost);
#                  DDP bf16 at 4; ours on 1 GPU last
#   pp4      75 s  the pipeline on 4 GPUs (p = 4), large model, context 512, m = 8 micro-batches of 2,
#                  every schedule the GPU executor runs; the measured bubble beside the formula
#   mp4     120 s  bf16 at 4: DDP, ZeRO-1 and ZeRO-3 (bf16 gathers) on XL with flash attention beside
#                  PyTorch's DDP / ZeRO / FSDP2 with MixedPrecisionPolicy; context parallelism at 4:
#                  the ring at N 128k, d 128, plain and zigzag, beside PyTorch's context_parallel
#   fault4   60 s  faults at 4 ranks under NCCL: a rank that exits (dies), one that stops answering,
#                  one stopped by SIGSTOP, each under a 5 s communication deadline; a pipeline rank
#                  that dies; exit codes and the one-line messages in summary.txt
# Every MPI job goes through scripts/mpirun.sh (--quiet, MPIRUN_TIMEOUT a little under the step's
# limit) with NCCL_NVLS_ENABLE=0 exported and passed with -x, one rank a GPU, and --comm-timeout
# on every program of ours. Logs and CSVs under results/gpu4/ (logs/ one per step); $OUT/steps.txt
# lists every step and its exit status (124/137: its limit ran out; 124 within seconds in fault4:
# the communication deadline, the program's own exit status for it); results/ is packed into
# $OUT/all.tgz after every step (device_lib.sh's step) and results/gpu4/ into $OUT/gpu4.tgz at the
# end. A part that fails does not stop the next.
#   GPU4_BUDGET  seconds for all the parts together (default 480): give the call's 600 s less the build
#   B            the build directory (default build)
#   GPU4_CPU=1   a dry run on a CPU machine (MPI backend, the tiny model, small sizes): the same
#                programs and flags, to catch a wrong flag before the device call; PyTorch steps fail there
set -u
cd "$(dirname "$0")/../.."
self=lab/device/device_4gpu.sh
O=${OUT:-results/device_out}
R=results/gpu4
L=$R/logs
mkdir -p "$O" "$L" "$R/05" "$R/06" "$R/07" "$R/08"
B=${B:-build}
export NCCL_NVLS_ENABLE=0 SETUP_SKIP=1 LD_LIBRARY_PATH=$PWD/.criterion/lib:${LD_LIBRARY_PATH:-}
export BUILD=$B
# Host threads a rank (the model's initialisation runs OpenMP loops): the cores shared by 4 ranks.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 ))}
if [ -n "${GPU4_CPU:-}" ]; then
  BK=mpi; XL="--model tiny --context 32"; PPM="--model tiny --layers 8 --context 16"; SMALL="--model tiny --layers 8 --context 16"
  COLL="--backends mpi,mpi-lib,ring-mpi --sizes 1K,64K,1M"
else
  BK=nccl; XL="--model xl --context 512"; PPM="--model large --context 512"; SMALL="--model small --context 128"
  COLL="--backends nccl,nccl-direct,ring-nccl --sizes 1M,10M,100M,1G"
fi
TORCHRUN="python3 -m torch.distributed.run --standalone --nproc_per_node"
. lab/device/device_lib.sh  # step, last_ok
ALL="suite4 coll4 scale4 pp4 mp4 fault4"
part_secs() {
  case $1 in suite4) echo 100 ;; coll4) echo 50 ;; scale4) echo 180 ;; pp4) echo 75 ;; mp4) echo 120 ;; fault4) echo 60 ;; *) echo 0 ;; esac
}
for p in "$@"; do
  [ "$(part_secs "$p")" -gt 0 ] || { echo "device_4gpu: error: unknown part '$p'; allowed: $ALL" >&2; exit 2; }
done

# run PART NAME SECONDS command...: one step (device_lib.sh's step), its limit cut to what is left of
# the part's time (PART_END, set by the caller); skipped when under 8 s are left. mpirun.sh's own
# limit is set 3 s under the step's, so that a job it ends leaves its one line in the log.
run() {
  local part=$1 name=$2 want=$3; shift 3
  local left=$(( ${PART_END:-$(( $(date +%s) + want ))} - $(date +%s) - 2 ))
  local secs=$(( want < left ? want : left ))
  if [ "$secs" -lt 8 ]; then
    echo "[$(date -u +%H:%M:%S)] $name skipped: ${left}s left of $part's time" | tee -a "$O/steps.txt"
    return 0
  fi
  echo "== $part: $*"
  echo "== $part: $*" > "$L/$name.cmd"
  MPIRUN_TIMEOUT=$(( secs - 3 )) step "$name" "$secs" "$@"
  local rc=$?
  tail -n 3 "$L/$name.log" | sed 's/^/   | /'
  return $rc
}

# The parts, each run in a process of its own under `timeout -k 10 N` (below).
part() {
  local p=$1
  case $p in
  suite4)
    export TEST_GPU_RANKS=4
    run $p t05_nccl4 30 "$B/05_collectives/test_05" --jobs 1 --filter 'collectives_nccl/@(every_operation|a_dead_rank|bench_gpu_rows)*'
    run $p t06_nccl4 25 "$B/06_ddp/test_06" --jobs 1 --filter 'ddp_train_nccl/*'
    run $p t07_nccl4 35 "$B/07_zero/test_07" --jobs 1 --filter 'zero_train_nccl/@(every_level|zero3_alone)*'
    run $p t09_ddp4 30 "$B/11_train/test_11" --jobs 1 --filter 'train_gpu/killed_2_gpus_ddp*'
    ;;
  coll4)  # the columns of 05_collectives/results/*/busbw_gpu.csv and allreduce.csv: 1 MiB .. 1 GiB
    run $p bench05_np4 45 scripts/mpirun.sh 4 "$B/05_collectives/allreduce_bench" $COLL --op all --iters 10 --warmup 3 --comm-timeout 30 --out $R/05 --tag gpu_np4
    ;;
  scale4)  # XL fp32, context 512, batch 2 a rank (the 06 and 07 tables); 4 GPUs first, then 2, then 1
    local xl="$XL --batch 2 --steps 5 --warmup 2 --backend $BK --comm-timeout 60"
    run $p ddp_xl_np4 40 scripts/mpirun.sh 4 "$B/06_ddp/ddp_train" $xl --variant bucketed,none --bucket-mb 100 \
      --csv $R/06/ddp_xl_np4.csv
    run $p zero_xl_np4 50 scripts/mpirun.sh 4 "$B/07_zero/zero_train" $xl --zero all --csv $R/07/zero_xl_np4.csv
    run $p torch_ddp_np4 45 $TORCHRUN 4 06_ddp/bench_torch_ddp.py --model xl --context 512 --batch 2 \
      --variants none,ddp --steps 5 --warmup 2 --csv $R/06/torch_ddp_np4.csv
    run $p torch_zero_np4 55 $TORCHRUN 4 07_zero/bench_torch_zero.py --model xl --context 512 --batch 2 \
      --variants zero,fsdp --steps 5 --warmup 2 --csv $R/07/torch_zero_np4.csv
    run $p ddp_xl_bf16_np4 30 scripts/mpirun.sh 4 "$B/06_ddp/ddp_train" $xl --precision bf16 --variant bucketed,none \
      --bucket-mb 100 --csv $R/06/ddp_xl_bf16_np4.csv
    run $p ddp_xl_np2 30 scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" $xl --variant bucketed --bucket-mb 100 \
      --csv $R/06/ddp_xl_np2.csv
    run $p zero_xl_np2 40 scripts/mpirun.sh 2 "$B/07_zero/zero_train" $xl --zero all --csv $R/07/zero_xl_np2.csv
    run $p ddp_xl_np1 25 scripts/mpirun.sh 1 "$B/06_ddp/ddp_train" $xl --variant none --csv $R/06/ddp_xl_np1.csv
    ;;
  pp4)  # p = 4: large (36 blocks; interleaved: 8 stages), context 512, 8 micro-batches of 2 rows
    local sc
    for sc in 1f1b gpipe zbh1 interleaved; do
      run $p pp4_$sc 18 scripts/mpirun.sh 4 "$B/08_pipeline/pp_train" --backend $BK $PPM \
        --batch 16 --micro-batches 8 --schedule $sc --steps 3 --warmup 1 --comm-timeout 30
    done
    ;;
  mp4)  # bf16 at 4 (07's bf16 table at 4 ranks), then the ring at P 4 (10's table at 4 ranks)
    # (the dry run on the CPU: DDP in fp32, the CPU ring in f32; ZeRO-3's bf16 runs there as it is)
    local xb="$XL --batch 2 --steps 5 --warmup 2 --backend $BK --comm-timeout 60 --precision bf16" dt=bf16 xd
    [ -z "${GPU4_CPU:-}" ] && xb+=" --attention flash" || dt=f32
    xd=${xb/--precision bf16/--precision $([ $dt = bf16 ] && echo bf16 || echo fp32)}
    run $p ddp_xl_bf16f_np4 30 scripts/mpirun.sh 4 "$B/06_ddp/ddp_train" $xd --variant bucketed,none --bucket-mb 100 \
      --csv $R/06/ddp_xl_bf16_flash_np4.csv
    run $p zero_xl_bf16_np4 40 scripts/mpirun.sh 4 "$B/07_zero/zero_train" $xb --zero 3 --csv $R/07/zero_xl_bf16_np4.csv
    run $p torch_bf16_np4 60 $TORCHRUN 4 07_zero/bench_torch_zero.py --model xl --context 512 --batch 2 \
      --precision bf16 --sdpa --steps 5 --warmup 2 --csv $R/07/torch_bf16_np4.csv
    local n=131072 sp; [ -n "${GPU4_CPU:-}" ] && n=257
    for sp in plain zigzag; do
      run $p cp4_$sp 25 scripts/mpirun.sh 4 "$B/10_context/ring_bench" --backend $BK --N $n --d 128 --heads 16 --causal 1 \
        --split $sp --dtype $dt --warmup 2 --iters 5 --comm-timeout 30 --csv $R/cp4_ring.csv
    done
    run $p torch_cp4 40 $TORCHRUN 4 10_context/bench_torch.py --N $n --head-dim 128 --heads 16 --causal 1 --iters 5 \
      --csv $R/cp4_torch.csv
    ;;
  fault4)  # 4 ranks, NCCL, a deadline of 5 s: which rank is named, how fast the job ends, its exit code
    local cc="$B/05_collectives/collectives_check --backend $BK --counts 1000 --comm-timeout 5"
    run $p fault_die3 25 scripts/mpirun.sh 4 $cc --die-rank 3
    run $p fault_hang3 25 scripts/mpirun.sh 4 $cc --hang-rank 3
    run $p fault_stop2 25 scripts/mpirun.sh 4 $cc --stop-rank 2
    run $p fault_hang0_at1 25 scripts/mpirun.sh 4 $cc --hang-rank 0 --hang-at 1
    run $p fault_pp_die2 30 scripts/mpirun.sh 4 "$B/08_pipeline/pp_train" --backend $BK $SMALL \
      --batch 8 --micro-batches 4 --schedule 1f1b --steps 2 --warmup 0 --die-rank 2 --comm-timeout 5
    ;;
  esac
}

# One part, in the process the default run starts for it (PART_END set there).
if [ "${GPU4_PART:-}" != "" ]; then
  part "$GPU4_PART"
  exit 0
fi

[ $# -gt 0 ] || set -- $ALL
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$L/gpu.txt" 2>&1
cat "$L/gpu.txt"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "${ngpu:-0}" -ge 4 ] || echo "device_4gpu: only ${ngpu:-0} GPU(s) here: the 4-rank NCCL jobs will refuse (one GPU per rank)"
budget=${GPU4_BUDGET:-480}
case "$budget" in ''|*[!0-9]*) echo "device_4gpu: error: GPU4_BUDGET '$budget' is not a whole number of seconds" >&2; exit 2 ;; esac
end=$(( $(date +%s) + budget ))
# each part its own time, cut to what is left; what a part leaves unused goes to the later ones
for p in "$@"; do
  now=$(date +%s)
  secs=$(part_secs "$p")
  [ $(( end - now )) -lt "$secs" ] && secs=$(( end - now ))
  if [ "$secs" -lt 10 ]; then echo "[$(date -u +%H:%M:%S)] part $p skipped: the budget is spent" | tee -a "$O/steps.txt"; continue; fi
  echo "== part $p: limit ${secs}s"
  GPU4_PART=$p PART_END=$(( now + secs - 5 )) timeout -k 10 "$secs" bash "$self"
  echo "== part $p: exit $? after $(( $(date +%s) - now ))s"
done

# the lines worth reading first: faults (exit codes, deadline lines), bubbles, refusals
{
  echo "# steps"; cat "$O/steps.txt"
  echo "# deadline and failure lines"
  grep -H -m 3 -E "comm: deadline|die-rank|error:|exited|killed" "$L"/fault_*.log 2>/dev/null
  echo "# pipeline bubbles"
  grep -H "measured bubble" "$L"/pp4_*.log 2>/dev/null
  echo "# test totals"
  grep -H "Synthesis" "$L"/t0*.log 2>/dev/null
} > "$R/summary.txt"
for f in "$R"/0*/*.csv; do [ -f "$f" ] && { echo "# $f"; cat "$f"; }; done
cat "$R/summary.txt"  # last: the end of the output is what a truncated log keeps
tar czf "$O/gpu4.tgz" "$R" 2>/dev/null
echo "device_4gpu: results in $O/gpu4.tgz ($(du -h "$O/gpu4.tgz" | cut -f1))"
