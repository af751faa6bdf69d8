#!/usr/bin/env python3
"""The handout's pytorch_attention and torch_compile (a) grid in PyTorch: naive attention,
eager and under torch.compile, batch 8, one head (no head dimension), fp32, not causal,
d in 16/32/64/128, N in 256/1024/4096/8192/16384 (add 32768 to reach an out-of-memory row).

Per point and implementation: forward ms, backward ms (of out.sum(), the forward outside the
timed region), the memory in use before the backward starts (what the forward left: Q, K, V
and their gradients' absence, the saved S/P, O), and the status (ok / OOM). Times are medians
of CUDA-event runs after warm-up, L2 flushed before each (scripts/torch_attention.py), so they
compare with stage 03's `bench --sweep naive`; the handout's "100 passes" becomes up to
--reps runs within --budget-ms.

    python3 03_flashattn_fwd/bench_torch_naive.py --csv results/03_torch_naive.csv
"""
import argparse
import csv
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from torch_attention import naive_attention, time_ms  # noqa: E402


def one_point(fn, B, N, d, reps, warmup, budget_ms):
    """(fwd ms, bwd ms, MiB in use before the backward) for attention fn at (B, N, d)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, N, d, device="cuda", generator=g, requires_grad=True) for _ in range(3))
    with torch.no_grad():
        fwd = time_ms(lambda: fn(q, k, v), reps, warmup, budget_ms)
    # Backward: every timed run needs a fresh graph, so the forward runs outside the events.
    state = {}

    def setup():
        q.grad = k.grad = v.grad = None
        state["o"] = fn(q, k, v)

    def bwd():
        state["o"].sum().backward()

    times = []
    for i in range(warmup + max(3, min(reps, int(budget_ms / max(fwd, 1e-3))))):
        setup()
        torch.cuda.synchronize()
        if i == warmup:
            mem = torch.cuda.memory_allocated() / 2**20  # the forward's leftovers, before a backward
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        bwd()
        e.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(s.elapsed_time(e))
    times.sort()
    return fwd, times[len(times) // 2], mem


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--N", default="256,1024,4096,8192,16384")
    ap.add_argument("--d", default="16,32,64,128")
    ap.add_argument("--impls", default="eager,compiled", help="eager, compiled (comma list)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget-ms", type=float, default=1500.0, help="cap on timed ms per measurement")
    ap.add_argument("--csv", default="results/03_torch_naive.csv")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_torch_naive.py: no CUDA GPU visible; nothing measured", file=sys.stderr)
        sys.exit(2)
    impls = a.impls.split(",")
    for i in impls:
        if i not in ("eager", "compiled"):
            print(f"bench_torch_naive.py: --impls: unknown '{i}' (allowed: eager, compiled)", file=sys.stderr)
            sys.exit(2)
    fns = {"eager": lambda q, k, v: naive_attention(q, k, v, False),
           "compiled": torch.compile(lambda q, k, v: naive_attention(q, k, v, False), dynamic=False)}
    rows = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, batch {a.B}, fp32, not causal")
    print("| d | N | impl | forward ms | backward ms | MiB before backward | status |")
    print("|---:|---:|---|---:|---:|---:|---|")
    for d in [int(x) for x in a.d.split(",")]:
        for n in [int(x) for x in a.N.split(",")]:
            for impl in impls:
                try:
                    f, b, mem = one_point(fns[impl], a.B, n, d, a.reps, a.warmup, a.budget_ms)
                    row = [d, n, impl, f"{f:.4f}", f"{b:.4f}", f"{mem:.1f}", "ok"]
                except torch.cuda.OutOfMemoryError:
                    row = [d, n, impl, "", "", "", "OOM"]
                torch.cuda.empty_cache()
                rows.append(row)
                print("| " + " | ".join(str(x) for x in row) + " |", flush=True)
    os.makedirs(os.path.dirname(a.csv) or ".", exist_ok=True)
    tmp = a.csv + ".tmp"
    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["d", "N", "impl", "fwd_ms", "bwd_ms", "mib_before_bwd", "status"])
        w.writerows(rows)
    os.replace(tmp, a.csv)


if __name__ == "__main__":
    main()
