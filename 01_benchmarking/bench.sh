#!/usr/bin/env bash
# `make bench-01`: the course's stage-1 experiments as sweeps. Every part appends rows to a CSV
# under results/01_benchmarking/ and turns it into a Markdown table there; bench.md collects
# them all with the GPU's name and the command that reproduced them.
#
# Parts (BENCH_PARTS, comma list; default all, in this order):
#   sizes         5 sizes x contexts 128/256/512/1024, forward and forward+backward, fp32 and
#                 bf16; out-of-memory cases are rows with status OOM       -> sizes.md
#   warmup        warm-up 0, 1, 2, 5 before the timed steps (small, ctx 512, forward+backward):
#                 the first step's cost shows in the mean and the std       -> warmup.md
#   accumulation  the fp16/fp32 accumulation demo (handout 1.1.5)          -> accumulation.md
#   memory        2.7B model at contexts 128/256/512, forward and a full train step, fp32 and
#                 bf16: peaks per phase; the timeline CSV/PNG of every case -> memory.md
#   profile       the CUPTI kernel summary of one train step (small, ctx 512, bf16) -> profile.md
#   compare       compare.sh: ours vs PyTorch eager / autocast / compile    -> compare.md
#
# Env: BUILD (build dir; make passes it), BENCH_PRECISIONS (default "fp32 bf16"), BENCH_WARMUP_MODEL/_CONTEXT,, BENCH_OUT (results dir), BENCH_QUICK=1 (a small
# subset for a short GPU slot: about a minute on an H100), BENCH_SIZES, BENCH_CONTEXTS, BENCH_WARMUP,
# BENCH_STEPS, BENCH_MEM_CONTEXTS, BENCH_TIMEOUT (seconds per benchmark run), BENCH_MEM_MODEL
# (default 2.7B), BENCH_DEVICE=cpu (checks this script on a machine without a GPU:
# BENCH_DEVICE=cpu BENCH_SIZES=tiny BENCH_MEM_MODEL=tiny BENCH_PARTS=sizes,warmup,memory).
# The default sweep is sized to finish in about 9 minutes on one H100 (few steps per point).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${BENCH_OUT:-results/01_benchmarking}
BIN=$BUILD/01_benchmarking/benchmark
ACC=$BUILD/01_benchmarking/accumulation
QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
    SIZES=${BENCH_SIZES:-small medium}
    CONTEXTS=${BENCH_CONTEXTS:-128 512}
    MEM_CONTEXTS=${BENCH_MEM_CONTEXTS:-128}
    WARMUP_LIST="0 1 2 5"
    PARTS=${BENCH_PARTS:-sizes,warmup,accumulation,memory,profile,compare}
    export COMPARE_SIZES=${COMPARE_SIZES:-small} COMPARE_COMPILE=${COMPARE_COMPILE:-0}
    export COMPARE_WARMUP=${COMPARE_WARMUP:-2} COMPARE_STEPS=${COMPARE_STEPS:-5}
else
    SIZES=${BENCH_SIZES:-small medium large xl 2.7B}
    CONTEXTS=${BENCH_CONTEXTS:-128 256 512 1024}
    MEM_CONTEXTS=${BENCH_MEM_CONTEXTS:-128 256 512}
    WARMUP_LIST="0 1 2 5"
    PARTS=${BENCH_PARTS:-sizes,warmup,accumulation,memory,profile,compare}
fi
WARMUP_MODEL=${BENCH_WARMUP_MODEL:-small}
MEM_MODEL=${BENCH_MEM_MODEL:-2.7B}
WARMUP=${BENCH_WARMUP:-2}
STEPS=${BENCH_STEPS:-5}
TIMEOUT=${BENCH_TIMEOUT:-180}
DEVICE=${BENCH_DEVICE:-cuda}  # cpu: a smoke test of this script's plumbing (BENCH_SIZES=tiny)
PRECISIONS=${BENCH_PRECISIONS:-fp32 bf16}
[ "$DEVICE" = cpu ] && PRECISIONS=fp32  # the CPU reference is fp32 only
WARMUP_CONTEXT=${BENCH_WARMUP_CONTEXT:-512}

has_part() { [[ ",$PARTS," == *",$1,"* ]]; }
[ -x "$BIN" ] || { echo "bench.sh: error: $BIN not built (make build-01)" >&2; exit 2; }
# Without a GPU: one line saying so and exit status 2, before anything is run or written (the
# same in every stage's bench.sh; README, "Conventions"). BENCH_DEVICE=cpu is the exception.
[ "$DEVICE" = cpu ] || "$BUILD/common/envreport" --need-gpu "make bench-01" || exit $?
mkdir -p "$OUT"
fails=0
T0=$SECONDS
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ "$DEVICE" = cpu ] && GPU="CPU (smoke test)"
[ -n "$GPU" ] || GPU="unknown GPU (nvidia-smi not found)"

# One benchmark run: prints its Markdown row (and OOM line), appends to $OUT/$csv.
# A non-OOM failure (non-zero exit, timeout) is reported and counted; the sweep goes on.
bench() {
    local csv=$1
    shift
    local log
    log=$(timeout "$TIMEOUT" "$BIN" "$@" --device "$DEVICE" --out "$OUT" --csv "$csv" 2>&1)
    local rc=$?
    printf '%s\n' "$log" | grep -E '^\| *[A-Za-z0-9.]+ *\| *[0-9]+ *\|' | grep -v '^| *model ' || true
    printf '%s\n' "$log" | grep -E '^OOM' || true
    if [ $rc -ne 0 ]; then
        echo "bench.sh: FAILED (exit $rc): $BIN $*" >&2
        printf '%s\n' "$log" | tail -5 >&2
        fails=$((fails + 1))
    fi
    LAST_LOG=$log
}

