#!/usr/bin/env bash
# The distributed programs' step times from two builds of the workbook on the same GPUs, in one
# call: the tree as it is ($NEW, default build) and an earlier revision ($OLD_SRC: a directory
# with its sources, built here into $OLD_SRC/build unless OLD_BUILT=1). Each benchmark runs old,
# new, old, new (ROUNDS=2, the default: alternating, so that drift in clocks or temperature falls
# on both), and every
# log goes under results/device/compare/; $OUT/compare.tgz packs them.
#   OUT=/tmp/o OLD_SRC=/tmp/old lab/device/device_compare.sh [parts]
# Parts: ddp (XL fp32, bucketed 100 MiB and none, 2 ranks), zero (XL fp32, every level, 2 ranks),
# pp (large fp32, p = 2, 1F1B and ZB-H1, m = 8), train (the trainer, small, bf16, 1 and 2 GPUs,
# random tokens of the license texts). Default: all four.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-results/device_out}
L=results/device/compare
mkdir -p "$O" "$L"
export NCCL_NVLS_ENABLE=0 SETUP_SKIP=1
NEW=${NEW:-build}
OLD_SRC=${OLD_SRC:?set OLD_SRC to the source directory of the earlier revision}
OLD=$OLD_SRC/build
. lab/device/device_lib.sh  # step
if [ -z "${OLD_BUILT:-}" ]; then
  step old_build 420 make -C "$OLD_SRC" -j"$(nproc)" build/06_ddp/ddp_train build/07_zero/zero_train \
    build/08_pipeline/pp_train build/11_train/train build/11_train/tokenize
fi
parts=${*:-ddp zero pp train}
both() {  # both NAME SECONDS ARGS... (the program's path relative to a build dir first)
  local name=$1 secs=$2 prog=$3; shift 3
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for side in old new; do
      local b=$NEW; [ $side = old ] && b=$OLD
      step "${name}_${side}_$round" "$secs" "$@" "$b/$prog" "${ARGS[@]}"
    done
  done
}
for p in $parts; do
  case $p in
  ddp)
    ARGS=(--model xl --context 512 --batch 2 --variant bucketed,none --bucket-mb 100 --steps 10 --warmup 3 --comm-timeout 120)
    both ddp 120 06_ddp/ddp_train scripts/mpirun.sh 2 ;;
  zero)
    ARGS=(--model xl --context 512 --batch 2 --zero all --backend nccl --steps 8 --warmup 3 --comm-timeout 120)
    both zero 200 07_zero/zero_train scripts/mpirun.sh 2 ;;
  pp)
    for sc in ${PP_SCHEDULES:-1f1b zbh1}; do
      ARGS=(--backend nccl --model large --context 512 --batch 16 --micro-batches 8 --schedule $sc --steps 5 --warmup 2 --comm-timeout 120)
      both pp_$sc 90 08_pipeline/pp_train scripts/mpirun.sh 2
    done ;;
  train)
    mkdir -p results/device/compare_data
    "$NEW/11_train/tokenize" --in /usr/share/common-licenses --out results/device/compare_data/lic.bin > "$L/tokenize.log" 2>&1
    ARGS=(--data results/device/compare_data/lic.bin --backend nccl --precision bf16 --model small --context 256 --batch 16
          --steps 120 --eval-every 0 --log-every 20 --comm-timeout 120)
    both train1 120 11_train/train scripts/mpirun.sh 1
    ARGS+=(--dp)
    both train2 120 11_train/train scripts/mpirun.sh 2 ;;
  *) echo "device_compare.sh: unknown part '$p' (ddp, zero, pp, train)" >&2; exit 2 ;;
  esac
done
tar czf "$O/compare.tgz" results/device 2>/dev/null
