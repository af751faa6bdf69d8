#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck and synccheck) over every stage's kernels, each on a small ragged
# case through its command-line program (whole test binaries under the sanitizer take too long
# for a lease). Prints one line per run; exit status 1 if any run reported an error.
#   BUILD=build scripts/gpu_sanitize.sh [--ring-only]     (--ring-only: stage 10's ring alone)
set -u
ring_only=0
case "${1:-}" in
  "") ;;
  --ring-only) ring_only=1 ;;
  *) echo "gpu_sanitize: error: unknown argument '$1' (allowed: --ring-only)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
B=${BUILD:-build}
bad=0
run() {  # $1 tool, rest: command
  local tool=$1; shift
  local log; log=$(mktemp)
  timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" > "$log" 2>&1
  local rc=$?
  local summary; summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)
  echo "$tool rc=$rc ${summary:-no summary} :: ${*#$B/}"
  if [ $rc -ne 0 ]; then bad=1; grep -m 20 -E '=====' "$log"; fi
  rm -f "$log"
}
cases=(
  "$B/02_weighted_sum/weighted_sum --device cuda --rows 1001 --d 37 --dtype f32 --check"
  "$B/02_weighted_sum/weighted_sum --device cuda --rows 517 --d 1030 --dtype bf16 --check"
  "$B/02_weighted_sum/weighted_sum --device cuda --rows 300 --d 64 --grad-w atomic --check"
  "$B/03_flashattn_fwd/flash_fwd --device cuda --B 1 --H 2 --Nq 130 --Nk 77 --d 64 --causal --dtype bf16 --out ''"
  "$B/03_flashattn_fwd/flash_fwd --device cuda --B 1 --H 2 --Nq 400 --Nk 390 --d 64 --causal --dtype bf16 --out ''"
  "$B/03_flashattn_fwd/flash_fwd --device cuda --B 1 --H 2 --Nq 70 --Nk 200 --d 128 --dtype bf16 --out ''"
  "$B/03_flashattn_fwd/flash_fwd --device cuda --B 1 --H 2 --Nq 33 --Nk 33 --d 16 --causal --dtype f32 --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 150 --Nk 67 --d 64 --causal --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 70 --Nk 130 --d 128 --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 150 --Nk 67 --d 128 --causal --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 100 --Nk 65 --d 32 --causal --dtype f32 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 70 --Nk 200 --d 64 --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 333 --Nk 201 --d 64 --causal --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 332 --Nk 201 --d 64 --causal --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/flash_bwd --device cuda --B 1 --H 2 --Nq 200 --Nk 333 --d 64 --dtype bf16 --check --out ''"
  "$B/04_flashattn_bwd/test_04 --filter 'bwd_cuda/sanitize_*'"
)
[ $ring_only = 1 ] && cases=()
for c in "${cases[@]}"; do
  for tool in memcheck racecheck synccheck; do eval run $tool "$c"; done
done
# the model: memcheck only (racecheck adds nothing for cuBLAS-heavy code and is slow)
[ $ring_only = 1 ] || for p in fp32 bf16; do
  run memcheck "$B/01_benchmarking/benchmark" --model tiny --context 33 --batch 2 --mode train \
    --precision $p --warmup 0 --steps 2 --out /tmp/gpu_sanitize
done
# the model's block-range path (stage 08): the split backward (ZB-H1's B and W, and their copies)
# against the fused one, through its GPU tests (one process: Criterion runs them in order)
[ $ring_only = 0 ] && [ -x "$B/08_pipeline/test_08" ] && run memcheck "$B/08_pipeline/test_08" --jobs 1 --filter 'model_gpu_range/*'
# the chunked LM head's loss kernels (one process, its GPU tests in order)
[ $ring_only = 0 ] && [ -x "$B/tests/test_common" ] && run memcheck "$B/tests/test_common" --jobs 1 --filter 'head_chunk/gpu_*_close_*'
# stage 10's ring (its merge, split and LSE kernels), each of the two ranks under the sanitizer.
# NCCL probes its kernels with cudaFuncGetAttributes, and those built for other GPUs answer
# "no kernel image": memcheck reports each such call as an API error inside libnccl, so the
# ring's runs leave API errors out (--report-api-errors no); every memory access is still checked.
ring_mpi() {  # $1 tool, $2 dtype, $3 split
  local log; log=$(mktemp)
  MPIRUN_TIMEOUT=150 scripts/mpirun.sh 2 compute-sanitizer --tool "$1" --report-api-errors no --error-exitcode 9 "$B/10_context/ring_check" \
    --backend nccl --dtype "$2" --split "$3" --causal 1 --N 301 --d 64 --BH 2 --comm-timeout 120 > "$log" 2>&1
  local rc=$? n m; n=$(grep -cE 'SUMMARY: 0 (errors|hazards)' "$log"); m=$(grep -cE 'SUMMARY: [1-9]' "$log")
  echo "$1 rc=$rc clean summaries $n, with findings $m :: ring_check --backend nccl --dtype $2 --split $3"
  if [ $rc -ne 0 ] || [ "$n" -lt 2 ] || [ "$m" -ne 0 ]; then bad=1; grep -m 20 -E '=====|error' "$log"; fi
  rm -f "$log"
}
if [ -x "$B/10_context/ring_check" ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ]; then
  for tool in memcheck racecheck synccheck; do ring_mpi $tool f32 zigzag; done
  ring_mpi memcheck bf16 plain
fi
echo "sanitizer: $([ $bad = 0 ] && echo clean || echo ERRORS)"
exit $bad