section() { echo; echo "## $1 ($((SECONDS - T0)) s so far)"; }
md() { python3 01_benchmarking/csv2md.py "$@"; }

COLS_T=model,context,mode,precision,status,forward_ms,backward_ms,step_ms,step_std,tokens_per_s,tflops,peak_gib

if has_part sizes; then
    section "sizes x contexts (warm-up $WARMUP, $STEPS steps)"
    rm -f "$OUT/sizes.csv" "$OUT/sizes.json"
    for size in $SIZES; do
        for ctx in $CONTEXTS; do
            for mode in forward forward-backward; do
                for prec in $PRECISIONS; do
                    bench sizes.csv --model "$size" --context "$ctx" --batch 4 --mode "$mode" \
                        --precision "$prec" --warmup "$WARMUP" --steps "$STEPS"
                done
            done
        done
    done
    [ -f "$OUT/sizes.csv" ] && md "$OUT/sizes.csv" --cols "$COLS_T" \
        --title "Model sizes x contexts, batch 4, $GPU (mean ms over $STEPS steps after $WARMUP warm-up)" \
        > "$OUT/sizes.md"
fi

if has_part warmup; then
    section "warm-up steps"
    rm -f "$OUT/warmup.csv" "$OUT/warmup.json"
    for w in $WARMUP_LIST; do
        bench warmup.csv --model "$WARMUP_MODEL" --context "$WARMUP_CONTEXT" --batch 4 --mode forward-backward \
            --precision fp32 --warmup "$w" --steps 10
    done
    [ -f "$OUT/warmup.csv" ] && md "$OUT/warmup.csv" \
        --cols warmup,steps,forward_ms,forward_std,backward_ms,backward_std,step_ms,step_std \
        --title "Warm-up before 10 timed steps: $WARMUP_MODEL, ctx $WARMUP_CONTEXT, batch 4, fp32, forward+backward, $GPU" \
        > "$OUT/warmup.md"
fi

if has_part accumulation; then
    section "accumulation demo"
    if [ -x "$ACC" ]; then
        "$ACC" --out "$OUT" --csv accumulation > "$OUT/accumulation.md.tmp" &&
            mv "$OUT/accumulation.md.tmp" "$OUT/accumulation.md" && cat "$OUT/accumulation.md" ||
            { echo "bench.sh: accumulation failed" >&2; fails=$((fails + 1)); }
    else
        echo "bench.sh: $ACC not built" >&2
        fails=$((fails + 1))
    fi
fi

if has_part memory; then
    section "memory of the $MEM_MODEL model"
    rm -f "$OUT/memory.csv" "$OUT/memory.json"
    for ctx in $MEM_CONTEXTS; do
        for mode in forward train; do
            for prec in $PRECISIONS; do
                bench memory.csv --model "$MEM_MODEL" --context "$ctx" --batch 4 --mode "$mode" \
                    --precision "$prec" --warmup 1 --steps 2 --memory
                printf '%s\n' "$LAST_LOG" | grep -E '^memory timeline' || true
            done
        done
    done
    if [ -f "$OUT/memory.csv" ]; then
        {
            md "$OUT/memory.csv" --cols model,context,mode,precision,status,step_ms,peak_gib \
                --title "$MEM_MODEL model, batch 4: peak memory (allocator peak over the run), $GPU"
            echo "Per-phase breakdowns: memory_phases_${MEM_MODEL}_ctx*_b4_*.csv; timelines: memory_${MEM_MODEL}_ctx*_b4_*.csv"
            echo "and .png (stacked by tag: params, grads, optim, acts, workspace, other)."
            for png in "$OUT"/memory_"$MEM_MODEL"_ctx*_b4_*_train.png; do
                [ -f "$png" ] && echo "" && echo "![$(basename "$png" .png)]($(basename "$png"))" && break
            done
        } > "$OUT/memory.md"
    fi
fi

if has_part profile; then
    section "kernel summary (CUPTI)"
    rm -f "$OUT/profile.csv" "$OUT/profile.json"
    bench profile.csv --model small --context 512 --batch 4 --mode train --precision bf16 \
        --warmup 2 --steps 1 --profile
    printf '%s\n' "$LAST_LOG" | sed -n '/^### GPU kernel time by phase/,$p' | grep -v '^kernel summary:' \
        > "$OUT/profile.md.tmp" && mv "$OUT/profile.md.tmp" "$OUT/profile.md"
    head -12 "$OUT/profile.md"
fi

if has_part compare; then
    section "ours vs PyTorch"
    BUILD=$BUILD BENCH_OUT=$OUT 01_benchmarking/compare.sh || fails=$((fails + 1))
fi

# Everything in one file, with what produced it.
{
    echo "# Stage 01 results"
    echo
    echo "GPU: $GPU. Command: \`BENCH_QUICK=$QUICK BENCH_PARTS=$PARTS make bench-01\`" \
        "($(date -u +%Y-%m-%d), $((SECONDS - T0)) s)."
    for f in sizes warmup accumulation memory profile compare; do
        if [ -f "$OUT/$f.md" ] && has_part "$f"; then echo; cat "$OUT/$f.md"; fi
    done
} > "$OUT/bench.md.tmp" && mv "$OUT/bench.md.tmp" "$OUT/bench.md"
echo
echo "bench.sh: done in $((SECONDS - T0)) s, $fails failure(s); tables in $OUT/*.md (all: $OUT/bench.md)"
exit $((fails > 0))
