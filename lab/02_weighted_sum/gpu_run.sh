#!/usr/bin/env bash
# The one device run behind this stage's README numbers: build, tests, the benchmark (ours and
# PyTorch), and compute-sanitizer memcheck on the CUDA tests. Logs, tables and the plot go to
# $OUT (default /tmp/ws_gpu_run). Run from the repository root on a GPU machine:
#   OUT=/tmp/out lab/02_weighted_sum/gpu_run.sh
set -u
OUT=${OUT:-/tmp/ws_gpu_run}
mkdir -p "$OUT"
export BUILD=build
t0=$(date +%s)
step() { echo; echo "=== [$(( $(date +%s) - t0 )) s] $*"; }

step "GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"

step "build"
CRIT="CRITERION_HOME=$PWD/.criterion"
if ! timeout 120 make -j16 "$CRIT" build-02 > "$OUT/build.log" 2>&1; then
  echo "make build-02 failed (tail below); building stage 02 alone, without the earlier stages' libraries"
  tail -20 "$OUT/build.log"
  # Stage 02 uses only common/: link its programs and tests without lib01.a.
  timeout 120 make -j16 "$CRIT" build/common/libcommon.a build/tests/harness.c.o build/02_weighted_sum/lib02.a \
    $(for f in 02_weighted_sum/*_main.c 02_weighted_sum/test_*.c; do echo "build/$f.o"; done) >> "$OUT/build.log" 2>&1
  L="-fopenmp -L/usr/local/cuda/lib64 -Wl,-rpath,/usr/local/cuda/lib64"
  LIBS="build/02_weighted_sum/lib02.a build/common/libcommon.a -lcublasLt -lcublas -lcudart -lcupti -ldl -lpthread -lm"
  for m in 02_weighted_sum/*_main.c; do n=$(basename "$m" _main.c); gcc $L "build/$m.o" $LIBS -o "build/02_weighted_sum/$n"; done
  gcc $L -L"$PWD/.criterion/lib" -Wl,--disable-new-dtags,-rpath,"$PWD/.criterion/lib" \
    $(for f in 02_weighted_sum/test_*.c; do echo "build/$f.o"; done) build/tests/harness.c.o $LIBS -lcriterion \
    -o build/02_weighted_sum/test_02 >> "$OUT/build.log" 2>&1
fi
ls -la build/02_weighted_sum/ | grep -v '\.[do]$' | tee -a "$OUT/build.log"

step "tests"
timeout 90 build/02_weighted_sum/test_02 --jobs 8 --verbose > "$OUT/test.log" 2>&1
echo "test_02 exit status $?" | tee -a "$OUT/test.log"
grep -E "FAIL|CRASH|Synthesis|allclose|Assert|error" "$OUT/test.log" | head -40

step "demo"
timeout 20 build/02_weighted_sum/demo 2>&1 | tail -8 | tee "$OUT/demo.log"

step "benchmark (ours + PyTorch)"
timeout 110 02_weighted_sum/bench.sh > "$OUT/bench.log" 2>&1
echo "bench.sh exit status $?" | tee -a "$OUT/bench.log"
tail -60 "$OUT/bench.log"
cp -r results/02_weighted_sum "$OUT/results" 2>/dev/null

left=$(( 225 - ($(date +%s) - t0) ))
step "compute-sanitizer memcheck on the CUDA tests (${left} s left)"
if [ "$left" -gt 15 ]; then
  timeout "$left" compute-sanitizer --tool memcheck --error-exitcode 99 \
    build/02_weighted_sum/test_02 --jobs 1 --filter 'ws_cuda/*' > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit status $? (124 = ran out of time)" | tee -a "$OUT/memcheck.log"
  grep -E "ERROR SUMMARY|Invalid|Synthesis" "$OUT/memcheck.log" | sort | uniq -c | head -20
fi
step "done"
