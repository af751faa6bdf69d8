#!/usr/bin/env python3
"""Stage 05's hierarchical all-reduce table from an allreduce_bench CSV (the out-of-place rows).

    lab/05_collectives/hier_table.py lab/device/measured/2026-11-27_h200-x4-newstages/hier4.csv \
        05_collectives/results/2026-11-27_h200-x4/hier_emulated.csv
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402

WHAT = {
    "nccl": ("NCCL's own all-reduce across both nodes", "NCCL's choice"),
    "ring-nccl": ("the flat ring over all 4 ranks", "1.5 S, each hop in turn; 2 of the 4 hops cross nodes"),
    "hier-nccl": ("reduce-scatter in the node, all-reduce across, all-gather",
                  "1.0 S within the node, 0.5 S across (counted = formula)"),
}
SIZES = [(1 << 20, "1 MiB"), (10 << 20, "10 MiB"), (100 << 20, "100 MiB"), (1 << 30, "1 GiB")]


def main(src, out):
    rows = list(csv.DictReader(open(src)))
    head = ["backend", "what it is"] + [f"{n}: ms (busbw GB/s)" for _, n in SIZES] + ["bytes a rank sends, S = size"]
    table = []
    for be, (what, sends) in WHAT.items():
        cells = []
        for size, _ in SIZES:
            r = [x for x in rows if x["backend"] == be and int(x["size"]) == size]
            if len(r) != 1 or r[0]["wrong"] != "0":
                raise SystemExit(f"hier_table.py: error: {src}: no single clean {be} row at {size} bytes")
            cells.append(f"{float(r[0]['oop_us']) / 1e3:.1f} ({float(r[0]['oop_busbw_GBs']):.2f})")
        table.append([be, what] + cells + [sends])
    write_table(out, head, table)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: lab/05_collectives/hier_table.py BENCH.csv OUT.csv")
    main(*sys.argv[1:])
