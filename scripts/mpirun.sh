#!/usr/bin/env bash
# Runs an MPI program the way every test, benchmark and demo of stages 05-08 does:
#   scripts/mpirun.sh N prog [args...]
# - bounded: `timeout` ends a job that outlives MPIRUN_TIMEOUT seconds (default 300), and
#   kills it 10 s later if it ignores that (no rank may hang a test or a benchmark);
# - more ranks than cores allowed (--oversubscribe), no core binding (ranks share 2-core CI);
# - --quiet: OpenMPI's own banners (a rank's non-zero exit, an abort) are left out, so that a
#   refused input is the program's one line; the exit status is kept;
# - as root, OpenMPI's refusal to run is lifted (containers and CI run as root);
# - NCCL_NVLS_ENABLE=0 (NVLink multicast off: the GPU machines require it) and COMM_TIMEOUT
#   are passed to every rank.
set -u
if [ $# -lt 2 ]; then echo "usage: scripts/mpirun.sh N prog [args...]" >&2; exit 2; fi
n=$1; shift
command -v mpirun >/dev/null 2>&1 || { echo "mpirun.sh: mpirun not found (scripts/setup.sh installs OpenMPI)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export COMM_TIMEOUT=${COMM_TIMEOUT:-60}
# One OpenMP thread a rank unless asked: ranks already share the cores (the CPU model uses OpenMP).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Containers often forbid the cross-memory attach that OpenMPI's shared-memory transport
# tries first; copying through shared memory always works.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
# Descriptors the caller left open (a test runner's own sockets, say) are not the job's business:
# close them, so that no MPI daemon holds one after the caller is done with it.
for fd in /proc/$$/fd/*; do
  fd=${fd##*/}
  [ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-" 2>/dev/null
done
exec timeout -k 10 "${MPIRUN_TIMEOUT:-300}" mpirun --quiet --oversubscribe --bind-to none \
  -x NCCL_NVLS_ENABLE -x COMM_TIMEOUT -x OMP_NUM_THREADS -x OMPI_MCA_btl_vader_single_copy_mechanism \
  -np "$n" "$@"
