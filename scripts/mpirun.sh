#!/usr/bin/env bash
# Runs an MPI program the way every test, benchmark and demo of stages 05-08 does:
#   scripts/mpirun.sh [--hostfile FILE] [-H host,host] [--emulate-nodes K] N prog [args...]
# - --hostfile / -H: the machines (passed to OpenMPI as they are); every machine must hold the
#   same build at the same path, and the ranks inherit this shell's environment (-x below);
# - --emulate-nodes K: the job believes its N ranks are on K nodes, blocks of N/K ranks
#   (CS336_EMULATE_NODES=K, common/comm.h "Nodes"; K must divide N), and MPI's traffic goes
#   over TCP on the loopback interface (the byte transfer layer `tcp,self`, interface lo), so
#   that messages between emulated nodes pass the network stack; for NCCL, sockets on lo and no
#   InfiniBand (each emulated node gets its own NCCL_HOSTID in the communicator).
#   MPIRUN_EMULATE_NODES=K in the environment is the same for every job whose size K divides
#   (others run as one node): the way `make test-emulated` runs existing tests emulated;
# - bounded: `timeout` ends a job that outlives MPIRUN_TIMEOUT seconds (default 300), and
#   kills it 10 s later if it ignores that (no rank may hang a test or a benchmark);
# - more ranks than cores allowed (--oversubscribe), no core binding (ranks share 2-core CI);
# - --quiet: OpenMPI's own banners (a rank's non-zero exit, an abort) are left out, so that a
#   refused input is the program's one line; the exit status is kept;
# - as root, OpenMPI's refusal to run is lifted (containers and CI run as root);
# - NCCL_NVLS_ENABLE=0 (NVLink multicast off: the GPU machines require it) and COMM_TIMEOUT
#   are passed to every rank.
set -u
usage="usage: scripts/mpirun.sh [--hostfile FILE] [-H host,host] [--emulate-nodes K] N prog [args...]"
hosts=()
emulate=""
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile)
      [ $# -ge 2 ] && [ -r "$2" ] || { echo "mpirun.sh: error: --hostfile ${2:-}: no such readable file; give a file of host names" >&2; exit 2; }
      hosts+=(--hostfile "$2"); shift 2 ;;
    -H|--host)
      [ $# -ge 2 ] && [ -n "$2" ] || { echo "mpirun.sh: error: $1 needs a host list; give host,host,..." >&2; exit 2; }
      hosts+=(-H "$2"); shift 2 ;;
    --emulate-nodes)
      emulate=${2:-}; [ $# -ge 2 ] && shift 2 || shift ;;
    --emulate-nodes=*) emulate=${1#*=}; shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then echo "$usage" >&2; exit 2; fi
n=$1; shift
if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then echo "mpirun.sh: error: $n ranks: give a whole number of ranks >= 1" >&2; exit 2; fi
if [ -n "$emulate" ]; then
  if ! [[ "$emulate" =~ ^[1-9][0-9]*$ ]] || [ $((n % emulate)) -ne 0 ]; then
    echo "mpirun.sh: error: --emulate-nodes $emulate: $n ranks do not split into $emulate equal nodes; give a node count that divides $n" >&2
    exit 2
  fi
elif [ -n "${MPIRUN_EMULATE_NODES:-}" ] && [[ "$MPIRUN_EMULATE_NODES" =~ ^[1-9][0-9]*$ ]] &&
     [ "$n" -gt 1 ] && [ $((n % MPIRUN_EMULATE_NODES)) -eq 0 ]; then
  emulate=$MPIRUN_EMULATE_NODES
fi
net=()
# NCCL's network settings reach every rank when set (across machines: the interface that joins them).
for v in NCCL_SOCKET_IFNAME NCCL_IB_DISABLE; do [ -n "${!v:-}" ] && net+=(-x "$v"); done
if [ -n "$emulate" ]; then
  export CS336_EMULATE_NODES=$emulate
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_IB_DISABLE=${NCCL_IB_DISABLE:-1}
  net=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x CS336_EMULATE_NODES
       -x NCCL_SOCKET_IFNAME -x NCCL_IB_DISABLE)
fi
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
exec timeout -k 10 "${MPIRUN_TIMEOUT:-300}" mpirun --quiet --oversubscribe --bind-to none ${hosts[@]+"${hosts[@]}"} \
  -x NCCL_NVLS_ENABLE -x COMM_TIMEOUT -x OMP_NUM_THREADS -x OMPI_MCA_btl_vader_single_copy_mechanism ${net[@]+"${net[@]}"} \
  -np "$n" "$@"
