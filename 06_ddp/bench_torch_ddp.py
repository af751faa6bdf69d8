#!/usr/bin/env python3
"""PyTorch side of stage 06's benchmark: the same Transformer (scripts/torch_model.py), size,
context, batch per rank and AdamW as ddp_train, timed the same way (CUDA events around each
step, warm-up, the median, the slowest rank), for
  none   every rank trains alone (no communication): the single-GPU step;
  naive  the course's first version: after the backward, one all_reduce per parameter;
  ddp    torch.nn.parallel.DistributedDataParallel (its buckets: 25 MB, the first 1 MB).
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 06_ddp/bench_torch_ddp.py --model xl
Rank 0 appends rows to --csv (same columns as ddp_train's).
"""
import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from torch_model import append_csv, config_by_name, dist_setup, timing_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="xl")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--sdpa", action="store_true", help="SDPA attention (default: naive, as ours)")
    ap.add_argument("--variants", default="none,naive,ddp")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--csv", default="results/06_ddp/torch.csv")
    a = ap.parse_args()
    rank, W = dist_setup()
    cfg = config_by_name(a.model, a.context)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    rows = []
    for variant in a.variants.split(","):
        model = timing_model(cfg, a.sdpa)
        net = model
        if variant == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        times, comm = [], []
        for k in range(a.warmup + a.steps):
            x = torch.randint(0, cfg.vocab, (a.batch, a.context), device="cuda", generator=gen)
            y = torch.randint(0, cfg.vocab, (a.batch, a.context), device="cuda", generator=gen)
            s, e, c0, c1 = (torch.cuda.Event(enable_timing=True) for _ in range(4))
            s.record()
            # Through the wrapper's forward (DDP registers its hooks there), then the mean loss.
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                logits = net(x)
                loss = torch.nn.functional.cross_entropy(logits.float().view(-1, cfg.vocab), y.view(-1))
            loss.backward()
            c0.record()
            if variant == "naive":
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad.div_(W)
            c1.record()
            opt.step()
            opt.zero_grad(set_to_none=True)
            e.record()
            e.synchronize()
            if k >= a.warmup:
                times.append(s.elapsed_time(e))
                comm.append(c0.elapsed_time(c1))
        med = torch.tensor([statistics.median(times), statistics.median(comm)], device="cuda")
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        peak = torch.cuda.max_memory_allocated() / 2**30
        rows.append((variant, med[0].item(), med[1].item(), peak))
        if rank == 0:
            print(f"torch {variant:6s} step {med[0].item():9.2f} ms  comm after backward {med[1].item():8.2f} ms  peak {peak:.1f} GiB", flush=True)
        del net, model, opt
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if rank == 0:
        base = next((r[1] for r in rows if r[0] == "none"), None)
        append_csv(a.csv, "model,context,batch,ranks,precision,impl,variant,step_ms,comm_exposed_ms,peak_GiB,overhead_pct",
                   [(a.model, a.context, a.batch, W, a.precision, "torch", v, f"{t:.3f}", f"{c:.3f}", f"{p:.2f}",
                     f"{100 * (t / base - 1):+.1f}%" if base else "") for v, t, c, p in rows])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
