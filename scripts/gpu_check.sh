#!/usr/bin/env bash
# The whole workbook on a GPU machine in one go (what a device lease runs): build, every test,
# compute-sanitizer on the kernels' tests, the tour, then the benchmarks named in $BENCHES.
# Logs go to results/gpu_check/; with $OUT set (a device lease) everything under results/ is
# packed into $OUT/results.tgz and the summary copied to $OUT/summary.txt (few files travel back). Needs CRITERION_HOME where Criterion is not
# installed:   CRITERION_HOME=$PWD/.criterion scripts/gpu_check.sh
#   BENCHES="02 03 04 01"   benchmarks to run (default: none)
#   SANITIZE=0              skip scripts/gpu_sanitize.sh (memcheck + racecheck of every kernel)
set -u
cd "$(dirname "$0")/.."
DEST=${OUT:-}
OUT=results/gpu_check
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
log "build"
# -k: a stage that does not build does not stop the others from being tested
make -k -j"$(nproc)" all > "$OUT/build.log" 2>&1 || { log "BUILD FAILED (going on with what built)"; grep -E 'error|Error' "$OUT/build.log" | head -20; }
log "make test"
make -k test 2>&1 | grep -v '^gcc\|^nvcc\|^ar ' | tee "$OUT/test.log" | tail -n 60
log "tests: $(tail -n 1 "$OUT/test.log")"
if [ "${SANITIZE:-1}" = 1 ]; then
  log "compute-sanitizer"
  BUILD=build scripts/gpu_sanitize.sh > "$OUT/sanitize.log" 2>&1
  log "  $(tail -n 1 "$OUT/sanitize.log")"
fi
log "tour"
SETUP_SKIP=1 BUILD=build scripts/tour.sh > "$OUT/tour.log" 2>&1; log "  tour exit $?"
for b in ${BENCHES:-}; do
  log "bench-$b"
  SETUP_SKIP=1 make bench-$b > "$OUT/bench_$b.log" 2>&1; log "  bench-$b exit $?"
done
log "done"
if [ -n "$DEST" ]; then
  tar czf "$DEST/results.tgz" results 2>/dev/null
  cp "$OUT/summary.txt" "$DEST/summary.txt"
fi
