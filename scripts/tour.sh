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
for d in 01_benchmarking 02_weighted_sum 03_flashattn_fwd 04_flashattn_bwd 05_collectives 06_ddp 07_zero 08_pipeline; do
  echo "## $d"
  if [ -x "$B/$d/demo" ]; then
    if ! "$B/$d/demo"; then echo "✗ $d demo failed"; status=1; fi
  else
    echo "(no demo yet: this stage's code does not exist yet — see $d/README.md)"
  fi
  echo
done
echo "tour finished in $(( $(date +%s) - start )) s"
exit $status
