#!/usr/bin/env bash
# (Kept as it was run while the rungs lived in 04_flashattn_bwd/: their --version flags are now
# build/lab/04_flashattn_bwd/bench_rungs's, and test_04's version tests test_lab04's rungs/* tests.)
# The device runs of stage 04 (made through the `run` tool, kind nvidia-h100-x1):
#   04_flashattn_bwd/gpu_run.sh check   build, tests, compute-sanitizer, leaderboard point vs SDPA
#   04_flashattn_bwd/gpu_run.sh fa2     build, every test, compute-sanitizer on versions 6-8,
#                                       leaderboard with every version next to SDPA (fits 240 s)
#   04_flashattn_bwd/gpu_run.sh final   build, tests (every kernel version), compute-sanitizer on the
#                                       newer kernels, leaderboard with every version, then the
#                                       bench-04 sweep with the fastest version that passed its tests
#   04_flashattn_bwd/gpu_run.sh next    (fits 240 s) build, every test, leaderboard for versions
#                                       10, 14, 15 (and 10 again, for drift) next to SDPA flash and
#                                       cuDNN, compute-sanitizer memcheck and racecheck on versions
#                                       14 and 15 while time is left; a summary at the end
#   04_flashattn_bwd/gpu_run.sh wgmma   (fits 300 s) build, every test, a check of the wgmma
#                                       versions (WG_VERSIONS, default 16 19) against the CPU
#                                       reference, leaderboard for 10 and them (twice) next to SDPA,
#                                       compute-sanitizer on them (SAN_SPECS), ncu on NCU_VERSIONS
#                                       (default 19) while time is left
#   04_flashattn_bwd/gpu_run.sh profile ncu (clocks left alone) on one backward launch of each
#                                       version in NCU_VERSIONS (default 10 14 15) at the
#                                       leaderboard point: speed of light, warp stall reasons,
#                                       scheduler, pipes, memory; text reports ncu_v<N>.txt
# Logs and CSVs go to $OUT (the run tool's output folder), else results/.
set -uo pipefail
# The run tool returns at most a few files from $OUT: everything but log.txt (the caller's tee)
# goes to a scratch folder and leaves as ONE archive per mode, $OUT/fa4_<mode>.tgz (the second device run
# lost its test log and version table by writing 21 files there).
MODE=${1:-check}
FINAL_OUT=${OUT:-results}
OUT=$(mktemp -d /tmp/fa4_out.XXXXXX)
mkdir -p "$FINAL_OUT" results
pack() { cp results/04_* "$OUT/" 2>/dev/null; tar czf "$FINAL_OUT/fa4_$MODE.tgz" -C "$OUT" . ; }
trap pack EXIT
export BUILD=build
B=build/04_flashattn_bwd
T0=$(date +%s)
log() { echo "=== $(date -u +%T) (+$(( $(date +%s) - T0 ))s) $*"; }

log "nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
log "build"
timeout 170 make -j16 CRITERION_HOME=$PWD/.criterion build-04 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; }

sanitize() {  # $1 tool, $2 impl, $3 version, rest: shape flags
  local tool=$1 impl=$2 ver=$3; shift 3
  timeout 40 compute-sanitizer --tool "$tool" --error-exitcode 9 $B/flash_bwd --device cuda --B 1 --H 2 "$@" \
    --impl "$impl" --version "$ver" --check --out "" > "$OUT/san.log" 2>&1; local rc=$?
  echo "$tool $impl v$ver [$*]: rc $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check vs' "$OUT/san.log" | tr '\n' ' ')" \
    | tee -a "$OUT/sanitizer_summary.txt"
}

# One leaderboard process per version given (the summary lines also into lb_summary.txt).
# Without the do_bench row (DOBENCH_REP_MS=10000 adds it: ~11 s more per version, past the 30 s).
lb_versions() {
  for v in "$@"; do
    timeout 30 $B/bench --mode leaderboard --version "$v" --lb-reps "${LB_REPS:-30}" \
      --dobench-rep-ms "${DOBENCH_REP_MS:-0}" --csv "$OUT/04_leaderboard_v$v.csv" \
      > "$OUT/bench_v$v.log" 2>&1; echo "bench v$v rc $?"
    grep -E "^\| (forward|backward, flash_backward_cuda)" "$OUT/bench_v$v.log" | tee -a "$OUT/lb_summary.txt"
  done
}
# PyTorch SDPA (flash, cuDNN) at the leaderboard point.
lb_sdpa() {
  timeout 50 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
    --reps "${LB_REPS:-30}" --budget-ms 100000 --csv "$OUT/04_leaderboard_torch.csv" > "$OUT/torch.log" 2>&1
  echo "bench_torch rc $?"; cat "$OUT/04_leaderboard_torch.csv" 2>/dev/null
}
# compute-sanitizer on tool:version:d:Nq:Nk specs (causal, bf16) while left() allows.
sanitize_specs() {
  for spec in "$@"; do
    if [ "$(left)" -lt 45 ]; then echo "skipped $spec: $(left)s left" | tee -a "$OUT/sanitizer_summary.txt"; continue; fi
    IFS=: read -r tool ver dd nq nk <<< "$spec"
    sanitize "$tool" flash "$ver" --Nq "$nq" --Nk "$nk" --d "$dd" --causal --dtype bf16
  done
}
left() { echo $(( ${DEADLINE_S:-228} - ($(date +%s) - T0) )); }

