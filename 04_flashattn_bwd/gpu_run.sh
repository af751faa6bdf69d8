#!/usr/bin/env bash
# The device runs of stage 04 (made through the `run` tool, kind nvidia-h100-x1):
#   04_flashattn_bwd/gpu_run.sh check   build, tests, compute-sanitizer, leaderboard point vs SDPA
#   04_flashattn_bwd/gpu_run.sh bench   build, leaderboard point, the bench-04 sweep and table
# Logs and CSVs go to $OUT (the run tool's output folder), else results/.
set -uo pipefail
OUT=${OUT:-results}
mkdir -p "$OUT" results
export BUILD=build
B=build/04_flashattn_bwd
log() { echo "=== $(date -u +%T) $*"; }

log "nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
log "build"
timeout 170 make -j16 CRITERION_HOME=$PWD/.criterion build-04 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; }

leaderboard() {
  log "leaderboard point: ours"
  timeout 60 $B/bench --mode leaderboard --lb-reps "${LB_REPS:-50}" --csv "$OUT/04_leaderboard.csv"
  log "leaderboard point: PyTorch"
  timeout 90 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
    --reps "${LB_REPS:-50}" --budget-ms 100000 --csv "$OUT/04_leaderboard_torch.csv"
}

case "${1:-check}" in
check)
  log "tests"
  timeout 150 $B/test_04 --jobs 16 2>&1 | tail -40
  log "compute-sanitizer"
  for args in "--Nq 150 --Nk 67 --d 64 --causal --dtype bf16" "--Nq 70 --Nk 130 --d 128 --dtype bf16 --causal" \
              "--Nq 33 --Nk 90 --d 16 --dtype bf16" "--Nq 100 --Nk 65 --d 32 --dtype f32 --causal"; do
    for impl in flash atomic; do
      for tool in memcheck racecheck; do
        timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $B/flash_bwd --device cuda --B 1 --H 2 $args \
          --impl $impl --check --out "" > "$OUT/san.log" 2>&1; rc=$?
        echo "$tool $impl [$args]: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check vs' "$OUT/san.log" | tr '\n' ' ')"
      done
    done
  done
  leaderboard
  ;;
bench)
  leaderboard
  log "bench-04"
  timeout "${BENCH_TIMEOUT:-400}" 04_flashattn_bwd/bench.sh
  cp results/04_* "$OUT/" 2>/dev/null
  ;;
esac
log "done"
