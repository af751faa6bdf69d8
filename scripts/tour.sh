#!/usr/bin/env bash
# `make run`: a tour of the workbook on this machine. The environment first, then each
# stage's demo at a small size (on the GPU if there is one, else on the CPU reference).
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
start=$(date +%s)
echo "# CS336 systems workbook — tour"
echo
"$B/common/envreport" || exit 1
echo
status=0
# Stages without a demo program show their main program at a size the CPU runs in seconds.
stage_tour() {
  case $1 in
  06_ddp) scripts/mpirun.sh 2 "$B/06_ddp/ddp_train" --variant all --bucket-mb 0.01,1 --steps 2 --warmup 1 ;;
  07_zero) scripts/mpirun.sh 2 "$B/07_zero/zero_train" --zero all --steps 2 --warmup 1 --check-ddp 1 ;;
  08_pipeline) "$B/08_pipeline/schedule" --schedule 1f1b --p 4 --m 8 &&
               scripts/mpirun.sh 2 "$B/08_pipeline/pp_train" --schedule 1f1b --steps 2 --check-single 1 ;;
  09_tensor) scripts/mpirun.sh 2 "$B/09_tensor/tp_train" --model tiny --sp --steps 2 --warmup 1 --check ;;
  11_train) mkdir -p results/09_tour &&
            "$B/11_train/tokenize" --in /usr/share/common-licenses --out results/09_tour/licenses.bin &&
            "$B/11_train/train" --data results/09_tour/licenses.bin --steps 60 --eval-every 20 ;;
  *) return 2 ;;
  esac
}
for d in 01_benchmarking 02_weighted_sum 03_flashattn_fwd 04_flashattn_bwd 05_collectives 06_ddp 07_zero 08_pipeline 09_tensor 11_train; do
  echo "## $d"
  if [ -x "$B/$d/demo" ]; then
    if ! "$B/$d/demo"; then echo "✗ $d demo failed"; status=1; fi
  else
    stage_tour "$d"
    rc=$?
    if [ $rc -eq 2 ] && ! [ -d "$B/$d" ]; then echo "(not built here — see $d/README.md)"
    elif [ $rc -ne 0 ]; then echo "✗ $d failed (exit $rc)"; status=1; fi
  fi
  echo
done
echo "tour finished in $(( $(date +%s) - start )) s"
exit $status
