#!/usr/bin/env bash
# The first two device runs of stage 03 (the mma.sync kernel's tests, sanitizers and sweeps), kept
# as they ran: its --scan-variants and --variant indices refer to the variant tables of that time
# (every rung then lived in the lesson's tables; today `rungs` in this folder times them by name).
#   lab/03_flashattn_fwd/gpu_run.sh check   build, tests, compute-sanitizer, leaderboard point vs SDPA
#   lab/03_flashattn_fwd/gpu_run.sh bench   build, leaderboard point, the naive and flash sweeps
# Run as:  lab/03_flashattn_fwd/gpu_run.sh bench 2>&1 | tee $OUT/log.txt
# Logs and CSVs go to results/gpu_run/, packed at the end into $OUT/results.tgz: the run tool
# returns at most 8 files, and a second run once lost its test log to that limit.
set -uo pipefail
FINAL_OUT=${OUT:-results}
OUT=results/gpu_run
mkdir -p "$OUT" "$FINAL_OUT"
trap 'tar czf "$FINAL_OUT/results.tgz" -C results gpu_run' EXIT
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
  timeout 120 $B/test_03 --jobs 16 2>&1 | tee "$OUT/tests.log" | tail -30
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
  log "tests (every bf16 variant)"
  timeout 60 $B/test_03 --jobs 16 2>&1 | tee "$OUT/tests.log" | tail -15
  log "variant scan: batch 1, 16 heads, N 16384, causal, bf16"
  timeout 30 $B/bench --sweep flash --H 16 --N 16384 --dtype bf16 --scan-variants --naive-max-N 0 --reps 10 \
    --warmup 2 --budget-ms 100 --csv "$OUT/03_variants.csv" 2>/dev/null
  VARIANTS=$(python3 -c "
import csv, sys
best = {}
names = {}
for r in csv.DictReader(open('$OUT/03_variants.csv')):
    d, ms = int(r['d']), float(r['flash ms'])
    names.setdefault(d, []).append(r['variant'])
    if d not in best or ms < best[d][0]: best[d] = (ms, len(names[d]) - 1)
print(','.join(f'{d}:{best[d][1]}' for d in sorted(best)))" 2>/dev/null)
  echo "best variants (head dim:index): ${VARIANTS:-none}"
  log "leaderboard point: ours (best variant) and PyTorch"
  timeout 20 $B/bench --sweep flash --B 1 --H 16 --N 16384 --d 64 --dtype bf16 --naive-max-N 0 \
    ${VARIANTS:+--variants $VARIANTS} --csv "$OUT/03_leaderboard.csv"
  timeout 60 python3 03_flashattn_fwd/bench_torch.py --B 1 --H 16 --N 16384 --d 64 --dtype bf16 --reps 10 \
    --impls sdpa_flash,sdpa_cudnn,sdpa_efficient,naive,naive_compile --naive-max-N 16384 --compile-N 16384 \
    --csv "$OUT/03_leaderboard_torch.csv"
  log "bench-03 sweeps (QUICK)"
  RESULTS="$OUT" QUICK=1 VARIANTS="$VARIANTS" TORCH_REPS="--reps 5 --warmup 1 --budget-ms 100" \
    timeout 120 03_flashattn_fwd/bench.sh 2>&1 | grep -v "^  "
  log "compute-sanitizer on the chosen variants"
  for args in "--Nq 130 --Nk 77 --d 64 --causal" "--Nq 70 --Nk 200 --d 128" "--Nq 33 --Nk 47 --d 16 --causal" \
              "--Nq 100 --Nk 100 --d 32 --causal"; do
    d=$(echo "$args" | sed -E 's/.*--d ([0-9]+).*/\1/')
    v=$(echo ",$VARIANTS," | sed -nE "s/.*,$d:([0-9]+),.*/\1/p")
    for tool in memcheck racecheck; do
      timeout 15 compute-sanitizer --tool $tool --error-exitcode 9 $B/flash_fwd --device cuda --B 1 --H 2 $args \
        --dtype bf16 --variant ${v:-0} --out "" > "$OUT/san.log" 2>&1; rc=$?
      echo "$tool [$args variant ${v:-0}]: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san.log" | head -1)"
    done
  done
  ;;
esac
log "done"
