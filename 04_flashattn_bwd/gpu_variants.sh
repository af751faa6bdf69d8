#!/usr/bin/env bash
# Builds the stage-04 benchmark with each setting of the wgmma kernel's experiment switches
# (flash_bwd_wgmma.cu: WGX_SPLIT, WGX_MASK) in its own build folder and times the leaderboard
# backward of VERSIONS (default 19) with each, on the GPU this runs on.
set -uo pipefail
VARIANTS=${VARIANTS:-"0:0 0:1 1:0 1:1"}
for v in $VARIANTS; do
  IFS=: read -r sp mk <<< "$v"
  make -j4 BUILD=build-x$sp$mk NVCC_FLAGS="-DWGX_SPLIT=$sp -DWGX_MASK=$mk" build-x$sp$mk/04_flashattn_bwd/bench > /tmp/bx$sp$mk.log 2>&1 &
done
wait
for rep in 1 2; do
  for v in $VARIANTS; do
    IFS=: read -r sp mk <<< "$v"
    for ver in ${VERSIONS:-19}; do
      echo "split $sp mask $mk v$ver: $(timeout 30 build-x$sp$mk/04_flashattn_bwd/bench --mode leaderboard --version $ver --lb-reps 30 2>&1 | grep -E '^\| backward, flash_backward_cuda' | cut -c1-100)"
    done
  done
done
