#!/usr/bin/env python3
"""Writes 06_ddp/results/2026-11-23_h200-x2/ (the README's tables and timelines) from the raw rows
under lab/06_ddp/measured/. Run from the repository root: python3 lab/06_ddp/results_from_logs.py
"""
import csv, os, shutil

M = "lab/06_ddp/measured"
OUT = "06_ddp/results/2026-11-23_h200-x2"
os.makedirs(OUT, exist_ok=True)


def write(name, head, body):
    with open(os.path.join(OUT, name), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)


ORDER = {"none": 0, "naive": 1, "flat": 2, "overlap": 3, "bucketed": 4}
LABEL = {"none": "one GPU (no communication)"}


def bucket_key(b):
    return 0 if not b else (float(b.split("+")[0]) + 1000 * ("+" in b) if "+" in b else float(b))


def variants(path, precision):
    rows = [r for r in csv.DictReader(open(path)) if r["precision"] == precision]
    rows.sort(key=lambda r: (ORDER[r["variant"]], bucket_key(r["bucket_mb"])))
    return [[LABEL.get(r["variant"], r["variant"]), r["bucket_mb"], r["n_buckets"],
             f"{float(r['step_ms']):.1f}", f"{float(r['comm_ms']):.1f}" if r["variant"] != "none" else "",
             f"{float(r['exposed_ms']):.2f}" if r["variant"] != "none" else "",
             r["overhead_pct"] if r["variant"] != "none" else ""] for r in rows]


head = ["variant", "bucket (MiB)", "all-reduces", "step (ms)", "comm (ms)", "exposed (ms)", "over one GPU"]
write("ddp_xl_fp32.csv", head, variants(f"{M}/2026-11-23b_h200x2/ours.csv", "fp32"))
write("ddp_xl_bf16.csv", head, variants(f"{M}/2026-11-23_h200x2/ours.csv", "bf16"))

NAMES = {"none": "one GPU", "naive": "naive (all_reduce per parameter after the backward)",
         "ddp": "DistributedDataParallel (first bucket 1 MB, then 25 MB)"}
body = []
for path in (f"{M}/2026-11-23b_h200x2/torch.csv", f"{M}/2026-11-23_h200x2/torch.csv"):
    for r in csv.DictReader(open(path)):
        if r["precision"] == "bf16" or path.endswith("23b_h200x2/torch.csv"):
            body.append([r["precision"], NAMES[r["variant"]], f"{float(r['step_ms']):.1f}",
                         r["overhead_pct"] if r["variant"] != "none" else "", r["peak_GiB"]])
write("torch_ddp_xl.csv", ["precision", "PyTorch", "step (ms)", "over one GPU", "peak (GiB)"], body)
for v in ("flat", "overlap", "bucketed_100MiB"):
    shutil.copy(f"{M}/2026-11-23b_h200x2/timeline/ddp_xl_{v}.png", f"{OUT}/timeline_{v}.png")
