#!/usr/bin/env python3
"""Stage 05's report: merges results/05_collectives/*.csv (ours: gpu_np*.csv, cpu_np*.csv;
PyTorch: torch.csv) into the course's table (backend x size x process count, busbw and time)
and draws busbw against size per backend and process count (gnuplot, if present).

    python3 05_collectives/report.py results/05_collectives
Writes report.md and busbw.png there.
"""
import csv
import glob
import os
import shutil
import subprocess
import sys

COURSE = {1 << 20: "1 MiB", 10 << 20: "10 MiB", 100 << 20: "100 MiB", 1 << 30: "1 GiB"}


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "results/05_collectives"
    series = {}  # (impl, ranks) -> {size: (us, busbw)}
    for path in sorted(glob.glob(os.path.join(d, "*_np*.csv"))):
        for r in csv.DictReader(open(path)):
            if r["op"] != "allreduce":
                continue
            series.setdefault((r["backend"], int(r["ranks"])), {})[int(r["size"])] = (
                float(r["oop_us"]), float(r["oop_busbw_GBs"]))
    tp = os.path.join(d, "torch.csv")
    if os.path.exists(tp):
        for r in csv.DictReader(open(tp)):
            series.setdefault((r["impl"], int(r["ranks"])), {})[int(r["size"])] = (
                float(r["us"]), float(r["busbw_GBs"]))
    if not series:
        print(f"report.py: no results in {d}: run make bench-05 first", file=sys.stderr)
        return 1
    lines = ["# Stage 05: all-reduce, fp32, out of place (median, slowest rank)", "",
             "busbw in GB/s (time in ms) at the course's sizes:", "",
             "| backend | ranks | " + " | ".join(COURSE.values()) + " |",
             "|---|---|" + "---|" * len(COURSE)]
    for (impl, n), pts in sorted(series.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cells = []
        for s in COURSE:
            cells.append(f"{pts[s][1]:.2f} ({pts[s][0] / 1000:.3f})" if s in pts else "—")
        lines.append(f"| {impl} | {n} | " + " | ".join(cells) + " |")
    # the ring's share of the library's busbw, where both ran
    ratios = []
    for (impl, n), pts in series.items():
        # the ring over MPI against MPI's own MPI_Allreduce (mpi-lib) where it ran; "mpi" is the
        # communicator's shared-memory path, not a message-passing library call
        lib = {"ring-nccl": "nccl", "ring-mpi": "mpi-lib" if ("mpi-lib", n) in series else "mpi"}.get(impl)
        if lib and (lib, n) in series:
            for s in COURSE:
                if s in pts and s in series[(lib, n)]:
                    ratios.append(f"| {impl} / {lib} | {n} | {COURSE[s]} | {100 * pts[s][1] / series[(lib, n)][s][1]:.0f}% |")
    if ratios:
        lines += ["", "The ring against the library (busbw ratio):", "",
                  "| ratio | ranks | size | % |", "|---|---|---|---|"] + ratios
    open(os.path.join(d, "report.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if shutil.which("gnuplot"):
        dat = os.path.join(d, "busbw.dat")
        with open(dat, "w") as f:
            keys = sorted(series)
            for k in keys:
                f.write(f'"{k[0]} np{k[1]}"\n')
                for s in sorted(series[k]):
                    f.write(f"{s} {series[k][s][1]}\n")
                f.write("\n\n")
        png = os.path.join(d, "busbw.png")
        gp = (f"set terminal png size 1100,650; set output '{png}'; set logscale x 2; set logscale y 10;"
              "set xlabel 'size S (bytes)'; set ylabel 'busbw (GB/s)'; set key outside right;"
              "set xtics ('1K' 1024, '32K' 32768, '1M' 1048576, '10M' 10485760, '100M' 104857600, '1G' 1073741824);"
              "set title 'all-reduce bus bandwidth, fp32'; set grid;"
              f"plot for [i=0:{len(keys) - 1}] '{dat}' index i using 1:2 with linespoints title columnheader(1)")
        r = subprocess.run(["gnuplot", "-e", gp], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"report.py: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
        else:
            print(f"\nplot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
