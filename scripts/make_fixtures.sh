#!/usr/bin/env bash
# Regenerates every PyTorch fixture set: runs tests/fixtures/gen_*.py with python3 (needs torch
# and numpy; the CPU build of torch is enough — fixtures are computed in float64 and stored as
# float32). Each script writes tests/fixtures/<set>/ and its README.md.
#   scripts/make_fixtures.sh            all sets
#   scripts/make_fixtures.sh attention  only gen_attention.py
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, numpy" 2>/dev/null || { echo "make_fixtures: needs python3 with torch and numpy (pip install torch numpy)" >&2; exit 2; }
sets=("$@")
if [ ${#sets[@]} -eq 0 ]; then
  for f in tests/fixtures/gen_*.py; do s=${f##*/gen_}; sets+=("${s%.py}"); done
fi
for s in "${sets[@]}"; do
  f=tests/fixtures/gen_$s.py
  [ -f "$f" ] || { echo "make_fixtures: no $f (sets: $(ls tests/fixtures/gen_*.py | sed 's#.*/gen_##; s#\.py##' | tr '\n' ' '))" >&2; exit 2; }
  echo "== $f"
  python3 "$f"
done
du -sh tests/fixtures
