#!/usr/bin/env python3
"""10_context/README.md's GPU ring table from ring_bench's CSV (one row per rank and run): per
configuration the step (the slowest rank's whole call), each rank's kernel time, the balance
(fastest / slowest rank's kernels) and the communication left exposed on the busiest rank
(the others also wait for it).

    lab/10_context/ring_table.py lab/device/measured/2026-11-27_h200-x2-newstages/ring_bench.csv \
        10_context/results/2026-11-27_h200-x2/ring_bench.csv
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402


def main(src, out):
    runs = {}
    for r in csv.DictReader(open(src)):
        runs.setdefault((int(r["N"]), r["split"]), []).append(r)
    head = ["N", "split", "step (ms)", "kernels per rank (ms)", "balance", "exposed on the busiest rank (ms)"]
    rows = []
    for (N, split), rs in sorted(runs.items()):
        rs.sort(key=lambda r: int(r["rank"]))
        comp = [float(r["compute_ms"]) for r in rs]
        slow = max(rs, key=lambda r: float(r["total_ms"]))
        busy = max(rs, key=lambda r: float(r["compute_ms"]))
        rows.append([N, split, f"{float(slow['total_ms']):.1f}", " / ".join(f"{c:.1f}" for c in comp),
                     f"{min(comp) / max(comp):.2f}", f"{float(busy['exposed_ms']):.1f}"])
    write_table(out, head, rows)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: lab/10_context/ring_table.py RING_BENCH.csv OUT.csv")
    main(*sys.argv[1:])
