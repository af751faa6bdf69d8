#!/usr/bin/env bash
# The whole workbook on a GPU machine in one go: build, the GPU suite (make test-gpu: every test
# binary, spread over the GPUs), the lab's tests, compute-sanitizer on the kernels
# (scripts/gpu_sanitize.sh: memcheck, racecheck, synccheck), then the benchmarks named in
# $BENCHES. One summary line per step; logs under results/gpu_check/. With $OUT set, the logs are
# packed into $OUT/gpu_check.tgz and the summary copied to $OUT/summary.txt. Where Criterion is
# not installed, point at a bundle:   CRITERION_HOME=$PWD/.criterion scripts/gpu_check.sh
#   BENCHES="02 03 04 01"   benchmarks to run (default: none)
#   SANITIZE=0              skip compute-sanitizer;   LAB=0   skip the lab's tests
set -u
cd "$(dirname "$0")/.."
DEST=${OUT:-}
LOGS=results/gpu_check
mkdir -p "$LOGS"
: > "$LOGS/summary.txt"
export NCCL_NVLS_ENABLE=0 SETUP_SKIP=1
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOGS/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$LOGS/gpu.txt"
status=0
log "build"
# -k: a stage that does not build does not stop the others from being tested
make -k -j"$(nproc)" all > "$LOGS/build.log" 2>&1 || { status=1; log "BUILD FAILED (going on with what built)"; grep -E 'error|Error' "$LOGS/build.log" | head -20; }
log "make test-gpu"
TEST_GPU_LOGS=$LOGS/test_gpu make --no-print-directory test-gpu 2>&1 | grep -v '^  \(CC\|NVCC\|AR\|LD\) ' > "$LOGS/test_gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
grep -E '^(✓|✗|test-gpu:)' "$LOGS/test_gpu.log" | tee -a "$LOGS/summary.txt"
log "test-gpu: $(tail -n 1 "$LOGS/test_gpu.log")"
if [ "${LAB:-1}" = 1 ]; then
  log "make test-lab"
  make --no-print-directory -j"$(nproc)" test-lab > "$LOGS/test_lab.log" 2>&1 || status=1
  grep -E '^(✓|✗)' "$LOGS/test_lab.log" | tee -a "$LOGS/summary.txt"
  log "test-lab: $(tail -n 1 "$LOGS/test_lab.log")"
fi
if [ "${SANITIZE:-1}" = 1 ]; then
  log "compute-sanitizer"
  BUILD=build scripts/gpu_sanitize.sh > "$LOGS/sanitize.log" 2>&1 || status=1
  log "  $(tail -n 1 "$LOGS/sanitize.log")"
fi
for b in ${BENCHES:-}; do
  log "bench-$b"
  make --no-print-directory bench-$b > "$LOGS/bench_$b.log" 2>&1; log "  bench-$b exit $?"
done
log "done (exit $status)"
if [ -n "$DEST" ]; then
  tar czf "$DEST/gpu_check.tgz" "$LOGS" 2>/dev/null
  cp "$LOGS/summary.txt" "$DEST/summary.txt"
fi
exit $status
