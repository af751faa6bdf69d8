#!/usr/bin/env python3
"""PyTorch side of stage 03's flash sweep: the same shapes as `bench --sweep flash`, timed the
same way (CUDA events, L2 flushed before each run, median), for
  sdpa_flash, sdpa_cudnn, sdpa_efficient  torch.nn.functional.scaled_dot_product_attention with
                                          one backend forced (n/a where it refuses the input),
  naive                                   softmax(Q K^T * scale, masked with -1e6) V, eager,
  naive_compile                           the same under torch.compile (one compile per shape,
                                          so by default only for --compile-d).
Writes a CSV (dtype, d, N, impl, ms, TFLOP/s); causal forward FLOPs = 2 N^2 d per head.

    python3 03_flashattn_fwd/bench_torch.py --B 1 --H 16 --N 16384 --d 64 --dtype bf16
"""
import argparse
import csv
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from torch_attention import BACKENDS, naive_attention, time_ms  # noqa: E402

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=1)
    ap.add_argument("--N", default="128,256,512,1024,2048,4096,8192,16384,32768,65536")
    ap.add_argument("--d", default="16,32,64,128")
    ap.add_argument("--dtype", default="bf16,f32")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--impls", default="sdpa_flash,sdpa_cudnn,sdpa_efficient,naive,naive_compile")
    ap.add_argument("--naive-max-N", type=int, default=16384)
    ap.add_argument("--compile-d", default="64", help="head dims for naive_compile (comma list, 'all')")
    ap.add_argument("--compile-N", default="all", help="N for naive_compile (comma list, 'all'): one compile each")
    ap.add_argument("--compile-dtype", default="bf16,f32", help="dtypes for naive_compile")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-ms", type=float, default=2000)
    ap.add_argument("--csv", default="results/03_torch.csv")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_torch.py: needs a CUDA GPU")
    torch._dynamo.config.cache_size_limit = 256
    compiled = torch.compile(naive_attention, dynamic=False)
    impls = a.impls.split(",")
    rows = []
    print(f"# GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    print(f"# batch {a.B}, {a.H} heads, {'causal' if a.causal else 'non-causal'}")
    print("| dtype | d | N | impl | ms | TFLOP/s |\n|---|---|---|---|---|---|")
    for dts in a.dtype.split(","):
        dt = {"bf16": torch.bfloat16, "f32": torch.float32}[dts]
        for d in [int(x) for x in a.d.split(",")]:
            for n in [int(x) for x in a.N.split(",")]:
                g = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(a.B, a.H, n, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
                flops = 4.0 * a.B * a.H * n * n * d / (2.0 if a.causal else 1.0)
                for impl in impls:
                    ms = None
                    try:
                        if impl in BACKENDS:
                            def fn(impl=impl):
                                with sdpa_kernel(BACKENDS[impl]):
                                    return F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
                        elif impl == "naive":
                            if n > a.naive_max_N:
                                raise RuntimeError("skipped")
                            fn = lambda: naive_attention(q, k, v, bool(a.causal))
                        elif impl == "naive_compile":
                            if (n > a.naive_max_N or (a.compile_d != "all" and str(d) not in a.compile_d.split(","))
                                    or (a.compile_N != "all" and str(n) not in a.compile_N.split(","))
                                    or dts not in a.compile_dtype.split(",")):
                                raise RuntimeError("skipped")
                            fn = lambda: compiled(q, k, v, bool(a.causal))
                        else:
                            raise SystemExit(f"unknown impl {impl}")
                        ms = time_ms(fn, a.reps, a.warmup, a.budget_ms)
                    except torch.cuda.OutOfMemoryError:
                        ms = "OOM"
                        torch.cuda.empty_cache()
                    except RuntimeError as e:
                        ms = "skipped" if "skipped" in str(e) else "n/a"
                    tf = f"{flops / (ms * 1e-3) / 1e12:.1f}" if isinstance(ms, float) else "-"
                    mss = f"{ms:.4f}" if isinstance(ms, float) else ms
                    rows.append([dts, d, n, impl, mss, tf])
                    if mss != "skipped":
                        print(f"| {dts} | {d} | {n} | {impl} | {mss} | {tf} |", flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    os.makedirs(os.path.dirname(a.csv) or ".", exist_ok=True)
    tmp = a.csv + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dtype", "d", "N", "impl", "ms", "TFLOP/s"])
        w.writerows(rows)
    os.replace(tmp, a.csv)


if __name__ == "__main__":
    main()
