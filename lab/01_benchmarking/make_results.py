#!/usr/bin/env python3
"""Writes the CSVs of 01_benchmarking/results/ that come straight from raw logs in measured/.

    python3 lab/01_benchmarking/make_results.py      (from the repository root)

sizes.csv (2026-11-23_h100/sizes), compare.csv,
warmup.csv and accumulation.csv (full_sweep_2026-11-22). The other results files (kernels.csv,
attention.csv, memory.csv) hold numbers read off the profiler logs and memory_phases CSVs; they
were written by hand from the tables in NOTES.md, which name their sources.
"""
import csv
import os
import re

M = "lab/01_benchmarking/measured"
R = "01_benchmarking/results"


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write(path, head, body):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)
    print(path, len(body), "rows")


def pm(mean, std, nd=2):
    return f"{float(mean):.{nd}f} ± {float(std):.{nd}f}"


# benchmarking_script (b): every size, context 512, batch 4, 5 warm-up + 10 timed steps.
sz = rows(f"{M}/2026-11-23_h100/sizes/sizes.csv")
body = []
for size in ["small", "medium", "large", "xl", "2.7B"]:
    get = {(r["mode"], r["precision"]): r for r in sz if r["model"] == size}
    f32f, f32b = get[("forward", "fp32")], get[("forward-backward", "fp32")]
    b16f, b16b = get[("forward", "bf16")], get[("forward-backward", "bf16")]
    body.append([size,
                 pm(f32f["step_ms"], f32f["step_std"]), pm(f32b["step_ms"], f32b["step_std"]),
                 pm(b16f["step_ms"], b16f["step_std"]), pm(b16b["step_ms"], b16b["step_std"]),
                 f"{float(f32b['backward_ms']) / float(f32b['forward_ms']):.2f}",
                 f"{float(b16b['backward_ms']) / float(b16b['forward_ms']):.2f}",
                 f"{float(f32b['tflops']):.1f}", f"{float(b16b['tflops']):.1f}",
                 f"{float(f32b['step_ms']) / float(b16b['step_ms']):.1f}x"])
write(f"{R}/2026-11-23_h100/sizes.csv",
      ["size", "fwd fp32", "fwd+bwd fp32", "fwd bf16", "fwd+bwd bf16", "bwd/fwd fp32", "bwd/fwd bf16",
       "TFLOP/s fp32", "TFLOP/s bf16", "bf16 speed-up"], body)

# Ours beside PyTorch, same GPU, same call: 3 warm-up + 10 timed steps each.
ours = {(r["model"], r["mode"], r["precision"]): r for r in rows(f"{M}/full_sweep_2026-11-22/compare_ours.csv")}
body = []
for t in rows(f"{M}/full_sweep_2026-11-22/compare_torch.csv"):
    prec = "bf16" if t["variant"].startswith("bf16") else "fp32"
    o = ours[(t["size"], t["mode"], prec)]
    name = {"fp32": "eager fp32", "bf16": "eager autocast bf16", "bf16-compile": "compile + SDPA bf16"}[t["variant"]]
    body.append([t["size"], t["mode"], name, pm(o["step_ms"], o["step_std"]), f"{float(t['median_ms']):.2f}",
                 f"{float(o['step_ms']) / float(t['median_ms']):.2f}", f"{float(o['peak_gib']):.2f}",
                 f"{float(t['peak_mib']) / 1024:.2f}"])
write(f"{R}/2026-11-22_h100/compare.csv",
      ["size", "mode", "PyTorch", "ours ms", "torch ms (median)", "ours/torch", "ours GiB", "torch GiB"], body)


def md_rows(path):
    out = []
    for line in open(path):
        if line.startswith("|") and not re.match(r"^\|[-: |]+\|$", line.strip()):
            out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out[0], out[1:]


# Warm-up 0/1/2/5 before 10 timed steps: small, context 512, fp32, forward+backward.
head, body = md_rows(f"{M}/full_sweep_2026-11-22/warmup.md")
i = {h: k for k, h in enumerate(head)}
write(f"{R}/2026-11-22_h100/warmup.csv", ["warm-up", "forward ms", "backward ms", "step ms"],
      [[r[i["warmup"]], pm(r[i["forward_ms"]], r[i["forward_std"]]), pm(r[i["backward_ms"]], r[i["backward_std"]]),
        pm(r[i["step_ms"]], r[i["step_std"]])] for r in body])

# The accumulation demo: CPU (gcc's _Float16) and GPU sums.
head, body = md_rows(f"{M}/full_sweep_2026-11-22/accumulation.md")
i = {h: k for k, h in enumerate(head)}
write(f"{R}/2026-11-22_h100/accumulation.csv", ["loop", "accumulator", "addend", "CPU sum", "GPU sum", "error"],
      [[r[i["loop"]], r[i["accumulator"]], r[i["addend"]].replace("->", "→"), r[i["CPU sum"]], r[i["GPU sum"]],
        r[i["GPU error"]]] for r in body])
