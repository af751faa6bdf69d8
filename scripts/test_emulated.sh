#!/usr/bin/env bash
# `make test-emulated`: the distributed tests of stages 05-08 with their jobs on emulated nodes
# (common/comm.h "Nodes"): scripts/mpirun.sh takes MPIRUN_EMULATE_NODES=2 as --emulate-nodes 2
# for every job of an even number of ranks (2 ranks: two nodes of one; 4 ranks: two of two;
# other sizes run as one node), so MPI's traffic between the halves goes over TCP on lo.
#   05: every operation of the communicator on 1-4 ranks, MPI's collectives with the shared-
#       memory path off, a dead rank, the benchmark's own check; and stage 05's emulated_mpi
#       tests (the node report, refusals, a hostfile, one deadline line per emulated node);
#   06: the trainer at 2-4 ranks equals one process, every DDP variant; the toy DDP at 2 ranks;
#   07: every ZeRO level equals DDP, ZeRO-2 on units, sharded construction, at 2-4 ranks;
#   08: the pipeline trainer (every schedule at p = 2-4, pipeline x data parallel at 4 ranks);
#   09: every tensor-parallel layer at 1-4 ranks, the TP/SP trainer against one process.
#   and the tests that lay out their own nodes: the hierarchical all-reduce (05), HSDP (07).
# Left out on purpose: tests that count lines of a job's whole output (the node report adds
# lines; a deadline line comes once per node, not once per job) and the shared-memory
# all-reduce's tests (the path is off when a job spans nodes).
# --gpu: the same on GPUs over NCCL (`make test-emulated-gpu`; 2 GPUs or more): each emulated
# node gets its own NCCL host id, so NCCL moves the traffic between them over its socket
# transport on lo (mpirun.sh --emulate-nodes): the communicator and its groups, the hierarchical
# all-reduce, DDP's every variant, every ZeRO level (bf16 ZeRO-3 and the course's FSDP test
# included) and the pipeline, each against the one-GPU run it is tested against without emulation.
# Without 2 GPUs it says so in one line and exits 0 (the CPU suite above is what CI runs).
# Prints each binary's summary and a total "N passed, N failed"; non-zero exit if any failed.
set -u
cd "$(dirname "$0")/.."
B=${BUILD:-build}
pass=0; fail=0; bad=0
suite() {  # MPIRUN_EMULATE_NODES value, binary, Criterion filter
  local emu=$1 bin=$2 filter=$3 log
  log=$(MPIRUN_EMULATE_NODES=$emu "$B/$bin" --filter "$filter" --jobs "${TEST_JOBS:-2}" 2>&1)
  local rc=$? syn
  syn=$(grep -E '^\[====\] Synthesis' <<<"$log" | tail -1)
  local p f c
  p=$(sed -nE 's/.*Passing: ([0-9]+).*/\1/p' <<<"$syn"); f=$(sed -nE 's/.*Failing: ([0-9]+).*/\1/p' <<<"$syn")
  c=$(sed -nE 's/.*Crashing: ([0-9]+).*/\1/p' <<<"$syn")
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0} + ${c:-0}))
  if [ "$rc" -ne 0 ] || [ -z "$syn" ] || [ "${p:-0}" -eq 0 ]; then
    bad=1; echo "✗ $bin $filter (emulated nodes: ${emu:-set by the tests})"; grep -E '^\[(FAIL|----)\]' <<<"$log" | head -60
  else
    echo "✓ $bin $filter: ${p} passed (emulated nodes: ${emu:-set by the tests})"
  fi
}
t0=$(date +%s)
if [ "${1:-}" = "--gpu" ]; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  if [ "${ngpu:-0}" -lt 2 ]; then
    echo "test-emulated-gpu: skipped: needs 2 GPUs, this machine has ${ngpu:-0} (the CPU suite is make test-emulated)"; exit 0
  fi
  export TEST_JOBS=1  # one job at a time: each takes both GPUs
  suite 2 05_collectives/test_05 'collectives_nccl/@(every_operation_*|a_dead_rank_*|bench_gpu_rows_check)'
  suite 2 05_collectives/test_05 'groups_nccl/split_and_grid_on_gpus'
  suite "" 05_collectives/test_05 'emulated_nccl/*'
  suite 2 06_ddp/test_06 'ddp_train_nccl/*'
  suite 2 06_ddp/test_06 'ddp_gpu/*'
  suite 2 07_zero/test_07 'zero_train_nccl/@(every_level|zero2_on_units|zero3_alone|checkpoint_block)*'
  suite 2 07_zero/test_07 'fsdp*nccl/*'
  suite 2 08_pipeline/test_08 'pp_train_nccl/@(gpipe|zbh1|forward_only)*'
  echo "$pass passed, $fail failed ($(( $(date +%s) - t0 )) s)"
  [ "$bad" -eq 0 ] && [ "$fail" -eq 0 ]; exit
elif [ -n "${1:-}" ]; then
  echo "test_emulated.sh: error: unknown argument '$1'; allowed: --gpu" >&2; exit 2
fi
suite "" 05_collectives/test_05 'emulated_mpi/*'
suite "" 05_collectives/test_05 'hier_mpi/*'
suite 2 05_collectives/test_05 'collectives_mpi/@(every_operation_*|shm_off_*|a_dead_rank_*|bench_runs_*)'
suite 2 06_ddp/test_06 'ddp_train_mpi/@(naive|flat|overlap|bucketed)*'
suite 2 06_ddp/test_06 'ddp_2_ranks/*'
suite 2 07_zero/test_07 'zero_train_mpi/@(every_level_equals_ddp|zero2_on_units_equals_ddp|sharded_construction_equals)*'
suite 2 08_pipeline/test_08 'pp_train_mpi/*'
suite "" 07_zero/test_07 'zero_train_mpi/hsdp_*'
suite 2 09_tensor/test_09 'tp_@(layers/*|train/@(tp_*|dp_*|a_*|sp_*|collectives_*|activations_*))'
suite 2 09_tensor/test_09 'tp_zero/*'
echo "$pass passed, $fail failed ($(( $(date +%s) - t0 )) s)"
[ "$bad" -eq 0 ] && [ "$fail" -eq 0 ]
