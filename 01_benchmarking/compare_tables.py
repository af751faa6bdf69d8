#!/usr/bin/env python3
"""Joins our benchmark's rows with bench_torch.py's rows (same size, context, batch, mode,
precision) and prints the ratio table of compare.sh: ours / PyTorch, so below 1 means we
are faster. Both sides' times are the mean over the timed steps (our CSV's step_ms; the
torch CSV's mean_ms), measured with CUDA events in the same run on the same GPU.

    compare_tables.py OURS.csv TORCH.csv
"""
import csv
import sys


def load(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"compare_tables.py: error: cannot read {path}: {e.strerror}")


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def fmt(x, spec=".2f"):
    return format(x, spec) if x is not None else "-"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare_tables.py OURS.csv TORCH.csv")
    ours, torch_rows = load(sys.argv[1]), load(sys.argv[2])
    tkey = {}
    for r in torch_rows:
        tkey[(r["size"], r["context"], r["batch"], r["mode"], r["variant"])] = r
    gpu = next((r.get("gpu") for r in ours if r.get("gpu")), "?")
    tv = next((r.get("torch") for r in torch_rows if r.get("torch")), "?")
    print(f"### Ours vs PyTorch {tv} on {gpu} (mean ms per step; ratio = ours / torch)\n")
    cols = ["size", "context", "mode", "precision", "attention", "ours ms", "torch eager ms", "ours/eager",
            "torch compiled ms", "ours/compiled", "ours peak GiB", "torch peak GiB"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for r in ours:
        k = (r["model"], r["context"], r["batch"], r["mode"])
        t = tkey.get(k + (r["precision"],))
        tc = tkey.get(k + ("bf16-compile",)) if r["precision"] == "bf16" else None
        o_ms = num(r.get("step_ms")) if r.get("status") == "ok" else None
        t_ms = num(t.get("mean_ms")) if t and t.get("status") == "ok" else None
        c_ms = num(tc.get("mean_ms")) if tc and tc.get("status") == "ok" else None
        t_peak = num(t.get("peak_mib")) / 1024 if t and num(t.get("peak_mib")) is not None else None
        cells = [r["model"], r["context"], r["mode"], r["precision"], r.get("attention", "naive"),
                 fmt(o_ms) if o_ms is not None else r.get("status", "-"),
                 fmt(t_ms) if t_ms is not None else (t.get("status", "-") if t else "-"),
                 fmt(o_ms / t_ms) if o_ms and t_ms else "-",
                 fmt(c_ms), fmt(o_ms / c_ms) if o_ms and c_ms else "-",
                 r.get("peak_gib") or "-", fmt(t_peak, ".3f")]
        print("| " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
