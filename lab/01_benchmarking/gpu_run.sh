#!/usr/bin/env bash
# One GPU lease for stage 01's CUDA model, in order of importance, within a time budget:
# build, the stage's tests, our benchmark (small and medium, context 512, fp32 and bf16, every
# mode), compute-sanitizer memcheck on short tiny runs, PyTorch side by side (eager fp32 and
# autocast bf16; torch.compile for small if time is left), and a kernel/memory profile.
#
#   OUT=/some/dir lab/01_benchmarking/gpu_run.sh      (the device run passes its $OUT)
# Env: OUT (logs and results, default results/01_benchmarking/gpu_run), BUDGET_S (default 280):
# a part that would not fit in what is left is skipped and says so.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/01_benchmarking/gpu_run}
BUDGET=${BUDGET_S:-280}
BIN=build/01_benchmarking/benchmark
mkdir -p "$OUT"
t0=$SECONDS
part() { echo; echo "=== [$((SECONDS - t0)) s] $*"; }
# fits N: 0 if N more seconds fit in the budget.
fits() { [ $((SECONDS - t0 + $1)) -le "$BUDGET" ] || { echo "(skipped: $1 s do not fit in the budget)"; return 1; }; }
left() { echo $((BUDGET - (SECONDS - t0))); }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

part "build"
if ! make -j16 CRITERION_HOME="$PWD/.criterion" build-01 > "$OUT/build.txt" 2>&1; then
    grep -E "error|Error" "$OUT/build.txt" | head -40
    exit 1
fi

part "tests (build/01_benchmarking/test_01)"
timeout 100 build/01_benchmarking/test_01 --verbose -j4 > "$OUT/test_01.txt" 2>&1
echo "exit $?"
grep -E "FAIL|CRASH|Assertion|not allclose|max abs|first bad|Synthesis" "$OUT/test_01.txt" | head -60

part "ours: small and medium, context 512, batch 4"
for size in small medium; do
    for prec in fp32 bf16; do
        for mode in forward forward-backward train; do
            fits 20 || break 3
            timeout 40 "$BIN" --model $size --context 512 --batch 4 --mode $mode --precision $prec \
                --warmup 3 --steps 10 --out "$OUT" --csv ours.csv 2>&1 | grep -E "^\| *$size |OOM|error" ||
                echo "FAILED: $size $prec $mode"
        done
    done
done
[ -f "$OUT/ours.csv" ] && python3 01_benchmarking/csv2md.py "$OUT/ours.csv" > "$OUT/ours.md" 2>/dev/null

part "compute-sanitizer memcheck (tiny, train, both precisions)"
for prec in fp32 bf16; do
    fits 35 || break
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --model tiny --context 33 \
        --batch 3 --mode train --precision $prec --warmup 0 --steps 2 --out "$OUT/san" \
        > "$OUT/sanitizer_$prec.txt" 2>&1
    echo "memcheck $prec: exit $?"; grep -E "ERROR SUMMARY|Invalid|error" "$OUT/sanitizer_$prec.txt" | head -10
done

part "PyTorch eager fp32 and autocast bf16 (01_benchmarking/bench_torch.py)"
if [ -f 01_benchmarking/bench_torch.py ] && fits 60; then
    timeout $(($(left) - 10)) python3 01_benchmarking/bench_torch.py --sizes small,medium --contexts 512 \
        --batch 4 --variants fp32,bf16 --warmup 3 --steps 10 --out "$OUT" --csv torch \
        > "$OUT/torch.txt" 2>&1
    echo "exit $?"; tail -20 "$OUT/torch.txt"
fi
if [ -f "$OUT/ours.csv" ] && [ -f "$OUT/torch.csv" ]; then
    python3 01_benchmarking/compare_tables.py "$OUT/ours.csv" "$OUT/torch.csv" > "$OUT/compare.md" 2>&1
    cat "$OUT/compare.md"
fi

part "kernel summary and memory of one configuration (small, bf16, train)"
if fits 15; then
    timeout 30 "$BIN" --model small --context 512 --batch 4 --mode train --precision bf16 --warmup 2 \
        --steps 3 --profile --memory --nvtx --out "$OUT" --csv profile.csv > "$OUT/profile.txt" 2>&1
    echo "exit $?"; head -60 "$OUT/profile.txt"
fi

part "torch.compile (bf16 + SDPA), small, train"
if [ -f 01_benchmarking/bench_torch.py ] && fits 70; then
    timeout $(($(left) - 5)) python3 01_benchmarking/bench_torch.py --sizes small --contexts 512 --batch 4 \
        --variants bf16-compile --modes train --warmup 3 --steps 10 --out "$OUT" --csv torch_compile \
        > "$OUT/torch_compile.txt" 2>&1
    echo "exit $?"; tail -8 "$OUT/torch_compile.txt"
fi
part "done"
