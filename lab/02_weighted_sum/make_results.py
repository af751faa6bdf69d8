#!/usr/bin/env python3
"""Writes 02_weighted_sum/results/2026-11-22_h100/{bandwidth,tiles}.csv from the raw logs here.

    python3 lab/02_weighted_sum/make_results.py      (from the repository root)

bandwidth.csv: measured/table.md (bench_merge.py's merge of cuda.csv and torch.csv: ours and
PyTorch, D = 1024, ROWS 256 ... 2M, f32 and bf16). tiles.csv: the tile sweep of
measured/bench_h100.log at ROWS = 1M, % of the copy bandwidth per D_TILE at the default
ROWS_TILE (forward 8, backward auto).
"""
import csv
import re

M = "lab/02_weighted_sum/measured"
R = "02_weighted_sum/results/2026-11-22_h100"


def md_tables(path):
    """Every Markdown table of a file, as (head, rows)."""
    tables, cur = [], None
    for line in open(path):
        line = line.strip()
        if not line.startswith("|"):
            cur = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.match(r"^\|[-: |]+\|$", line):
            continue
        if cur is None:
            cur = (cells, [])
            tables.append(cur)
        else:
            cur[1].append(cells)
    return tables


def write(path, head, body):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)
    print(path, len(body), "rows")


head, body = md_tables(f"{M}/table.md")[0]
write(f"{R}/bandwidth.csv", [h.replace("ROWS x D", "ROWS × D") for h in head],
      [[c.replace(" x ", " × ") for c in r] for r in body])

sweep = [t for t in md_tables(f"{M}/bench_h100.log") if "D_TILE" in t[0]][0]
i = {h: k for k, h in enumerate(sweep[0])}
pct = {}
for r in sweep[1]:
    default = r[i["ROWS_TILE"]] == "8" if r[i["kernel"]] == "forward" else r[i["ROWS_TILE"]].startswith("auto")
    if default:
        pct[(r[i["kernel"]], r[i["dtype"]], r[i["D_TILE"]])] = r[i["%copy"]].replace("%", " %")
body = []
for kernel in ["forward", "backward"]:
    for dtype in ["f32", "bf16"]:
        body.append([kernel, dtype] + [pct[(kernel, dtype, d)] for d in ["128", "256", "512", "1024"]]
                    + [{"f32": "512", "bf16": "1024"}[dtype] if kernel == "forward" else "256"])
write(f"{R}/tiles.csv", ["kernel", "dtype", "D_TILE 128", "256", "512", "1024", "default D_TILE"], body)
