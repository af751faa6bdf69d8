#!/usr/bin/env bash
# make bench-09: the tensor group's traffic per training step, counted by tp_train on the CPU
# (MPI backend) for TP 1, 2, 4, without sequence parallelism, with it, and with it keeping the
# gathered norm outputs: collectives per step and the bytes a ring sends from each rank, beside
# the parameters and the saved activations each rank holds. The counts are
# exact (they do not depend on the machine); the step time on a shared CPU is in the CSV but
# not in the README's table.
# Env: BUILD (build dir); MODEL (tiny), CONTEXT (16), BATCH (2); OUT (09_tensor/results/<date>_cpu).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-tiny}
CONTEXT=${CONTEXT:-16}
BATCH=${BATCH:-2}
OUT=${OUT:-09_tensor/results/$(date +%F)_cpu}
mkdir -p "$OUT"
csv="$OUT/comm.csv"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
status=0
for tp in 1 2 4; do
  for flags in "" "--sp" "--sp --sp-keep-gathered"; do
    MPIRUN_TIMEOUT=300 scripts/mpirun.sh "$tp" "$BUILD/09_tensor/tp_train" --model "$MODEL" --context "$CONTEXT" \
      --batch "$BATCH" --steps 3 --warmup 1 --csv "$raw" $flags > /dev/null || status=1
  done
done
# The table's columns: the counts and bytes (formatted as they should read).
python3 - "$raw" "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
with open(sys.argv[2], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["model", "context", "batch", "tp", "sp", "params per rank", "activation KiB per rank", "all-reduces",
                "all-gathers", "reduce-scatters", "ring MiB per rank", "step ms"])
    for r in rows:
        w.writerow([r["model"], r["context"], r["batch"], r["tp"], r["sp"], r["params_per_rank"],
                    f'{int(r["acts_bytes_per_rank"]) / 1024:.1f}', r["all_reduces"], r["all_gathers"],
                    r["reduce_scatters"], f'{float(r["ring_mib_per_rank"]):.4f}', f'{float(r["step_ms"]):.2f}'])
PY
echo "wrote $csv"
python3 scripts/report.py 09_tensor/README.md || status=1
exit $status
