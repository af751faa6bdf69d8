#!/usr/bin/env python3
"""PyTorch side of stage 05's benchmark: torch.distributed.all_reduce (NCCL on GPUs, Gloo on the
CPU) timed the way allreduce_bench times ours: warm-up, then `iters` timed calls, the median on
each rank, then the slowest rank; algbw = S/t, busbw = algbw * 2(n-1)/n. fp32, SUM.

    python3 -m torch.distributed.run --nproc_per_node 2 05_collectives/bench_torch.py --backend nccl
    python3 -m torch.distributed.run --nproc_per_node 4 05_collectives/bench_torch.py --backend gloo

Rank 0 appends rows (impl, ranks, size, us, algbw_GBs, busbw_GBs) to --csv.
"""
import argparse
import csv
import os
import statistics
import time

import torch
import torch.distributed as dist


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    ap.add_argument("--sizes", default="1K,32K,1M,10M,100M,1G")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--csv", default="results/05_collectives/torch.csv")
    a = ap.parse_args()
    dist.init_process_group(a.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    gpu = a.backend == "nccl"
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = "cuda" if gpu else "cpu"
    rows = []
    for size in [parse_size(s) for s in a.sizes.split(",")]:
        x = torch.ones(size // 4, dtype=torch.float32, device=dev)
        for _ in range(a.warmup):
            dist.all_reduce(x)
        times = []
        for _ in range(a.iters):
            if gpu:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                dist.all_reduce(x)
                e.record()
                e.synchronize()
                times.append(1000.0 * s.elapsed_time(e))
            else:
                dist.barrier()
                t0 = time.perf_counter()
                dist.all_reduce(x)
                times.append(1e6 * (time.perf_counter() - t0))
        med = torch.tensor([statistics.median(times)], dtype=torch.float64)
        if gpu:  # NCCL reduces device tensors only
            m = med.to(dev)
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
            med = m.cpu()
        else:
            dist.all_reduce(med, op=dist.ReduceOp.MAX)
        us = med.item()
        S = (size // 4) * 4
        algbw = S / us / 1e3
        rows.append(("torch-" + a.backend, n, S, f"{us:.1f}", f"{algbw:.2f}", f"{algbw * 2 * (n - 1) / n:.2f}"))
        if rank == 0:
            print(f"torch {a.backend:5s} n={n} {S:>12d} B  {us:10.1f} us  busbw {algbw * 2 * (n - 1) / n:8.2f} GB/s", flush=True)
        del x
    if rank == 0:
        os.makedirs(os.path.dirname(a.csv) or ".", exist_ok=True)
        new = not os.path.exists(a.csv)
        with open(a.csv, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["impl", "ranks", "size", "us", "algbw_GBs", "busbw_GBs"])
            w.writerows(rows)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