case "${1:-check}" in
check)
  log "tests"
  timeout 150 $B/test_04 --jobs 16 2>&1 | tail -40
  log "compute-sanitizer"
  for args in "--Nq 150 --Nk 67 --d 64 --causal --dtype bf16" "--Nq 70 --Nk 130 --d 128 --dtype bf16 --causal" \
              "--Nq 33 --Nk 90 --d 16 --dtype bf16" "--Nq 100 --Nk 65 --d 32 --dtype f32 --causal"; do
    for impl in flash atomic; do
      for tool in memcheck racecheck; do sanitize $tool $impl 1 $args; done
    done
  done
  log "leaderboard point"
  timeout 60 $B/bench --mode leaderboard --lb-reps 50 --version 1 --csv "$OUT/04_leaderboard.csv"
  timeout 90 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
    --reps 50 --budget-ms 100000 --csv "$OUT/04_leaderboard_torch.csv"
  ;;
fa2)
  # Timings first (they are what the run is for), then every test, then the sanitizers.
  log "leaderboard (every version)"
  timeout 70 $B/bench --mode leaderboard --versions --version "${VERSION:-0}" --lb-reps "${LB_REPS:-20}" --csv "$OUT/04_leaderboard.csv"
  log "SDPA"
  timeout 50 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
    --reps "${LB_REPS:-20}" --budget-ms 100000 --csv "$OUT/04_leaderboard_torch.csv"
  log "tests"
  timeout "${TEST_S:-80}" $B/test_04 --jobs 16 > "$OUT/tests.log" 2>&1; echo "test_04 rc $?"
  grep -E "FAIL|CRASH|Synthesis|TIMEOUT|Assertion|Warning" "$OUT/tests.log" | head -40
  log "compute-sanitizer (single-pass versions)"
  for spec in ${SAN_SPECS:-"memcheck:12:64:150:267" "racecheck:12:64:150:267" "racecheck:10:64:150:267" "memcheck:11:64:201:133" "racecheck:13:32:201:133" "memcheck:13:16:77:300"}; do
    IFS=: read -r tool ver dd nq nk <<< "$spec"
    sanitize "$tool" flash "$ver" --Nq "$nq" --Nk "$nk" --d "$dd" --causal --dtype bf16
  done
  ;;
final)
  log "tests"
  timeout 100 $B/test_04 --jobs 16 > "$OUT/tests.log" 2>&1
  grep -E "FAIL|Synthesis" "$OUT/tests.log" | head -30
  ok=""
  for v in $(seq 1 13); do grep -qE "FAIL\].*version${v}([^0-9]|$)" "$OUT/tests.log" || ok="$ok $v"; done
  log "versions whose tests passed:$ok"
  log "compute-sanitizer (the kernels new since the first run)"
  sanitize memcheck atomic 4 --Nq 150 --Nk 67 --d 64 --causal --dtype bf16
  sanitize racecheck atomic 4 --Nq 150 --Nk 67 --d 64 --causal --dtype bf16
  sanitize memcheck flash 5 --Nq 150 --Nk 267 --d 64 --causal --dtype bf16
  sanitize racecheck flash 5 --Nq 150 --Nk 267 --d 64 --causal --dtype bf16
  log "leaderboard (every version)"
  timeout 60 $B/bench --mode leaderboard --versions --lb-reps "${LB_REPS:-40}" --csv results/04_leaderboard.csv
  best=$(python3 - "$ok" <<'PY'
import csv, sys
ok = set(sys.argv[1].split())
try:  # no version table (the bench died): version 1, the one tested in the first run
    rows = [r for r in csv.DictReader(open("results/04_leaderboard_versions.csv")) if r["version"] in ok]
    print(min(rows, key=lambda r: float(r["fwd+bwd ms"]))["version"] if rows else 1)
except Exception:
    print(1)
PY
)
  log "fastest version that passed: $best"
  timeout 60 python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --impls sdpa_flash,sdpa_cudnn \
    --reps "${LB_REPS:-40}" --budget-ms 100000 --csv results/04_leaderboard_torch.csv
  pack
  left=$(( ${DEADLINE_S:-228} - ($(date +%s) - T0) ))
  log "bench-04 sweep (version $best), ${left}s left"
  SKIP_LB=1 VERSION=$best BENCH_ARGS="--reps 10 --warmup 2 --budget-ms 250" \
    TORCH_ARGS="--reps 10 --warmup 2 --budget-ms 250" timeout "$left" 04_flashattn_bwd/bench.sh
  cp results/04_* "$OUT/" 2>/dev/null
  # The short summary last, so that it is inside the run tool's output tail.
  log "summary"
  grep -E "FAIL|Synthesis" "$OUT/tests.log" | head -20
  cat "$OUT/sanitizer_summary.txt"
  echo "versions that passed:$ok; fastest: $best"
  cat results/04_leaderboard.csv results/04_leaderboard_versions.csv results/04_leaderboard_torch.csv 2>/dev/null
  ;;
