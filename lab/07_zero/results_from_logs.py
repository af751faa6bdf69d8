#!/usr/bin/env python3
"""Writes 07_zero/results/2026-11-23_h200-x2/ (the README's tables) from the logs and rows under
lab/07_zero/measured/. Run from the repository root: python3 lab/07_zero/results_from_logs.py
"""
import csv, glob, os, re

M = "lab/07_zero/measured"
OUT = "07_zero/results/2026-11-23_h200-x2"
os.makedirs(OUT, exist_ok=True)
GIB = 1024.0


def write(name, head, body):
    with open(os.path.join(OUT, name), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)


def log(path):
    """(parameters, step ms, memory row of rank 0) from a zero_train log."""
    text = open(path).read()
    psi = int(re.search(r"GPU NVIDIA H200, (\d+) parameters", text).group(1))
    step = re.search(r"done: ([\d.]+) ms a step", text)
    mem = phase = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) in (8, 10) and cells[1] == "0" and re.match(r"^[\d.]+$", cells[2]):
            if len(cells) == 10 and mem is None:
                mem = cells
            if len(cells) == 8 and phase is None:
                phase = cells
    log.phase = phase  # after init, step 1 before / at the optimizer step, ... (MiB, rank 0)
    log.setup = float(re.search(r"setup peak \(rank 0, device\): ([\d.]+) MiB", text).group(1))
    return psi, float(step.group(1)) if step else None, mem


LEVEL = {"ddp": "DDP (stage 06, bucketed 25 MiB)", "zero1": "ZeRO-1", "zero2": "ZeRO-2",
         "zero3": "ZeRO-3"}
body, ddp_ms = [], None
for k, path in [(k, f"{M}/2026-11-23c_h200x2/zero_xl_phase_z{k}.log") for k in range(4)] + \
               [("2b", f"{M}/2026-11-23c_h200x2/zero_xl_z2_block.log"),
                ("3b", f"{M}/2026-11-23c_h200x2/zero_xl_z3_block.log")]:
    psi, ms, m = log(path)
    name = LEVEL[m[0]] + (", --checkpoint block" if str(k).endswith("b") else "")
    ddp_ms = ddp_ms or ms
    over = "" if m[0] == "ddp" else f"{(ms / ddp_ms - 1) * 100:+.1f}%"
    g = lambda i: f"{float(m[i]) / GIB:.2f}"
    ph = log.phase
    body.append([name, f"{ms:.1f}", over, g(2), g(3), g(4), g(5), g(6),
                 f"{log.setup / GIB:.2f}", f"{float(ph[3]) / GIB:.2f}" if ph else "-", g(7), g(8),
                 m[9].split(" = ")[0].replace("Psi", "Ψ")])
write("zero_xl.csv", ["level", "step (ms)", "over DDP", "params", "grads", "optim", "acts",
                      "workspace", "after init", "before the optimizer step", "peak (at the step)",
                      "p+g+o", "formula"], body)

# PyTorch's counterparts, beside ours from the same call (all levels in one run)
ours = {r["run"]: r for r in csv.DictReader(open(f"{M}/2026-11-23_h200x2/ours.csv"))}
names = {"none": ("one GPU (no communication)", None), "ddp": ("DistributedDataParallel", "ddp"),
         "zero": ("DDP + ZeroRedundancyOptimizer", "course"), "fsdp": ("FSDP2, fully_shard per block", "zero3")}
ourname = {"ddp": "DDP", "course": "the course's sharded optimizer", "zero3": "ZeRO-3"}
body = []
for r in csv.DictReader(open(f"{M}/2026-11-23_h200x2/torch.csv")):
    n, o = names[r["variant"]]
    body.append([n, f"{float(r['step_ms']):.1f}", r["peak_GiB"], r["steady_peak_GiB"],
                 ourname.get(o, ""), f"{float(ours[o]['step_ms']):.1f}" if o else "",
                 f"{int(ours[o]['peak_bytes_rank0']) / 2**30:.2f}" if o else ""])
body.insert(3, ["", "", "", "", "ZeRO-1", f"{float(ours['zero1']['step_ms']):.1f}",
                f"{int(ours['zero1']['peak_bytes_rank0']) / 2**30:.2f}"])
write("torch_zero_xl.csv", ["PyTorch", "step (ms)", "peak (GiB)", "steady peak (GiB)", "ours",
                            "ours step (ms)", "ours peak (GiB)"], body)

# the memory wall: the largest depth that trains per level, and the next one tried
body = []
for k, lv in enumerate(("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")):
    runs = []
    for p in glob.glob(f"{M}/2026-11-23c_h200x2/wall_z{k}_L*.log"):
        L = int(re.search(r"_L(\d+)\.log", p).group(1))
        psi, ms, m = log(p)
        runs.append((L, psi, ms, m))
    runs.sort()
    ok = [r for r in runs if r[2] is not None]
    bad = [r for r in runs if r[2] is None and r[0] > ok[-1][0]]
    L, psi, ms, m = ok[-1]
    body.append([lv, L, f"{psi / 1e9:.2f} B", f"{float(m[7]) / GIB:.1f}", f"{ms:.1f}",
                 bad[0][0], f"{bad[0][1] / 1e9:.2f} B"])
write("memory_wall.csv", ["level", "largest L that trains", "Ψ there", "peak (GiB/rank)",
                          "step (ms)", "next L tried (out of memory)", "Ψ at the next L"], body)
