#!/usr/bin/env python3
"""Writes 08_pipeline/results/2026-11-23_h200-x2/ (the README's tables and timelines) from the
pp_train logs under lab/08_pipeline/measured/. Run from the repository root:
    python3 lab/08_pipeline/results_from_logs.py
"""
import csv, os, re, shutil

M = "lab/08_pipeline/measured"
OUT = "08_pipeline/results/2026-11-23_h200-x2"
os.makedirs(OUT, exist_ok=True)
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved (v 2)", "zbh1": "ZB-H1"}


def write(name, head, body):
    with open(os.path.join(OUT, name), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)


def path(s, m):
    if m == 8:
        return f"{M}/2026-11-23b_h200x2/logs/pp_tl_{s}.log"
    if m == 16:
        return f"{M}/2026-11-23c_h200x2/pp_{s}_m16.log"
    return f"{M}/2026-11-23b_h200x2/logs/pp_{s}_m{m}.log"


body = []
for s in NAMES:
    for m in (1, 2, 4, 8, 16, 32):
        p = path(s, m)
        if not os.path.exists(p):
            continue
        t = open(p).read()
        batch = int(re.search(r"global batch (\d+)", t).group(1))
        context = int(re.search(r"context (\d+)", t).group(1))
        pl = re.search(r"measured bubble ([\d.]+) .*slowest step ([\d.]+) ms\); formula (\S+); "
                       r"simulated .*? ([\d.]+) rendezvous, ([\d.]+) eager", t)
        bubble, step, formula, eager = pl.group(1), float(pl.group(2)), pl.group(3), pl.group(5)
        peaks = re.findall(r"peak GPU memory ([\d.]+) GiB", t)
        body.append([NAMES[s], m, "-" if formula == "nan" else formula, bubble, eager, f"{step:.1f}",
                     f"{batch * context / step * 1e3:.0f}", " / ".join(f"{float(x):.1f}" for x in peaks)])
write("bubble.csv", ["schedule", "m", "formula", "measured bubble", "simulated", "step (ms)",
                     "tokens/s", "peak GiB rank 0 / 1"], body)

# pipelining against data parallelism on the same GPUs and global batch (16 sequences of 512)
body = []
label = {"ddp": "DDP (each GPU the whole model, 8 sequences)", "zero1": "ZeRO-1", "zero3": "ZeRO-3"}
for r in csv.DictReader(open(f"{M}/2026-11-23b_h200x2/vs_zero.csv")):
    ms = float(r["step_ms"])
    body.append([label[r["run"]], f"{ms:.1f}", f"{16 * 512 / ms * 1e3:.0f}",
                 f"{int(r['peak_bytes_rank0']) / 2**30:.1f}"])
for row in [x for x in open(os.path.join(OUT, "bubble.csv")).read().splitlines()[1:]]:
    c = next(csv.reader([row]))
    if c[1] == "8" and c[0] != "GPipe":
        body.append([f"pipeline {c[0]}, m = 8", c[5], c[6], max(c[7].split(" / "), key=float)])
write("vs_dp.csv", ["how the 2 GPUs share the work", "step (ms)", "tokens/s", "peak GiB per rank"], body)

for s in ("1f1b", "zbh1"):
    for kind in ("measured", "simulated"):
        shutil.copy(f"{M}/2026-11-23b_h200x2/gpu_{s}_{kind}.png", f"{OUT}/timeline_{s}_{kind}.png")
