#!/usr/bin/env python3
"""Joins stage 04's two benchmark CSVs (ours: results/04_sweep.csv from `bench`, PyTorch:
results/04_torch.csv from bench_torch.py) into one Markdown table of forward+backward times with
ratios, and one data file per dtype for the plot (results/04_fwdbwd_<dtype>_d<d>.dat), then draws
results/04_fwdbwd.png with gnuplot if it is installed. Standard library only.

    python3 04_flashattn_bwd/compare.py [--ours results/04_sweep.csv] [--torch results/04_torch.csv]
"""
import argparse
import csv
import os
import shutil
import subprocess


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", default="results/04_sweep.csv")
    ap.add_argument("--torch", default="results/04_torch.csv")
    ap.add_argument("--out", default="results/04_compare.md")
    ap.add_argument("--plot-d", default="64", help="head dim drawn in the plot")
    a = ap.parse_args()
    ours = {}
    with open(a.ours) as f:
        for r in csv.DictReader(f):
            ours[(r["dtype"], int(r["d"]), int(r["N"]))] = r
    torch_rows = {}
    if os.path.exists(a.torch):
        with open(a.torch) as f:
            for r in csv.DictReader(f):
                torch_rows[(r["dtype"], int(r["d"]), int(r["N"]), r["impl"])] = r
    lines = ["| dtype | d | N | ours fwd | ours bwd | ours fwd+bwd | SDPA flash fwd+bwd | SDPA cuDNN fwd+bwd | "
             "naive (torch eager) fwd+bwd | ours / flash | ours / cuDNN |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    series = {}
    for key in sorted(ours, key=lambda k: (k[0], k[1], k[2])):
        dt, d, n = key
        r = ours[key]
        fb = num(r["fwd+bwd ms"])
        t = {impl: torch_rows.get((dt, d, n, impl), {}).get("fwdbwd_ms", "-")
             for impl in ("sdpa_flash", "sdpa_cudnn", "naive")}
        fl, cu = num(t["sdpa_flash"]), num(t["sdpa_cudnn"])
        rf = f"{fb / fl:.2f}" if fb and fl else "-"
        rc = f"{fb / cu:.2f}" if fb and cu else "-"
        lines.append(f"| {dt} | {d} | {n} | {r['fwd ms']} | {r['bwd ms']} | {r['fwd+bwd ms']} | {t['sdpa_flash']} | "
                     f"{t['sdpa_cudnn']} | {t['naive']} | {rf} | {rc} |")
        series.setdefault((dt, d), []).append((n, fb, fl, cu, num(t["naive"]), num(r.get("naive fwd+bwd ms"))))
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".tmp", "w") as f:
        f.write(text)
    os.replace(a.out + ".tmp", a.out)

    dats = []
    for (dt, d), pts in series.items():
        path = f"results/04_fwdbwd_{dt}_d{d}.dat"
        with open(path, "w") as f:
            f.write("# N ours sdpa_flash sdpa_cudnn torch_naive ours_naive_cublas (ms; NaN = none)\n")
            for p in pts:
                f.write(" ".join(str(p[0]) if i == 0 else ("NaN" if v is None else f"{v}") for i, v in enumerate(p)) + "\n")
        if str(d) == a.plot_d:
            dats.append((dt, path))
    if dats and shutil.which("gnuplot"):
        plots = []
        for dt, path in dats:
            for col, name in ((2, "ours"), (3, "SDPA flash"), (4, "SDPA cuDNN"), (5, "naive (torch)"),
                              (6, "naive (ours, cuBLAS)")):
                plots.append(f"'{path}' using 1:{col} with linespoints title '{name}, {dt}'")
        script = (f"set terminal pngcairo size 900,600; set output 'results/04_fwdbwd.png';"
                  f"set logscale xy 2; set xlabel 'N (sequence length)'; set ylabel 'forward+backward ms';"
                  f"set title 'attention forward+backward, batch 1, 16 heads, causal, d {a.plot_d}';"
                  f"set key left top; set grid; plot " + ", ".join(plots))
        subprocess.run(["gnuplot", "-e", script], check=False)
        print("wrote results/04_fwdbwd.png")


if __name__ == "__main__":
    main()
