#!/usr/bin/env bash
# The CPU ring's error against float64 as a function of P: ring_check at P = 1..4, causal,
# both splits, N 257, d 32, BH 2, written as 10_context/results/<date>_cpu/errors.csv.
#   lab/10_context/errors_csv.sh 10_context/results/2026-11-27_cpu/errors.csv
set -eu
cd "$(dirname "$0")/../.."
out=${1:?give the CSV to write}
B=${BUILD:-build}
echo "P,split,merges,bound,O,L,dQ,dK,dV" > "$out"
for split in plain zigzag; do
  for P in 1 2 3 4; do
    line=$(OMP_NUM_THREADS=1 MPIRUN_TIMEOUT=120 scripts/mpirun.sh $P $B/10_context/ring_check --N 257 --d 32 --BH 2 --causal 1 --split $split --comm-timeout 30)
    echo "$line" >&2
    python3 - "$line" >> "$out" <<'PY'
import re, sys
s = sys.argv[1]
P = re.search(r" P (\d+)", s).group(1); split = re.search(r"split (\w+)", s).group(1)
m = re.search(r"merges (\d+)", s).group(1); b = re.search(r"bound ([0-9.e+-]+)", s).group(1)
f64 = s.split("vs float64")[1].split(";")[0]
vals = dict(re.findall(r"(\w+) ([0-9.e+-]+)", f64))
print(",".join([P, split, m, b] + [vals[k] for k in ("O", "L", "dQ", "dK", "dV")]))
PY
  done
done
