#!/usr/bin/env python3
"""10_context/README.md's comparison table: per (N, d), one GPU (ring_bench at P 1: stage 03/04's
kernels alone), our ring at P 2 with each split, PyTorch's context_parallel at P 2 (SDPA, its own
round-robin balancing), each the forward + backward step of the slowest rank, and the speed-up of
the balanced ring over one GPU. Inputs: ring_bench CSVs (one row per rank and run) and
bench_torch.py's CSV, from one or more device calls.

    lab/10_context/cp_torch_table.py OUT.csv TORCH.csv RING_BENCH.csv [RING_BENCH.csv ...]
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402


def main(out, torch_csv, *ring_csvs):
    step = {}  # (N, d, P, split) -> the slowest rank's whole call (ms)
    for path in ring_csvs:
        for r in csv.DictReader(open(path)):
            k = (int(r["N"]), int(r["d"]), int(r["P"]), r["split"] if int(r["P"]) > 1 else "one")
            step[k] = max(step.get(k, 0.0), float(r["total_ms"]))
    torch = {(int(r["N"]), int(r["d"])): float(r["total_ms"]) for r in csv.DictReader(open(torch_csv))
             if int(r["P"]) == 2}
    head = ["N", "d", "one GPU (ms)", "P 2 plain (ms)", "P 2 zigzag (ms)", "zigzag speed-up over one GPU",
            "PyTorch context_parallel P 2 (ms)", "zigzag / PyTorch"]
    rows = []
    for (N, d) in sorted({(k[0], k[1]) for k in step}):
        one, pl, zz, pt = (step.get((N, d, 1, "one")), step.get((N, d, 2, "plain")), step.get((N, d, 2, "zigzag")),
                           torch.get((N, d)))
        f = lambda x: f"{x:.1f}" if x else ""  # noqa: E731
        rows.append([N, d, f(one), f(pl), f(zz), f"{one / zz:.2f}x" if one and zz else "", f(pt),
                     f"{zz / pt:.2f}" if zz and pt else ""])
    write_table(out, head, rows)


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit("usage: lab/10_context/cp_torch_table.py OUT.csv TORCH.csv RING_BENCH.csv [RING_BENCH.csv ...]")
    main(*sys.argv[1:])
