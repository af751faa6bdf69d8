#!/usr/bin/env bash
# Stage 05 on a GPU machine in one call (what a device lease runs): build, the stage's tests
# (GPU ones included), compute-sanitizer on the ring kernel, make bench-05; logs and results
# under results/05_collectives/, packed into $OUT/stage05.tgz when $OUT is set.
#   CRITERION_HOME=$PWD/.criterion lab/05_collectives/gpu_run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 SETUP_SKIP=1
R=results/05_collectives
mkdir -p "$R"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$R/gpu_run.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$R/gpu.txt"
log "mpicc: $(command -v mpicc || echo none); mpirun: $(timeout 10 mpirun --version 2>/dev/null | head -1)"
log "build"
make -j"$(nproc)" build-05 > "$R/build.log" 2>&1 || { log "BUILD FAILED"; tail -30 "$R/build.log"; }
log "test-05"
make test-05 2>&1 | grep -v '^gcc\|^nvcc\|^ar ' | tee "$R/test.log" | tail -n 25
log "compute-sanitizer (memcheck, racecheck) on the GPU ring, 2 ranks"
for tool in memcheck racecheck; do
  scripts/mpirun.sh 2 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
    build/05_collectives/collectives_check --backend nccl --counts 1,7,65537 > "$R/sanitize_$tool.log" 2>&1
  log "  $tool exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$R/sanitize_$tool.log") ranks with 0 errors)"
done
log "bench-05"
BUILD=build 05_collectives/bench.sh > "$R/bench.log" 2>&1; log "  bench exit $?"
tail -n 30 "$R/bench.log"
log "done"
[ -n "${OUT:-}" ] && tar czf "$OUT/stage05.tgz" "$R"
exit 0
