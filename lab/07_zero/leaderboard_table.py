#!/usr/bin/env python3
"""07_zero/ACCOUNTING.md's leaderboard table from one call of 07_zero/leaderboard.sh (or the lab's
device script): ours from zero_train's log (the median step and the counting allocator's peaks
by phase, the largest rank's), PyTorch's from bench_torch_zero.py's CSV (the median step, the
peak of torch.cuda.max_memory_allocated over the whole run, the largest rank's). Beside each the
accounting's prediction for ours (accounting --lm 8b, in GiB here).

    lab/07_zero/leaderboard_table.py OURS.log TORCH.csv PREDICTED_GB OUT.csv
"""
import csv
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402

TOKENS = 2 * 32768  # the step's global batch


def ours(log):
    text = open(log).read()
    step = float(re.search(r"zero3 +done: ([0-9.]+) ms a step", text).group(1))
    phases = []  # per rank: after init, fwd+bwd, optimizer step, later peak (MiB)
    for m in re.finditer(r"^\| zero3 +\| +\d+ \| +([0-9.]+) \| +([0-9.]+) \| +([0-9.]+) \| +[0-9.]+ \| +([0-9.]+) \|", text, re.M):
        phases.append([float(x) for x in m.groups()])
    if not phases:
        raise SystemExit(f"{log}: no peaks-by-phase rows")
    worst = [max(p[i] for p in phases) / 1024 for i in range(4)]
    return step, worst


def main(ours_log, torch_csv, predicted_gb, out):
    step, (init, fb, opt, later) = ours(ours_log)
    t = [r for r in csv.DictReader(open(torch_csv)) if r["model"] == "8b"][-1]
    ts, tpeak = float(t["step_ms"]), float(t["peak_GiB"])
    pred = float(predicted_gb) * 1e9 / 2**30
    head = ["", "step (ms)", "tokens/s", "peak after init (GiB)", "peak in forward + backward (GiB)",
            "peak in the optimizer step (GiB)", "peak of the step (GiB)"]
    rows = [["ours: ZeRO-3, bf16 gathers, fp32 masters, block ckpt, flash, head chunks of 4096", f"{step:.1f}",
             f"{TOKENS / step * 1e3:.0f}", f"{init:.1f}", f"{fb:.1f}", f"{opt:.1f}", f"{max(init, fb, opt, later):.1f}"],
            ["accounting --lm 8b (predicted for ours)", "", "", "", "", "", f"{pred:.1f}"],
            ["PyTorch: FSDP2 + MixedPrecisionPolicy(bf16), block ckpt, SDPA, head chunks of 4096", f"{ts:.1f}",
             f"{TOKENS / ts * 1e3:.0f}", "", "", "", f"{tpeak:.1f}"]]
    write_table(out, head, rows)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit("usage: lab/07_zero/leaderboard_table.py OURS.log TORCH.csv PREDICTED_GB OUT.csv")
    main(*sys.argv[1:])
