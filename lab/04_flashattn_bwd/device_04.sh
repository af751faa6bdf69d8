#!/usr/bin/env bash
# The device parts of stage 04's backward ladder, moved out of lab/device/device_h100.sh (kept as
# they were run; steps, limits and logs as there: scripts/device_lib.sh). They drove the rungs
# through flash_bwd/bench --version and test_04's version tests, which are now the lab's:
# build/lab/04_flashattn_bwd/bench_rungs --version N and test_lab04's rungs/* and rung_plan/*
# tests; flash_bwd no longer takes --version (the dispatch table chooses).
#   OUT=/tmp/o B=build-dev lab/04_flashattn_bwd/device_04.sh bwd128 v21 ldt21 ldtab
# Parts:
#   bwd128    issue 15: the wgmma backward for d 128 (version 20; first run 2026-11-26): test_04's
#             version-20 tests and the plan tests, a longer --check, then N 16384, d 128, 16 heads,
#             causal, bf16: version 20 vs the default (version 1's two passes at d 128) and SDPA
#             flash / cuDNN in the same call, then compute-sanitizer memcheck and racecheck at
#             d 128 (small ragged shapes, causal and not, both entry points); < 10 minutes
#   v21       issue 15: the FlashAttention-3-style backward at d 64 (version 21, flash_bwd_tma.cu):
#             smoke runs with 60-s limits first (an mbarrier protocol bug traps after 20 s), then
#             its GPU tests and the plan tests, memcheck / racecheck / synccheck on ragged shapes;
#             then the leaderboard with version 21 and with the default (20) beside SDPA, and ncu
#             on one launch of each; a failed smoke run gets memcheck on the smallest shapes
#   ldt21     issue 15: version 21 with L and D by TMA (Nq a multiple of 4) and the new d-64
#             forward default (fa3 w16 bq192): smoke runs with 60-s limits (both L/D paths), then
#             the leaderboard three times, each beside SDPA flash / cuDNN right after it (the
#             GPU's clocks drift over a call), and ncu of version 21
#   ldtab     version 21 with and without L/D by TMA in one call: N 16382 (not a multiple of 4:
#             warp 0's stores, one release per consumer thread) against N 16384 (TMA, one per
#             warp), d 64, 16 heads, causal, bf16, alternated twice; ncu of one launch of each
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-results/device_out}
L=results/device
R=results/h100
mkdir -p "$O" "$L" "$R"
export LD_LIBRARY_PATH=$PWD/.criterion/lib:${LD_LIBRARY_PATH:-}
B=${B:-build}
. lab/device/device_lib.sh  # step, last_ok
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$L/gpu.txt" 2>&1
# bwd_diag TAG VERSION "NQ NK"...: after a failed smoke run, that backward version under
# memcheck on the smallest shapes (d 64, one head), for the diagnosis.
bwd_diag() {
  local tag=$1 v=$2 shape
  shift 2
  for shape in "$@"; do
    read -r nq nk <<< "$shape"
    step ${tag}_diag_${nq}_$nk 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/04_flashattn_bwd/flash_bwd" \
      --device cuda --dtype bf16 --version "$v" --d 64 --B 1 --H 1 --Nq "$nq" --Nk "$nk" --check --out ''
  done
}
for s in "$@"; do
  case $s in
  bwd128)  # worst case 120 + 20 + 60 + 80 + 70 + 6 x 35 = 560 s: one call of 10 minutes
    step t04_v20 120 "$B/04_flashattn_bwd/test_04" --jobs 1 --filter 'bwd_cuda/*version20*'
    step t04_plan 20 "$B/04_flashattn_bwd/test_04" --jobs 1 --filter 'bwd_api/*'
    step v20_check 60 "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 20 --d 128 \
      --B 1 --H 2 --Nq 2048 --Nk 1900 --causal --check --out ''
    mkdir -p $R/bwd128
    for v in 20 0; do  # 0: the default (19; at d 128 version 1's two passes); each row names what ran
      step bench128_v$v 40 "$B/04_flashattn_bwd/bench" --mode sweep --dtype bf16 --d 128 --N 16384 --H 16 \
        --causal 1 --version $v --reps 20 --csv $R/bwd128/04_d128_v$v.csv
    done
    step torch128 70 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 128 --dtype bf16 --H 16 \
      --impls sdpa_flash,sdpa_cudnn --reps 20 --csv $R/bwd128/04_d128_torch.csv
    for sc in "150 67 --causal" "70 200" "333 201 --causal --impl atomic"; do
      read -r nq nk extra <<< "$sc"  # Nq, Nk, the other flags (split on purpose below)
      for tool in memcheck racecheck; do
        # shellcheck disable=SC2086
        step san_v20_${nq}_${nk}_$tool 35 compute-sanitizer --tool $tool --error-exitcode 9 \
          "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 20 --d 128 --B 1 --H 2 \
          --Nq $nq --Nk $nk $extra --check --out ''
        last_ok || grep -h 'backward kernels\|check vs\|SUMMARY' "$L/san_v20_${nq}_${nk}_$tool.log"
      done
    done
    ;;
  v21)
    v21_ok=1
    for sc in "333 201 --causal" "70 200" "517 517 --causal" "64 64"; do
      read -r nq nk extra <<< "$sc"
      # shellcheck disable=SC2086
      step v21_smoke_${nq}_${nk} 60 "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 21 --d 64 \
        --B 1 --H 2 --Nq $nq --Nk $nk $extra --check --out '' || v21_ok=0
    done
    if [ $v21_ok = 1 ]; then
      step t04_v21 200 "$B/04_flashattn_bwd/test_04" --jobs 1 --filter 'bwd_cuda/*version21*'
      step t04_plan21 20 "$B/04_flashattn_bwd/test_04" --jobs 1 --filter 'bwd_api/*'
      step v21_check 60 "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 21 --d 64 \
        --B 2 --H 3 --Nq 2048 --Nk 1900 --causal --check --out ''
      mkdir -p $R/v21
      for v in 21 20; do
        step lb_v$v 100 "$B/04_flashattn_bwd/bench" --mode leaderboard --version $v --lb-reps 50 \
          --csv $R/v21/04_leaderboard_v$v.csv
      done
      step lb_torch21 120 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 \
        --impls sdpa_flash,sdpa_cudnn --reps 50 --csv $R/v21/04_leaderboard_torch.csv
      for sc in "150 67 --causal" "70 200" "333 201 --causal --impl atomic"; do
        read -r nq nk extra <<< "$sc"
        for tool in memcheck racecheck synccheck; do
          # shellcheck disable=SC2086
          step san_v21_${nq}_${nk}_$tool 150 compute-sanitizer --tool $tool --error-exitcode 9 \
            "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 21 --d 64 --B 1 --H 2 \
            --Nq $nq --Nk $nk $extra --check --out ''
        done
      done
      for v in 21 20; do
        step ncu_bwd_v$v 120 ncu --clock-control none -k regex:"bwd_(tma|wgmma)" -c 1 --section SpeedOfLight \
          --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy \
          --section LaunchStats "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version $v --d 64 \
          --B 1 --H 16 --Nq 16384 --Nk 16384 --causal --out ''
      done
    else  # the smallest shapes under memcheck: one tile, then two
      bwd_diag v21 21 "64 64" "128 128" "192 130"
    fi
    ;;
  ldt21)
    ldt_ok=1
    for sc in "332 201 --causal" "200 333" "516 516 --causal" "64 64" "4 4 --causal" "128 129" "333 201 --causal"; do
      read -r nq nk extra <<< "$sc"
      # shellcheck disable=SC2086
      step ldt_smoke_${nq}_${nk} 60 "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 21 --d 64 \
        --B 1 --H 2 --Nq $nq --Nk $nk $extra --check --out '' || ldt_ok=0
    done
    if [ $ldt_ok = 1 ]; then
      mkdir -p $R/ldt21
      for r in 1 2 3; do
        step lb_default_$r 100 "$B/04_flashattn_bwd/bench" --mode leaderboard --lb-reps 50 \
          --csv $R/ldt21/04_leaderboard_$r.csv
        step lb_torch_$r 120 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 \
          --impls sdpa_flash,sdpa_cudnn --reps 50 --csv $R/ldt21/04_leaderboard_torch_$r.csv
      done
      step ncu_bwd_ldt 120 ncu --clock-control none -k regex:"bwd_tma" -c 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
        "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 21 --d 64 \
        --B 1 --H 16 --Nq 16384 --Nk 16384 --causal --out ''
    else
      bwd_diag ldt 21 "64 64" "128 128" "4 4"
    fi
    ;;
  ldtab)
    mkdir -p $R/ldtab
    for r in 1 2; do
      for n in 16382 16384; do
        step ldtab_${n}_$r 60 "$B/04_flashattn_bwd/bench" --mode sweep --dtype bf16 --d 64 --N $n --H 16 \
          --causal 1 --version 21 --reps 30 --naive-max-N 0 --csv $R/ldtab/04_${n}_$r.csv
      done
    done
    for n in 16382 16384; do
      step ncu_ldtab_$n 120 ncu --clock-control none -k regex:"bwd_tma" -c 1 --section SpeedOfLight \
        --section SchedulerStats "$B/04_flashattn_bwd/flash_bwd" --device cuda --dtype bf16 --version 21 --d 64 \
        --B 1 --H 16 --Nq $n --Nk $n --causal --out ''
    done
    ;;
  *) echo "device_04.sh: unknown part '$s' (see the header for the list)" >&2; exit 2 ;;
  esac
done