next)
  # Versions 14 and 15 (NOTES.md, "Versions 14-15"): tests first, then the timings, then the
  # sanitizers as long as the 240 s of the call leave room (each <= 40 s).
  log "tests (every version, 14 and 15 included)"
  timeout "${TEST_S:-90}" $B/test_04 --jobs 16 > "$OUT/tests.log" 2>&1; echo "test_04 rc $?" | tee "$OUT/tests_rc.txt"
  grep -E "FAIL|CRASH|Synthesis|TIMEOUT|Assertion" "$OUT/tests.log" | head -30
  log "leaderboard: versions 10, 14, 15, 10 (one process each; the second 10 shows the drift)"
  lb_versions 10 14 15 10
  log "SDPA flash and cuDNN"
  lb_sdpa
  pack
  log "compute-sanitizer (versions 14, 15; small ragged causal shapes), $(left)s left"
  sanitize_specs memcheck:14:64:150:267 racecheck:14:64:150:267 memcheck:15:64:150:267 racecheck:15:64:150:267 \
                 memcheck:15:32:201:133 racecheck:15:16:77:300
  pack
  log "summary"
  cat "$OUT/tests_rc.txt"; grep -E "Synthesis|FAIL" "$OUT/tests.log" | head -12
  cut -c1-170 "$OUT/sanitizer_summary.txt"
  cat "$OUT/lb_summary.txt"
  cat "$OUT/04_leaderboard_torch.csv" 2>/dev/null || tail -5 "$OUT/torch.log"
  ;;
wgmma)
  DEADLINE_S=${DEADLINE_S:-290}
  log "tests (every version, 16-19 included)"
  timeout "${TEST_S:-90}" $B/test_04 --jobs 16 > "$OUT/tests.log" 2>&1; echo "test_04 rc $?" | tee "$OUT/tests_rc.txt"
  grep -E "FAIL|CRASH|Synthesis|TIMEOUT|Assertion" "$OUT/tests.log" | head -30
  log "check of versions ${WG_VERSIONS:-16 19} against the CPU reference (errors per gradient)"
  for v in ${WG_VERSIONS:-16 19}; do
    for args in "--Nq 150 --Nk 267 --causal" "--Nq 201 --Nk 133"; do
      echo "v$v $args: $(timeout 30 $B/flash_bwd --device cuda --B 1 --H 2 --d 64 --dtype bf16 $args --version $v --check --out "" 2>&1 | grep -E "check|error" | head -2)"
    done
  done
  log "leaderboard: versions 10 ${WG_VERSIONS:-16 19} ${WG_VERSIONS:-16 19} (one process each)"
  # shellcheck disable=SC2086
  lb_versions 10 ${WG_VERSIONS:-16 19} ${WG_VERSIONS:-16 19}
  log "SDPA flash and cuDNN"
  lb_sdpa
  pack
  log "compute-sanitizer (wgmma versions), $(left)s left"
  # shellcheck disable=SC2086
  sanitize_specs ${SAN_SPECS:-memcheck:16:64:150:267 racecheck:16:64:150:267 memcheck:17:64:77:300 racecheck:17:64:201:133 \
                 memcheck:19:64:150:267 racecheck:19:64:150:267 memcheck:19:64:77:300 racecheck:19:64:201:133}
  pack
  if [ "$(left)" -gt 40 ]; then NCU_VERSIONS=${NCU_VERSIONS:-19} bash "$0" profile-only; fi
  log "summary"
  cat "$OUT/tests_rc.txt"; grep -E "Synthesis|FAIL" "$OUT/tests.log" | head -12
  cut -c1-170 "$OUT/sanitizer_summary.txt"
  cat "$OUT/lb_summary.txt"
  ;;
profile|profile-only)
  for v in ${NCU_VERSIONS:-10 14 15}; do
    log "ncu version $v"
    timeout 120 ncu --clock-control none -k regex:"bwd_(fa2|wgmma)_kernel" -c 1 --print-details all \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section WarpStateStats \
      --section Occupancy --section LaunchStats --section InstructionStats \
      $B/flash_bwd --device cuda --B 1 --H 16 --Nq 16384 --Nk 16384 --d 64 --causal --dtype bf16 \
      --version "$v" --out "" > "$OUT/ncu_v$v.txt" 2>&1; echo "ncu v$v rc $?"
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Shared Memory|L1/TEX Hit|Stall|Pipe" "$OUT/ncu_v$v.txt" | head -40
  done
  pack
  ;;
esac
log "done"
