#!/usr/bin/env bash
# Ours vs PyTorch, same configurations, same GPU, same run: bench_torch.py (eager fp32, autocast
# bf16, bf16 + SDPA + torch.compile) and build/01_benchmarking/benchmark (fp32, bf16), then a
# ratio table (ours / torch) in results/01_benchmarking/compare.md.
#
#   01_benchmarking/compare.sh                    small and medium, context 512, batch 4
#   COMPARE_SIZES="small" COMPARE_COMPILE=0 01_benchmarking/compare.sh   (quicker)
# Env: BUILD (build dir), BENCH_OUT (results dir), COMPARE_SIZES, COMPARE_CONTEXT (a list),
#      COMPARE_BATCH, COMPARE_MODES, COMPARE_WARMUP, COMPARE_STEPS, COMPARE_COMPILE (0: skip
#      the torch.compile variant, which takes ~1 min to compile per size), COMPARE_PRECISIONS
#      (ours: "fp32 bf16"), COMPARE_TORCH_VARIANTS (default fp32,bf16[,bf16-compile]),
#      COMPARE_BIN (our benchmark program; build/04_flashattn_bwd/benchmark offers flash),
#      COMPARE_ATTENTIONS (ours: "naive", or "naive flash" with that program).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${BENCH_OUT:-results/01_benchmarking}
BIN=${COMPARE_BIN:-$BUILD/01_benchmarking/benchmark}
PRECISIONS=${COMPARE_PRECISIONS:-fp32 bf16}
ATTENTIONS=${COMPARE_ATTENTIONS:-naive}
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

variants=${COMPARE_TORCH_VARIANTS:-fp32,bf16}
[ "$COMPILE" = 1 ] && variants="$variants,bf16-compile"
echo "## PyTorch ($variants)"
python3 01_benchmarking/bench_torch.py --sizes "$(echo $SIZES | tr ' ' ,)" --contexts "$(echo $CONTEXT | tr ' ' ,)" \
    --batch "$BATCH" --modes "$(echo $MODES | tr ' ' ,)" --variants "$variants" \
    --warmup "$WARMUP" --steps "$STEPS" --out "$OUT" --csv compare_torch || fails=$((fails + 1))

echo "## Ours"
for size in $SIZES; do
  for ctx in $CONTEXT; do
    for mode in $MODES; do
      for prec in $PRECISIONS; do
        for att in $ATTENTIONS; do
            "$BIN" --model "$size" --context "$ctx" --batch "$BATCH" --mode "$mode" \
                --precision "$prec" --attention "$att" --warmup "$WARMUP" --steps "$STEPS" --out "$OUT" \
                --csv compare_ours.csv | grep -E '^\| *(model|'"$size"') ' ||
                { echo "compare.sh: benchmark failed: $size $ctx $mode $prec $att" >&2; fails=$((fails + 1)); }
        done
      done
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
