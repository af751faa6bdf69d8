#!/usr/bin/env python3
"""05_collectives/README.md's alternate-ring table from allreduce_bench's CSVs (one per rank
count, backends ring-mpi,alt-ring-mpi): per rank count and size the out-of-place time of the ring
and of the alternate ring, their ratio, and the ratio of the bytes each sends, (n-1)S against
2(n-1)/n S = n/2.

    lab/05_collectives/alt_ring_table.py OUT.csv BENCH.csv [BENCH.csv ...]
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402


def main(out, *paths):
    t = {}
    for p in paths:
        for r in csv.DictReader(open(p)):
            if r["op"] == "allreduce":
                t[(int(r["ranks"]), int(r["size"]), r["backend"])] = float(r["oop_us"]) / 1e3
    rows = []
    for (n, size) in sorted({(k[0], k[1]) for k in t}):
        ring, alt = t.get((n, size, "ring-mpi")), t.get((n, size, "alt-ring-mpi"))
        if ring is None or alt is None:
            continue
        rows.append([n, f"{size / 2**20:g} MiB", f"{ring:.2f}", f"{alt:.2f}", f"{alt / ring:.1f}", f"{n / 2:g}"])
    write_table(out, ["ranks", "size", "ring (ms)", "alternate ring (ms)", "alternate / ring", "bytes sent, alternate / ring = n/2"], rows)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: lab/05_collectives/alt_ring_table.py OUT.csv BENCH.csv [BENCH.csv ...]")
    main(*sys.argv[1:])
