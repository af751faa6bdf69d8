#!/usr/bin/env bash
# Runs Criterion test binaries and prints one summary line per binary and a total:
#   scripts/run_tests.sh [--grade FILE] [--none "why no tests"] BIN...
# The last line is "N passed, N failed, N skipped"; the exit status is non-zero if any test
# failed or crashed. Binaries run from the repository root (fixtures are found relative to it).
# With --grade, also writes a per-stage score table (Markdown) to FILE. TEST_LIMIT=S (seconds)
# ends a binary that runs longer (timeout -k 10), and it counts as failed with the reason.
set -u
cd "$(dirname "$0")/.."
grade=""
bins=()
while [ $# -gt 0 ]; do
  case "$1" in
    --grade) grade=$2; shift 2 ;;
    --none) echo "$2"; shift 2 ;;
    *) bins+=("$1"); shift ;;
  esac
done
export BUILD=${BUILD:-build}
tp=0; tf=0; ts=0; bad=0
rows=()
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for b in "${bins[@]}"; do
  name=$(basename "$b")
  if [ ! -x "$b" ]; then
    echo "✗ $name: not built ($b)"; bad=1; rows+=("| $name | 0 | 0 | 0 | not built |"); continue
  fi
  json="$tmp/$name.json"
  # --jobs: Criterion forks one process per test; 2 at a time keeps a 2-core CI machine responsive
  t0=$(date +%s)
  if [ -n "${TEST_LIMIT:-}" ]; then
    timeout -k 10 "$TEST_LIMIT" "$b" --jobs "${TEST_JOBS:-$(nproc)}" --json="$json" > "$tmp/$name.log" 2>&1
  else
    "$b" --jobs "${TEST_JOBS:-$(nproc)}" --json="$json" > "$tmp/$name.log" 2>&1
  fi
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [ -n "${TEST_LIMIT:-}" ] && { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; }; then
    echo "✗ $name: ended at its limit of ${TEST_LIMIT} s (TEST_LIMIT) — log follows"
    grep -v '^\[----\]\s*$' "$tmp/$name.log" | tail -n 30
    bad=1; tf=$((tf + 1)); rows+=("| $name | 0 | 1 | 0 | over its time limit |"); continue
  fi
  read -r p f e s < <(python3 - "$json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(d.get("passed", 0), d.get("failed", 0), d.get("errored", 0), d.get("skipped", 0))
except Exception:
    print(0, 0, 1, 0)
PY
)
  f=$((f + e))
  if [ "$rc" -ne 0 ] || [ "$f" -ne 0 ]; then
    bad=1
    echo "✗ $name: $p passed, $f failed, $s skipped (exit $rc, ${secs} s) — log follows"
    grep -v '^\[----\]\s*$' "$tmp/$name.log" | tail -n 60
  else
    echo "✓ $name: $p passed, $f failed, $s skipped (${secs} s)"
  fi
  # every skipped test says why, once
  python3 - "$json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
why = {}
for suite in d.get("test_suites", []):
    for t in suite.get("tests", []):
        if t.get("status") == "SKIPPED":
            m = (t.get("messages") or ["(no reason given)"])[0]
            why.setdefault(m, []).append(suite["name"] + "::" + t["name"])
for m, tests in why.items():
    print(f"    skipped {len(tests)}: {m}")
PY
  tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s))
  total=$((p + f))
  score=$([ "$total" -gt 0 ] && echo "$((100 * p / total))%" || echo "-")
  rows+=("| $name | $p | $f | $s | $score |")
done
if [ -n "$grade" ]; then
  mkdir -p "$(dirname "$grade")"
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  {
    echo "# Grade report ($(date -u +%Y-%m-%dT%H:%MZ), ${gpu:-no GPU: GPU tests skipped})"
    echo
    echo "| test binary | passed | failed | skipped | score (passed / run) |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
  } > "$grade.tmp" && mv "$grade.tmp" "$grade"
  echo "grade report: $grade"
fi
echo "$tp passed, $tf failed, $ts skipped"
exit $bad
