#!/usr/bin/env bash
# Ours vs PyTorch, same configurations, same GPU, same run: bench_torch.py (eager fp32, autocast
# bf16, bf16 + SDPA + torch.compile) and build/01_benchmarking/benchmark (fp32, bf16), then a
# ratio table (ours / torch) in results/01_benchmarking/compare.md.
#
#   01_benchmarking/compare.sh                    small and medium, context 512, batch 4
#   COMPARE_SIZES="small" COMPARE_COMPILE=0 01_benchmarking/compare.sh   (quicker)
# Env: BUILD (build dir), BENCH_OUT (results dir), COMPARE_SIZES, COMPARE_CONTEXT,
#      COMPARE_BATCH, COMPARE_MODES, COMPARE_WARMUP, COMPARE_STEPS, COMPARE_COMPILE (0: skip
#      the torch.compile variant, which takes ~1 min to compile per size).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${BENCH_OUT:-results/01_benchmarking}
BIN=$BUILD/01_benchmarking/benchmark
SIZES=${COMPARE_SIZES:-small medium}
CONTEXT=${COMPARE_CONTEXT:-512}
BATCH=${COMPARE_BATCH:-4}
MODES=${COMPARE_MODES:-forward forward-backward train}
WARMUP=${COMPARE_WARMUP:-3}
STEPS=${COMPARE_STEPS:-10}
COMPILE=${COMPARE_COMPILE:-1}

[ -x "$BIN" ] || { echo "compare.sh: error: $BIN not built (make build-01)" >&2; exit 2; }
python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null ||
    { echo "compare.sh: error: needs python3 with torch and a CUDA GPU" >&2; exit 2; }
mkdir -p "$OUT"
rm -f "$OUT/compare_ours.csv" "$OUT/compare_ours.json" "$OUT/compare_torch.csv"
fails=0

variants="fp32,bf16"
[ "$COMPILE" = 1 ] && variants="$variants,bf16-compile"
echo "## PyTorch ($variants)"
python3 01_benchmarking/bench_torch.py --sizes "$(echo $SIZES | tr ' ' ,)" --contexts "$CONTEXT" \
    --batch "$BATCH" --modes "$(echo $MODES | tr ' ' ,)" --variants "$variants" \
    --warmup "$WARMUP" --steps "$STEPS" --out "$OUT" --csv compare_torch || fails=$((fails + 1))

echo "## Ours"
for size in $SIZES; do
    for mode in $MODES; do
        for prec in fp32 bf16; do
            "$BIN" --model "$size" --context "$CONTEXT" --batch "$BATCH" --mode "$mode" \
                --precision "$prec" --warmup "$WARMUP" --steps "$STEPS" --out "$OUT" \
                --csv compare_ours.csv | grep -E '^\| *(model|'"$size"') ' ||
                { echo "compare.sh: benchmark failed: $size $mode $prec" >&2; fails=$((fails + 1)); }
        done
    done
done

if [ -f "$OUT/compare_ours.csv" ] && [ -f "$OUT/compare_torch.csv" ]; then
    python3 01_benchmarking/compare_tables.py "$OUT/compare_ours.csv" "$OUT/compare_torch.csv" \
        > "$OUT/compare.md.tmp" && mv "$OUT/compare.md.tmp" "$OUT/compare.md"
    cat "$OUT/compare.md"
else
    echo "compare.sh: one side produced no results; no compare.md" >&2
    fails=$((fails + 1))
fi
exit $((fails > 0))
