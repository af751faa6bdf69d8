#!/usr/bin/env bash
# Two GPUs as two emulated nodes: what a ~100x slower link (NCCL's socket transport on the
# loopback interface, scripts/mpirun.sh --emulate-nodes 2) does to training, beside the same
# runs over NVLink, on binaries built on the machine. Also the first GPU runs of the group and
# emulation tests. Parts (default all): verify, link, train.
#   OUT=$OUT SLOW_MODEL=medium lab/device/device_slowlink.sh [part...]
# Logs and CSVs: results/slowlink/ packed into $OUT/slowlink.tgz (refreshed after every step).
set -u
B=${B:-build}
O=${OUT:?set OUT}; L=results/slowlink; mkdir -p "$L"
source lab/device/device_lib.sh
model=${SLOW_MODEL:-medium}; ctx=${SLOW_CONTEXT:-512}
export NCCL_NVLS_ENABLE=0
parts=${*:-verify link train}
pack() { tar czf "$O/slowlink.tgz" "$L" 2>/dev/null; }
for part in $parts; do
  case $part in
  verify)
    step t05_groups 120 "$B/05_collectives/test_05" --jobs 1 --filter 'groups_nccl/*'; pack
    step t05_emul 150 "$B/05_collectives/test_05" --jobs 1 --filter 'emulated_nccl/*'; pack
    step t01_ckpt 120 "$B/01_benchmarking/test_01" --jobs 1 --filter 'checkpoint/*'; pack ;;
  link)
    for net in nvlink socket; do
      em=(); [ $net = socket ] && em=(--emulate-nodes 2)
      step link_$net 90 scripts/mpirun.sh "${em[@]}" 2 "$B/05_collectives/allreduce_bench" \
        --backends nccl --sizes 1M,10M,100M,1G --iters 10 --warmup 3; pack
    done ;;
  train)
    for net in nvlink socket; do
      em=(); [ $net = socket ] && em=(--emulate-nodes 2)
      common=(--model "$model" --context "$ctx" --backend nccl --steps 5 --warmup 2 --comm-timeout 120)
      step ddp_$net 150 scripts/mpirun.sh "${em[@]}" 2 "$B/06_ddp/ddp_train" "${common[@]}" --batch 2 \
        --variant none,naive,flat,overlap,bucketed --bucket-mb 25 --csv "$L/ddp_$net.csv"; pack
      step zero_$net 150 scripts/mpirun.sh "${em[@]}" 2 "$B/07_zero/zero_train" "${common[@]}" --batch 2 \
        --zero 1,3 --csv "$L/zero_$net.csv"; pack
      step pp_$net 120 scripts/mpirun.sh "${em[@]}" 2 "$B/08_pipeline/pp_train" --model "$model" --context "$ctx" \
        --backend nccl --steps 5 --warmup 2 --comm-timeout 120 --batch 16 --micro-batches 8 --schedule 1f1b; pack
    done ;;
  *) echo "device_slowlink.sh: error: unknown part '$part'; parts: verify link train" >&2; exit 2 ;;
  esac
done
grep -h "passed\|exit" "$O/steps.txt" "$L"/t0*.log 2>/dev/null | tail -20
