#!/usr/bin/env python3
"""Joins stage 03's benchmark CSVs (ours: bench --sweep flash / naive; PyTorch: bench_torch.py)
into one Markdown report with ratios, and draws the plots with gnuplot if it is installed.
Standard library only.

    python3 03_flashattn_fwd/bench_report.py --ours results/03_flash.csv --torch results/03_torch.csv \\
        --naive results/03_naive.csv --out results/03_report.md [--plots DIR]
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys

TORCH_IMPLS = ["sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "naive", "naive_compile"]


def read(path):
    if not path or not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", default="results/03_flash.csv")
    ap.add_argument("--torch", default="results/03_torch.csv")
    ap.add_argument("--naive", default="results/03_naive.csv")
    ap.add_argument("--out", default="results/03_report.md")
    ap.add_argument("--plots", default="results", help="directory for the .dat and .png files")
    a = ap.parse_args()
    ours, torch, naive = read(a.ours), read(a.torch), read(a.naive)
    if not ours and not naive:
        # Nothing measured (the sweeps failed or never ran): no report rather than an empty one.
        print(f"bench_report.py: error: no rows in {a.ours} or {a.naive}: nothing to report", file=sys.stderr)
        sys.exit(2)
    tor = {}
    for r in torch:
        tor[(r["dtype"], int(r["d"]), int(r["N"]), r["impl"])] = r["ms"]

    lines = []
    if naive:
        lines.append("### Naive attention (ours, cuBLAS; batch 8, 1 head, fp32, non-causal)\n")
        lines.append("| d | N | forward ms | backward ms | memory before backward (MiB) | status |")
        lines.append("|---:|---:|---:|---:|---:|---|")
        for r in naive:
            lines.append(f"| {r['d']} | {r['N']} | {r['fwd ms']} | {r['bwd ms']} | {r['mem before bwd (MiB)']} | {r['status']} |")
        lines.append("")
    if ours:
        lines.append("### Attention forward, batch 1, 1 head, causal: ms (TFLOP/s = 2 N^2 d / time)\n")
        hdr = ["dtype", "d", "N", "ours flash", "TFLOP/s", "ours naive"] + TORCH_IMPLS + ["flash / ours"]
        lines.append("| " + " | ".join(hdr) + " |")
        lines.append("|" + "---|" * 3 + "---:|" * (len(hdr) - 3))
        for r in ours:
            dt, d, n = r["dtype"], int(r["d"]), int(r["N"])
            cells = [dt, str(d), str(n), r["flash ms"], r["flash TFLOP/s"], r["naive ms"]]
            for impl in TORCH_IMPLS:
                cells.append(tor.get((dt, d, n, impl), "-"))
            f, o = num(tor.get((dt, d, n, "sdpa_flash"))), num(r["flash ms"])
            cells.append(f"{f / o:.2f}x" if f and o else "-")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    # Plots: TFLOP/s against N, one panel per (dtype, d) in one PNG per dtype.
    if not ours:
        print(f"(no rows in {a.ours}: no plots)")
        return
    if not shutil.which("gnuplot"):
        print("(gnuplot not found: no plots; scripts/setup.sh installs it)")
        return
    os.makedirs(a.plots, exist_ok=True)
    for dt in sorted({r["dtype"] for r in ours}):
        dims = sorted({int(r["d"]) for r in ours if r["dtype"] == dt})
        series = ["ours"] + TORCH_IMPLS
        for d in dims:
            with open(os.path.join(a.plots, f"03_flash_{dt}_d{d}.dat"), "w") as f:
                f.write("# N " + " ".join(series) + "  (TFLOP/s; nan = not run)\n")
                for r in ours:
                    if r["dtype"] != dt or int(r["d"]) != d:
                        continue
                    n = int(r["N"])
                    flops = 2.0 * n * n * d
                    vals = [num(r["flash ms"])] + [num(tor.get((dt, d, n, i))) for i in TORCH_IMPLS]
                    f.write(f"{n} " + " ".join(f"{flops / (v * 1e-3) / 1e12:.2f}" if v else "nan" for v in vals) + "\n")
        png = os.path.join(a.plots, f"03_flash_{dt}.png")
        script = [f"set terminal pngcairo size 1400,900 font ',10' noenhanced", f"set output '{png}'",
                  f"set multiplot layout 2,2 title 'attention forward, causal, batch 1, 1 head, {dt}: TFLOP/s vs N'",
                  "set logscale x 2", "set key top left", "set grid", "set xlabel 'N'", "set ylabel 'TFLOP/s'"]
        for d in dims:
            dat = os.path.join(a.plots, f"03_flash_{dt}_d{d}.dat")
            plots = [f"'{dat}' using 1:{i + 2} with linespoints title '{s}'" for i, s in enumerate(series)]
            script += [f"set title 'd = {d}'", "plot " + ", ".join(plots)]
        script.append("unset multiplot")
        subprocess.run(["gnuplot"], input="\n".join(script), text=True, check=False)
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
