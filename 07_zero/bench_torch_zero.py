#!/usr/bin/env python3
"""PyTorch side of stage 07's benchmark: the same Transformer (scripts/torch_model.py), size,
context, batch per rank and AdamW as zero_train, timed the same way (CUDA events around each
step, warm-up, the median, the slowest rank), with PyTorch's answer to each of our levels:
  none   every rank trains alone (no communication): the single-GPU step and memory;
  ddp    DistributedDataParallel + AdamW                               (ours: --zero ddp)
  zero   DDP + ZeroRedundancyOptimizer(AdamW): optimizer state sharded  (ours: --zero 1 / course)
  fsdp   FSDP2 fully_shard on every block, then the root: parameters,   (ours: --zero 3)
         gradients and optimizer state sharded, each block gathered for its forward and backward
Memory: torch.cuda.max_memory_allocated per rank, the largest over ranks, both over the whole
run (first steps included: the optimizer state appears in step 1) and over the measured steps
alone (peak stats reset after the warm-up): the "steady" peak the issue compares.
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py --model xl
Rank 0 prints one line per variant and appends rows to --csv.
"""
import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from torch_model import append_csv, config_by_name, dist_setup, timing_model  # noqa: E402

VARIANTS = ("none", "ddp", "zero", "fsdp")


def build(variant, cfg, sdpa, lr):
    model = timing_model(cfg, sdpa)
    net = model
    if variant == "ddp" or variant == "zero":
        net = torch.nn.parallel.DistributedDataParallel(model)
    if variant == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)
    elif variant == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
    return model, net, opt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="xl")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--sdpa", action="store_true", help="SDPA attention (default: naive, as ours)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of " + "|".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--csv", default="results/07_zero/torch.csv")
    a = ap.parse_args()
    variants = a.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        sys.exit(f"bench_torch_zero: unknown variant {bad[0]!r} (allowed: {', '.join(VARIANTS)})")
    if a.steps < 1 or a.warmup < 1:
        sys.exit("bench_torch_zero: --steps and --warmup must be at least 1")
    rank, W = dist_setup()
    cfg = config_by_name(a.model, a.context)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    rows = []
    for variant in variants:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        model, net, opt = build(variant, cfg, a.sdpa, 1e-3)
        times, peak_all = [], 0
        for k in range(a.warmup + a.steps):
            if k == a.warmup:  # the steady state: optimizer state exists, caches are warm
                peak_all = torch.cuda.max_memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            x = torch.randint(0, cfg.vocab, (a.batch, a.context), device="cuda", generator=gen)
            y = torch.randint(0, cfg.vocab, (a.batch, a.context), device="cuda", generator=gen)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            logits = net(x)  # through the wrapper: DDP and FSDP hook in there
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, cfg.vocab), y.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            e.record()
            e.synchronize()
            if k >= a.warmup:
                times.append(s.elapsed_time(e))
        steady = torch.cuda.max_memory_allocated()
        v = torch.tensor([statistics.median(times), max(peak_all, steady) / 2**30, steady / 2**30], device="cuda")
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        t, pa, ps = (x.item() for x in v)
        rows.append((variant, t, pa, ps))
        if rank == 0:
            print(f"torch {variant:5s} step {t:9.2f} ms  peak {pa:6.2f} GiB (steady {ps:6.2f} GiB)", flush=True)
        del net, model, opt
    if rank == 0:
        base = next((r[1] for r in rows if r[0] == "none"), None)
        append_csv(a.csv, "model,context,batch,ranks,impl,variant,step_ms,peak_GiB,steady_peak_GiB,overhead_pct",
                   [(a.model, a.context, a.batch, W, "torch", v, f"{t:.3f}", f"{pa:.2f}", f"{ps:.2f}",
                     f"{100 * (t / base - 1):+.1f}%" if base else "") for v, t, pa, ps in rows])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
