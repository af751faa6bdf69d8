#!/usr/bin/env python3
"""PyTorch side of `make bench-02`: (x * w).sum(-1) and its autograd backward, timed exactly as
bench_main.c times our kernels: an L2-sized buffer is overwritten before every repetition, a CUDA
event is recorded before and after the call, the median over --reps repetitions (after --warmup
untimed ones) is reported. Bytes are counted with the same formula (README, "Bandwidth").

The backward is torch.autograd.grad(y, (x, w), grad_y, retain_graph=True): it returns fresh
gradients (no accumulation into .grad), and the graph is built once, outside the timing.
Writes a CSV (--out) with one row per (dtype, ROWS).
"""
import argparse
import csv
import os
import statistics
import sys


def parse_size(s):
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}
    s = s.strip()
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=parse_size, default=1024)
    ap.add_argument("--rows", default="256,1K,4K,16K,64K,256K,1M,2M")
    ap.add_argument("--dtype", choices=["f32", "bf16", "both"], default="both")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="results/02_weighted_sum/torch.csv")
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench_torch.py: no CUDA GPU visible to PyTorch; skipping", file=sys.stderr)
        return 3
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size or (64 << 20)
    flush = torch.empty(2 * l2, dtype=torch.uint8, device=dev)  # the same size gpu_flush_l2 writes

    def time_ms(fn):
        for _ in range(a.warmup):
            fn()
        ms = []
        for _ in range(a.reps):
            flush.zero_()
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ms.append(s.elapsed_time(e))
        return statistics.median(ms)

    dtypes = {"f32": torch.float32, "bf16": torch.bfloat16}
    names = ["f32", "bf16"] if a.dtype == "both" else [a.dtype]
    D = a.d
    rows_list = [parse_size(r) for r in a.rows.split(",")]
    out_rows = []
    print(f"# PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}; D = {D}")
    print("| dtype | ROWS | torch fwd us | torch fwd GB/s | torch bwd us | torch bwd GB/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        dt = dtypes[name]
        es = torch.tensor([], dtype=dt).element_size()
        for R in rows_list:
            row = {"dtype": name, "ROWS": R, "D": D}
            try:
                g = torch.Generator(device=dev).manual_seed(0)
                x = (torch.rand(R, D, device=dev, generator=g) * 2 - 1).to(dt).requires_grad_(True)
                w = (torch.rand(D, device=dev, generator=g) * 2 - 1).to(dt).requires_grad_(True)
                gy = (torch.rand(R, device=dev, generator=g) * 2 - 1).to(dt)
                with torch.no_grad():
                    tf = time_ms(lambda: (x * w).sum(-1))
                y = (x * w).sum(-1)
                tb = time_ms(lambda: torch.autograd.grad(y, (x, w), gy, retain_graph=True))
                fwd_bytes = (R * D + D + R) * es
                bwd_bytes = (2 * R * D + R + 2 * D) * es
                row.update({"torch fwd us": f"{tf * 1e3:.1f}",
                            "torch fwd GB/s": f"{fwd_bytes / (tf * 1e6):.0f}",
                            "torch bwd us": f"{tb * 1e3:.1f}",
                            "torch bwd GB/s": f"{bwd_bytes / (tb * 1e6):.0f}"})
                del x, w, gy, y
            except torch.cuda.OutOfMemoryError:
                row.update({k: "OOM" for k in ["torch fwd us", "torch fwd GB/s", "torch bwd us",
                                               "torch bwd GB/s"]})
            torch.cuda.empty_cache()
            out_rows.append(row)
            print(f"| {name} | {R} | {row['torch fwd us']} | {row['torch fwd GB/s']} | "
                  f"{row['torch bwd us']} | {row['torch bwd GB/s']} |", flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(out_rows[0].keys()))
        wr.writeheader()
        wr.writerows(out_rows)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
