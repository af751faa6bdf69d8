#!/usr/bin/env bash
# The whole GPU suite on whatever GPUs this machine has (make test-gpu): every test binary of
# every stage, CPU tests included, each under its own time limit, one line per binary and a
# closing "N passed, N failed, N skipped".
#
#   scripts/test_gpu.sh [--limit S] [--multi "BIN ..."] BIN ...
#
# One-GPU binaries are spread over the GPUs: one lane per GPU, each lane running its share of the
# binaries one after another with CUDA_VISIBLE_DEVICES set to its GPU. Binaries named in --multi
# (the stages whose tests start jobs of several ranks, one GPU each) then run one at a time with
# every GPU visible. NCCL's NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as on every machine
# the workbook runs on. A binary that runs past its limit (default 420 s, TEST_GPU_LIMIT) is
# ended and counted as failed. Logs of each lane: $TEST_GPU_LOGS (default results/test_gpu/).
# Without a GPU this says so in one line and exits 2: `make test` runs every CPU test.
set -u
cd "$(dirname "$0")/.."
limit=${TEST_GPU_LIMIT:-420}
multi=""
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --limit) limit=$2; shift 2 ;;
    --multi) multi=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test_gpu: error: unknown option '$1' (--limit S, --multi \"BIN ...\")" >&2; exit 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
case "$limit" in ''|*[!0-9]*) echo "test_gpu: error: --limit '$limit' is not a whole number of seconds" >&2; exit 2 ;; esac
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${ngpu:-0}" -eq 0 ]; then
  echo "test_gpu: error: no CUDA GPU here (nvidia-smi lists none); the GPU suite needs one (make test runs every CPU test)" >&2
  exit 2
fi
[ ${#bins[@]} -gt 0 ] || { echo "test_gpu: error: no test binaries given (make test-gpu names them)" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0 BUILD=${BUILD:-build} TEST_LIMIT=$limit
logs=${TEST_GPU_LOGS:-results/test_gpu}
mkdir -p "$logs"
rm -f "$logs"/lane*.log "$logs"/multi.log
# Criterion forks one process per test: share the cores between the lanes.
cores=$(nproc)
single=(); multis=()
for b in "${bins[@]}"; do
  if [[ " $multi " == *" $b "* ]]; then multis+=("$b"); else single+=("$b"); fi
done
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed -E 's/^ *([0-9]+) /\1 × /' | paste -sd, -)
echo "test-gpu: $ngpu GPU(s) ($gpus); ${#single[@]} one-GPU binaries in $ngpu lane(s), then ${#multis[@]} on all GPUs; limit $limit s a binary"
t0=$(date +%s)
pids=()
for ((g = 0; g < ngpu; g++)); do
  share=()
  for ((i = g; i < ${#single[@]}; i += ngpu)); do share+=("${single[$i]}"); done
  [ ${#share[@]} -gt 0 ] || continue
  ( CUDA_VISIBLE_DEVICES=$g TEST_JOBS=$(( cores / ngpu > 1 ? cores / ngpu : 1 )) \
      scripts/run_tests.sh "${share[@]}" > "$logs/lane$g.log" 2>&1 ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
if [ ${#multis[@]} -gt 0 ]; then
  TEST_JOBS=$cores scripts/run_tests.sh "${multis[@]}" > "$logs/multi.log" 2>&1
fi
tp=0; tf=0; ts=0
for f in "$logs"/lane*.log "$logs"/multi.log; do
  [ -f "$f" ] || continue
  # everything but the lane's own total line; then add its total to ours
  sed '$d' "$f"
  read -r p _ f2 _ s _ < <(tail -n 1 "$f")
  tp=$((tp + ${p:-0})); tf=$((tf + ${f2:-0})); ts=$((ts + ${s:-0}))
done
echo "test-gpu: $(( $(date +%s) - t0 )) s on $ngpu GPU(s); logs in $logs/"
echo "$tp passed, $tf failed, $ts skipped"
[ "$tf" -eq 0 ]
