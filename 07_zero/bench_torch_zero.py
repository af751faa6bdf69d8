#!/usr/bin/env python3
"""PyTorch side of stage 07's benchmark: the same Transformer (scripts/torch_model.py), size,
context, batch per rank and AdamW as zero_train, timed the same way (CUDA events around each
step, warm-up, the median, the slowest rank), with PyTorch's answer to each of our levels:
  none   every rank trains alone (no communication): the single-GPU step and memory;
  ddp    DistributedDataParallel + AdamW                               (ours: --zero ddp)
  zero   DDP + ZeroRedundancyOptimizer(AdamW): optimizer state sharded  (ours: --zero 1 / course)
  fsdp   FSDP2 fully_shard on every block, then the root: parameters,   (ours: --zero 3)
         gradients and optimizer state sharded, each block gathered for its forward and backward
--precision bf16: the mixed-precision side by side with ours (zero_train --precision bf16):
  none, ddp, zero  under torch.autocast(bf16): fp32 parameters, gradients and AdamW state, bf16
                   matmul operands (ours: the GPU model's MP_BF16 at --zero 0 / 1);
  fsdp             fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=bf16,
                   reduce_dtype=--reduce-dtype)): each block's all-gather moves bf16 (half the
                   bytes), the sharded parameters and AdamW state stay fp32 (ours: --zero 3
                   --precision bf16 --reduce-dtype fp32|bf16).
--checkpoint block: every block's forward recomputed in the backward (torch.utils.checkpoint,
as ours --checkpoint block); --head-chunk N: the LM head and cross-entropy over N rows at a time,
each chunk recomputed in the backward (ours --head-chunk N); both are what the 2026 leaderboard's
8b step at context 32768 needs to fit:
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py \
        --model 8b --context 32768 --batch 1 --precision bf16 --sdpa --variants fsdp \
        --checkpoint block --head-chunk 4096 --steps 3 --warmup 1
Memory: torch.cuda.max_memory_allocated per rank, the largest over ranks, both over the whole
run (first steps included: the optimizer state appears in step 1) and over the measured steps
alone (peak stats reset after the warm-up): the "steady" peak the issue compares.
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py --model xl
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 07_zero/bench_torch_zero.py --model xl --precision bf16
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


class Recomputed(torch.nn.Module):
    """A block whose forward is recomputed in the backward (activation checkpointing)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.block, x, use_reentrant=False)


def build(variant, cfg, sdpa, lr, bf16=False, reduce_dtype="fp32", recompute=False):
    model = timing_model(cfg, sdpa)
    if recompute:  # before any wrapper, so FSDP shards the wrapped blocks as it would the blocks
        model.layers = torch.nn.ModuleList(Recomputed(b) for b in model.layers)
    net = model
    if variant == "ddp" or variant == "zero":
        net = torch.nn.parallel.DistributedDataParallel(model)
    if variant == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=lr)
    elif variant == "fsdp":
        from torch.distributed.fsdp import fully_shard
        kw = {}
        if bf16:  # parameters cast to bf16 BEFORE the all-gather; fp32 masters and optimizer state
            from torch.distributed.fsdp import MixedPrecisionPolicy
            kw["mp_policy"] = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16 if reduce_dtype == "bf16" else torch.float32)
        for block in model.layers:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
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
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="bf16: autocast for none/ddp/zero, MixedPrecisionPolicy for fsdp")
    ap.add_argument("--reduce-dtype", default="fp32", choices=("fp32", "bf16"),
                    help="fsdp with --precision bf16: the gradient reduce-scatter's dtype")
    ap.add_argument("--checkpoint", default="none", choices=("none", "block"),
                    help="block: each block's forward recomputed in the backward")
    ap.add_argument("--head-chunk", type=int, default=0,
                    help="LM head + loss over this many rows at a time (0: the whole logits)")
    ap.add_argument("--csv", default="results/07_zero/torch.csv")
    a = ap.parse_args()
    variants = a.variants.split(",")
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        sys.exit(f"bench_torch_zero: unknown variant {bad[0]!r} (allowed: {', '.join(VARIANTS)})")
    if a.reduce_dtype == "bf16" and a.precision != "bf16":
        sys.exit("bench_torch_zero: --reduce-dtype bf16 needs --precision bf16")
    if a.head_chunk < 0:
        sys.exit("bench_torch_zero: --head-chunk must be 0 (the whole logits) or a row count")
    if a.steps < 1 or a.warmup < 1:
        sys.exit("bench_torch_zero: --steps and --warmup must be at least 1")
    rank, W = dist_setup()
    cfg = config_by_name(a.model, a.context)
    gen = torch.Generator(device="cuda").manual_seed(1234)
    rows = []
    for variant in variants:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        bf16 = a.precision == "bf16"
        model, net, opt = build(variant, cfg, a.sdpa, 1e-3, bf16, a.reduce_dtype, a.checkpoint == "block")
        # FSDP's policy casts the parameters itself; the others run their forward under autocast
        autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16 and variant != "fsdp")
        times, peak_all = [], 0
        for k in range(a.warmup + a.steps):
            if k == a.warmup:  # the steady state: optimizer state exists, caches are warm
                peak_all = torch.cuda.max_memory_allocated()
                torch.cuda.reset_peak_memory_stats()
            x = torch.randint(0, cfg.vocab, (a.batch, a.context), device="cuda", generator=gen)
            y = torch.randint(0, cfg.vocab, (a.batch, a.context), device="cuda", generator=gen)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            with autocast:  # through the wrapper: DDP and FSDP hook in there; the loss in fp32
                loss = net(x, y, head_chunk=a.head_chunk)
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
            print(f"torch {variant:5s} {a.precision} ckpt {a.checkpoint} head-chunk {a.head_chunk} step {t:9.2f} ms  peak {pa:6.2f} GiB (steady {ps:6.2f} GiB)", flush=True)
        del net, model, opt
    if rank == 0:
        base = next((r[1] for r in rows if r[0] == "none"), None)
        prec = a.precision + ("/rs-bf16" if a.reduce_dtype == "bf16" else "")
        tag = ("+ckpt" if a.checkpoint == "block" else "") + (f"+chunk{a.head_chunk}" if a.head_chunk else "")
        append_csv(a.csv, "model,context,batch,ranks,impl,variant,precision,step_ms,peak_GiB,steady_peak_GiB,overhead_pct",
                   [(a.model, a.context, a.batch, W, "torch", v + tag, prec, f"{t:.3f}", f"{pa:.2f}", f"{ps:.2f}",
                     f"{100 * (t / base - 1):+.1f}%" if base else "") for v, t, pa, ps in rows])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
