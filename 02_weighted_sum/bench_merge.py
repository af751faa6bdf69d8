#!/usr/bin/env python3
"""Merges bench_main.c's cuda.csv and bench_torch.py's torch.csv (same sizes, same run) into one
Markdown table with ratios (table.md), a CSV (merged.csv) and gnuplot data (plot_<dtype>.dat).
Usage: bench_merge.py RESULTS_DIR "GPU name" "command"
"""
import csv
import os
import sys


def num(s):
    try:
        return float(str(s).rstrip("%"))
    except ValueError:
        return None


def main():
    out, gpu, cmd = sys.argv[1], sys.argv[2], sys.argv[3]
    ours = list(csv.DictReader(open(os.path.join(out, "cuda.csv"))))
    tp = os.path.join(out, "torch.csv")
    torch = {(r["dtype"], r["ROWS"]): r for r in csv.DictReader(open(tp))} if os.path.exists(tp) else {}
    cols = ["dtype", "ROWS x D", "x MiB", "copy GB/s", "fwd GB/s", "fwd % copy", "torch fwd GB/s",
            "fwd vs torch", "bwd GB/s", "bwd % copy", "torch bwd GB/s", "bwd vs torch",
            "bwd atomic GB/s", "check"]
    rows = []
    for r in ours:
        t = torch.get((r["dtype"], r["ROWS"]), {})
        tf, tb = num(t.get("torch fwd us")), num(t.get("torch bwd us"))
        of, ob = num(r["fwd us"]), num(r["bwd us"])
        rows.append({
            "dtype": r["dtype"], "ROWS x D": f"{r['ROWS']} x {r['D']}", "x MiB": r["x MiB"],
            "copy GB/s": r["copy GB/s"], "fwd GB/s": r["fwd GB/s"], "fwd % copy": r["fwd %copy"],
            "torch fwd GB/s": t.get("torch fwd GB/s", "-"),
            "fwd vs torch": f"{tf / of:.2f}x" if tf and of else "-",
            "bwd GB/s": r["bwd GB/s"], "bwd % copy": r["bwd %copy"],
            "torch bwd GB/s": t.get("torch bwd GB/s", "-"),
            "bwd vs torch": f"{tb / ob:.2f}x" if tb and ob else "-",
            "bwd atomic GB/s": r["bwd-atomic GB/s"], "check": r["check"],
        })
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(f"GPU: {gpu}. Command: `{cmd}`. 'vs torch' = PyTorch time / our time "
                "(> 1: we are faster).\n\n")
        f.write("| " + " | ".join(cols) + " |\n")
        f.write("|" + "|".join(" --- " if c == "dtype" else " ---: " for c in cols) + "|\n")
        for r in rows:
            f.write("| " + " | ".join(str(r[c]) for c in cols) + " |\n")
    with open(os.path.join(out, "merged.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    # gnuplot data: x MiB, copy, fwd, bwd, bwd atomic, torch fwd, torch bwd (GB/s; NaN if absent)
    for dt in sorted({r["dtype"] for r in rows}):
        with open(os.path.join(out, f"plot_{dt}.dat"), "w") as f:
            f.write("# x_MiB copy fwd bwd bwd_atomic torch_fwd torch_bwd\n")
            for r in rows:
                if r["dtype"] != dt:
                    continue
                v = [r["x MiB"], r["copy GB/s"], r["fwd GB/s"], r["bwd GB/s"], r["bwd atomic GB/s"],
                     r["torch fwd GB/s"], r["torch bwd GB/s"]]
                f.write(" ".join(str(num(x)) if num(x) is not None else "NaN" for x in v) + "\n")
    print(open(os.path.join(out, "table.md")).read())


if __name__ == "__main__":
    main()
