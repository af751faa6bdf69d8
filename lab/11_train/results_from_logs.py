#!/usr/bin/env python3
"""Writes 11_train/results/2026-11-23_h100/ and 2026-11-23_h200-x2/ (the README's tables and loss
curves) from the train logs and CSVs under lab/11_train/measured/. Run from the repository root:
    python3 lab/11_train/results_from_logs.py
"""
import csv, os, re, shutil, statistics

M = "lab/11_train/measured"
R = "11_train/results"


def write(folder, name, head, body):
    os.makedirs(f"{R}/{folder}", exist_ok=True)
    with open(f"{R}/{folder}/{name}", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)


def run(csv_path, log_path, tokens_per_step, label, first=50):
    rows = list(csv.DictReader(open(csv_path)))
    tps = statistics.median(float(r["tokens_per_s"]) for r in rows if int(r["step"]) >= first)
    log = open(log_path, errors="replace").read()
    mfu = [float(x) for x in re.findall(r"MFU ([\d.]+)%", log)]
    fin = re.search(r"final: step (\d+)\s+train loss ([\d.]+)\s+eval loss ([\d.]+)", log)
    return [label, fin.group(1), f"{tps:.0f}", f"{tokens_per_step / tps * 1e3:.1f}",
            f"{statistics.mean(mfu[1:]):.1f}%" if len(mfu) > 1 else "-",
            f"{float(fin.group(2)):.3f}", f"{float(fin.group(3)):.3f}"]


HEAD = ["run", "steps", "tokens/s (median from step 50)", "step (ms)", "MFU", "final train loss",
        "final eval loss"]
body = [run(f"{M}/2026-11-23_h100/gpu1_{p}/train.csv", f"{M}/2026-11-23_h100/train1_{p}.log", 16 * 256,
            f"{p}, 1 GPU") for p in ("fp32", "bf16")]
write("2026-11-23_h100", "train_small.csv", HEAD, body)
shutil.copy(f"{M}/2026-11-23_h100/loss_gpu1.png", f"{R}/2026-11-23_h100/loss.png")

tags = [("dp", "--dp"), ("zero1", "--zero 1"), ("zero2", "--zero 2"), ("zero3", "--zero 3"),
        ("pp2schedule1f1bmicro", "--pp 2, 1F1B, m = 8"), ("pp2schedulezbh1micro", "--pp 2, ZB-H1, m = 8")]
body = [run(f"{M}/2026-11-23c_h200x2/gpu2_{t}.csv", f"{M}/2026-11-23c_h200x2/train2_{t}.log", 16 * 256,
            label) for t, label in tags]
write("2026-11-23_h200-x2", "train_small.csv", HEAD, body)
shutil.copy(f"{M}/2026-11-23c_h200x2/loss_gpu2.png", f"{R}/2026-11-23_h200-x2/loss.png")

body = []
for z in (1, 3):
    w = open(f"{M}/2026-11-23d_h200x2_ckpt_sum/ckxl_z{z}_write.log", errors="replace").read()
    r = open(f"{M}/2026-11-23d_h200x2_ckpt_sum/ckxl_z{z}_resume.log", errors="replace").read()
    c = re.search(r"checkpoint: \S+ \((\d+) ms: (\d+) ms host copy, (\d+) ms checksum, (\d+) ms write\+fsync; "
                  r"rank 0 wrote (\d+) bytes\)", w)
    s = re.search(r"resume: read (\d+) bytes in ([\d.]+) ms \(([\d.]+) GB/s\), checksums verified \(rank 0: "
                  r"([\d.]+) ms checking all \d+ files, ([\d.]+) ms loading", r)
    body.append([f"ZeRO-{z}", f"{int(c.group(1)) / 1e3:.1f}", f"{int(c.group(2)) / 1e3:.1f}",
                 f"{int(c.group(3)) / 1e3:.1f}", f"{int(c.group(4)) / 1e3:.1f}", f"{int(c.group(5)) / 1e9:.1f}",
                 f"{float(s.group(2)) / 1e3:.1f}", f"{float(s.group(4)) / 1e3:.1f}", f"{float(s.group(5)) / 1e3:.1f}"])
write("2026-11-23_h200-x2", "checkpoint_xl.csv",
      ["shards", "save (s)", "host copy", "checksum", "write+fsync", "rank 0 wrote (GB)", "resume (s)",
       "checking", "loading"], body)
