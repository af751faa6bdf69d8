#!/usr/bin/env bash
# The one device run of stage 01's measurement tools (used through the `run` tool on a GPU
# machine, from the repository root, with .criterion carried): build, the profiler and
# accumulation tests, then the quick sweep. Under $OUT (default results/gpu_run): log.txt, the
# test output, bench.md (every table), and results.tar.gz (every CSV/JSON/PNG of the sweep:
# the run tool brings back only a handful of files, so the many small ones travel as one).
#   OUT=/tmp/x lab/01_benchmarking/gpu_run_sweeps.sh
# Env: SWEEP_BUDGET_S (seconds for bench.sh; default: what is left of 225 s after build and tests),
#      BENCH_QUICK (default 1).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/gpu_run}
RES=$(mktemp -d)/results  # the sweep's files; tarred into $OUT at the end
mkdir -p "$OUT" "$RES"
exec > >(tee "$OUT/log.txt") 2>&1
T0=$SECONDS
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "gnuplot: $(command -v gnuplot || echo 'not installed (timelines: CSV only)')"

crit=()
[ -f .criterion/include/criterion/criterion.h ] && crit=(CRITERION_HOME="$PWD/.criterion")
make -j16 "${crit[@]}" build-01 > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; echo "BUILD FAILED"; exit 1; }
echo "build: $((SECONDS - T0)) s"

if [ -x build/01_benchmarking/test_01 ]; then
    timeout 90 build/01_benchmarking/test_01 --verbose --filter 'profiler/*' 2>&1 | tee "$OUT/test_profiler.txt" | tail -30
    timeout 60 build/01_benchmarking/test_01 --verbose --filter 'accumulation/*' 2>&1 | tee "$OUT/test_accumulation.txt" | tail -12
else
    echo "test_01 not built (no Criterion?)"
fi
echo "tests: $((SECONDS - T0)) s"

BUDGET=${SWEEP_BUDGET_S:-$((225 - (SECONDS - T0)))}
BUILD=build BENCH_OUT="$RES" BENCH_QUICK=${BENCH_QUICK:-1} timeout "$BUDGET" 01_benchmarking/bench.sh
echo "bench.sh exit $? after $((SECONDS - T0)) s"
cp "$RES/bench.md" "$OUT/" 2>/dev/null
tar czf "$OUT/results.tar.gz" -C "$(dirname "$RES")" results && echo "results: $OUT/results.tar.gz"
