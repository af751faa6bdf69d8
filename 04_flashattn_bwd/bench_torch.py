#!/usr/bin/env python3
"""PyTorch side of stage 04's benchmark: forward and forward+backward (the backward of o.sum())
of attention at the same shapes as `bench --mode sweep`, timed the same way (CUDA events, L2
flushed before each run, median), for
  sdpa_flash, sdpa_cudnn   torch.nn.functional.scaled_dot_product_attention with one backend
                           forced (n/a where it refuses the input, e.g. fp32 for both),
  naive                    softmax(Q K^T * scale, masked with -1e6) V, eager (OOM is a row).
Writes a CSV: dtype, d, N, impl, fwd_ms, fwdbwd_ms.

    python3 04_flashattn_bwd/bench_torch.py --N 16384 --d 64 --dtype bf16 --reps 100   (leaderboard)

--do-bench also times each SDPA backend's forward+backward with the course leaderboard's own
statistic, triton.testing.do_bench(fn, rep=10000, warmup=1000) (its default return_mode, "mean":
the mean of every run that fits in `rep` ms after `warmup` ms, the 256 MB cache zeroed before
each run), printed and written as a second CSV (<csv>_dobench.csv). Needs triton (PyTorch ships
it on Linux); without it the line says so and the median table is unaffected. The C side's same
statistic: `build/04_flashattn_bwd/bench --mode leaderboard` (04_flashattn_bwd/dobench.h).
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

BACKENDS = {k: BACKENDS[k] for k in ("sdpa_flash", "sdpa_cudnn")}

def write_csv(path, rows):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["dtype", "d", "N", "impl", "fwd_ms", "fwdbwd_ms"])
        w.writerows(rows)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--N", default="128,256,512,1024,2048,4096,8192,16384,32768,65536")
    ap.add_argument("--d", default="16,32,64,128")
    ap.add_argument("--dtype", default="bf16,f32")
    ap.add_argument("--causal", type=int, default=1)
    ap.add_argument("--impls", default="sdpa_flash,sdpa_cudnn,naive")
    ap.add_argument("--f32-max-N", type=int, default=8192)
    ap.add_argument("--naive-max-N", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-ms", type=float, default=1000)
    ap.add_argument("--csv", default="results/04_torch.csv")
    ap.add_argument("--do-bench", action="store_true",
                    help="also triton.testing.do_bench (mean) of each SDPA backend's forward+backward")
    ap.add_argument("--do-bench-rep", type=float, default=10000, help="do_bench rep, ms (the course: 10000)")
    ap.add_argument("--do-bench-warmup", type=float, default=1000, help="do_bench warmup, ms (the course: 1000)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_torch.py: needs a CUDA GPU")
    rows, db_rows = [], []
    print(f"# GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    print(f"# batch {a.B}, {a.H} heads, {'causal' if a.causal else 'non-causal'}; fwd+bwd = backward of o.sum()")
    print("| dtype | d | N | impl | fwd ms | fwd+bwd ms |\n|---|---|---|---|---|---|")
    for dts in a.dtype.split(","):
        dt = {"bf16": torch.bfloat16, "f32": torch.float32}[dts]
        for d in [int(x) for x in a.d.split(",")]:
            for n in [int(x) for x in a.N.split(",")]:
                if dts == "f32" and n > a.f32_max_N:
                    continue
                g = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(a.B, a.H, n, d, device="cuda", dtype=dt, generator=g).requires_grad_(True)
                           for _ in range(3))
                for impl in a.impls.split(","):
                    res = []
                    for with_bwd in (False, True):
                        try:
                            if impl in BACKENDS:
                                def attn(impl=impl):
                                    with sdpa_kernel(BACKENDS[impl]):
                                        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal))
                            elif impl == "naive":
                                if n > a.naive_max_N:
                                    raise RuntimeError("skipped")
                                attn = lambda: naive_attention(q, k, v, bool(a.causal))
                            else:
                                raise SystemExit(f"unknown impl {impl}")
                            if with_bwd:
                                def fn(attn=attn):
                                    attn().sum().backward()
                            else:
                                def fn(attn=attn):
                                    with torch.no_grad():
                                        attn()
                            res.append(f"{time_ms(fn, a.reps, a.warmup, a.budget_ms):.4f}")
                        except torch.cuda.OutOfMemoryError:
                            res.append("OOM")
                        except RuntimeError as e:
                            res.append("skipped" if "skipped" in str(e) else "n/a")
                        q.grad = k.grad = v.grad = None
                        torch.cuda.empty_cache()
                    if a.do_bench and impl in BACKENDS and res[1] not in ("OOM", "n/a", "skipped"):
                        db_rows.append([dts, d, n, impl, do_bench_fwd_bwd(q, k, v, impl, bool(a.causal), a)])
                        q.grad = k.grad = v.grad = None
                    rows.append([dts, d, n, impl] + res)
                    write_csv(a.csv, rows)  # after every point: a run cut short keeps what it measured
                    if res[0] != "skipped":
                        print(f"| {dts} | {d} | {n} | {impl} | {res[0]} | {res[1]} |", flush=True)
                del q, k, v
                torch.cuda.empty_cache()
    write_csv(a.csv, rows)
    if a.do_bench:
        path = a.csv[:-4] + "_dobench.csv" if a.csv.endswith(".csv") else a.csv + "_dobench.csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["dtype", "d", "N", "impl", "fwdbwd_do_bench_mean_ms"])
            w.writerows(db_rows)


def do_bench_fwd_bwd(q, k, v, impl, causal, a):
    """triton.testing.do_bench of one SDPA backend's forward+backward, as the course times the
    leaderboard (the mean; gradients accumulate across runs there too: no grad_to_none)."""
    try:
        import triton.testing
    except ImportError as e:
        print(f"# do_bench {impl}: triton is not importable ({e}); no do_bench statistic")
        return "no triton"

    def fn():
        with sdpa_kernel(BACKENDS[impl]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()

    ms = triton.testing.do_bench(fn, rep=a.do_bench_rep, warmup=a.do_bench_warmup)
    print(f"# do_bench {impl} fwd+bwd: {ms:.4f} ms (triton {triton.__version__}, "
          f"do_bench(fn, rep={a.do_bench_rep:g}, warmup={a.do_bench_warmup:g}), return_mode mean)", flush=True)
    return f"{ms:.4f}"


if __name__ == "__main__":
    main()
