#!/usr/bin/env python3
"""PyTorch side of stage 10's benchmark: SDPA under torch.distributed.tensor.experimental.context_parallel
(PyTorch's ring attention), bf16, timed the way ring_bench times ours: warm-up, then `iters` timed
calls of forward and backward, the median on each rank, then the slowest rank.

    python3 -m torch.distributed.run --nproc_per_node 2 10_context/bench_torch.py --N 32768 --d 128 --heads 16

context_parallel shards the given buffers along the sequence dimension in place and makes SDPA
on them a ring (K/V rotated between ranks, "allgather" or "alltoall" per --rotate, where this
PyTorch offers the choice); its load balancing (on by default for causal attention) is a
round-robin of 2P chunks, the zigzag split of ring_bench --split zigzag. Rank 0 appends a row
(impl, P, N, d, heads, batch, causal, fwd_ms, bwd_ms, total_ms) to --csv when given.
"""
import argparse
import csv
import os
import statistics

import torch
import torch.distributed as dist
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--N", type=int, default=32768, help="the whole sequence length")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--causal", type=int, default=1, choices=[0, 1])
    ap.add_argument("--rotate", default="allgather", choices=["allgather", "alltoall"])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--csv", default="")
    a = ap.parse_args()

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    try:
        from torch.distributed.tensor.experimental._attention import set_rotate_method
        set_rotate_method(a.rotate)
    except ImportError:  # older PyTorch: one method only
        pass

    dist.init_process_group("nccl")
    rank, P = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    if a.N % (2 * P):
        raise SystemExit(f"bench_torch.py: error: --N {a.N} must be a multiple of 2P = {2 * P} (context_parallel's chunks)")
    mesh = init_device_mesh("cuda", (P,))
    shape = (a.batch, a.heads, a.N, a.head_dim)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    fwd_t, bwd_t = [], []
    with context_parallel(mesh, buffers=[q, k, v, dout], buffer_seq_dims=[2, 2, 2, 2]):
        for it in range(a.warmup + a.iters):
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
            s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            dist.barrier()
            s.record()
            out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=bool(a.causal))
            m.record()
            out.backward(dout)
            e.record()
            e.synchronize()
            if it >= a.warmup:
                fwd_t.append(s.elapsed_time(m))
                bwd_t.append(m.elapsed_time(e))
    med = torch.tensor([statistics.median(fwd_t), statistics.median(bwd_t)], dtype=torch.float64, device="cuda")
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    fwd, bwd = med.tolist()
    if rank == 0:
        print(f"torch context_parallel: P {P} N {a.N} d {a.head_dim} heads {a.heads} batch {a.batch} causal {a.causal}: "
              f"fwd {fwd:.3f} ms, bwd {bwd:.3f} ms, total {fwd + bwd:.3f} ms (median of {a.iters}, slowest rank)")
        if a.csv:
            fresh = not os.path.exists(a.csv)
            with open(a.csv, "a", newline="") as f:
                w = csv.writer(f)
                if fresh:
                    w.writerow(["impl", "P", "N", "d", "heads", "batch", "causal", "fwd_ms", "bwd_ms", "total_ms"])
                w.writerow([f"torch {torch.__version__} context_parallel ({a.rotate})", P, a.N, a.head_dim, a.heads,
                            a.batch, a.causal, f"{fwd:.3f}", f"{bwd:.3f}", f"{fwd + bwd:.3f}"])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
