#!/usr/bin/env bash
# The device runs of stage 03 (what was run through the `run` tool, kind nvidia-h100-x1):
#   03_flashattn_fwd/gpu_run.sh check   build, tests, compute-sanitizer, leaderboard point vs SDPA
#   03_flashattn_fwd/gpu_run.sh bench   build, leaderboard point, the naive and flash sweeps
# Logs and CSVs go to $OUT (the run tool's output folder), else results/.
set -uo pipefail
OUT=${OUT:-results}
mkdir -p "$OUT" results
export BUILD=build
B=build/03_flashattn_fwd
log() { echo "=== $(date -u +%T) $*"; }

log "nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
log "build"
timeout 150 make -j16 CRITERION_HOME=$PWD/.criterion build-03 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; }

leaderboard() {
  log "leaderboard point: ours"
  timeout 60 $B/bench --sweep flash --B 1 --H 16 --N 16384 --d 64 --dtype bf16 --naive-max-N 0 \
    --csv "$OUT/03_leaderboard.csv"
  log "leaderboard point: PyTorch"
  timeout 90 python3 03_flashattn_fwd/bench_torch.py --B 1 --H 16 --N 16384 --d 64 --dtype bf16 \
    --impls sdpa_flash,sdpa_cudnn,sdpa_efficient --csv "$OUT/03_leaderboard_torch.csv"
}

case "${1:-check}" in
check)
  log "tests"
  timeout 120 $B/test_03 --jobs 16 2>&1 | tail -30
  leaderboard
  log "quick flash sweep (N 4096, every d, both dtypes)"
  timeout 40 $B/bench --sweep flash --H 16 --N 4096 --naive-max-N 4096 --csv "$OUT/03_quick.csv" 2>/dev/null
  log "compute-sanitizer"
  for args in "--Nq 130 --Nk 77 --d 64 --causal --dtype bf16" "--Nq 70 --Nk 200 --d 128 --dtype bf16" \
              "--Nq 33 --Nk 33 --d 16 --causal --dtype bf16" "--Nq 100 --Nk 65 --d 32 --dtype f32 --causal"; do
    for tool in memcheck racecheck; do
      timeout 30 compute-sanitizer --tool $tool --error-exitcode 9 $B/flash_fwd --device cuda --B 1 --H 2 $args \
        --out "" > "$OUT/san.log" 2>&1; rc=$?
      echo "$tool [$args]: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san.log" | head -1)"
    done
  done
  ;;
bench)
  leaderboard
  log "bench-03 sweeps"
  timeout 400 03_flashattn_fwd/bench.sh
  cp results/03_* "$OUT/" 2>/dev/null
  ;;
esac
log "done"
