#!/usr/bin/env python3
"""The PyTorch side of stage 01's comparison: the same Transformer LM (scripts/torch_model.py,
the twin of common/model.h), the same configurations as build/01_benchmarking/benchmark, timed
the same way (warm-up steps, then CUDA events around each measured step, median and spread).

Variants (--variants):
  fp32          eager, float32 everywhere
  bf16          eager under torch.autocast(bfloat16): bf16 matmuls, fp32 master weights
  bf16-compile  bf16 autocast + scaled_dot_product_attention + torch.compile of the loss

Modes (--modes): forward (loss with autograd recording, as a training forward does),
forward-backward (+ loss.backward()), train (+ AdamW step and zero_grad).

Writes one CSV row per (size, context, variant, mode) to OUT/CSV.csv (atomically) and prints a
Markdown table. An out-of-memory case is a row with status OOM, not a crash.

    python3 01_benchmarking/bench_torch.py --sizes small,medium --contexts 512 --steps 10
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))

COLUMNS = ["size", "context", "batch", "variant", "mode", "status", "warmup", "steps",
           "median_ms", "mean_ms", "std_ms", "min_ms", "peak_mib", "tokens_per_s", "gpu", "torch"]
VARIANTS = ["fp32", "bf16", "bf16-compile"]
MODES = ["forward", "forward-backward", "train"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="small,medium", help="comma list of model sizes")
    p.add_argument("--contexts", default="512", help="comma list of context lengths")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--variants", default=",".join(VARIANTS), help="|".join(VARIANTS))
    p.add_argument("--modes", default=",".join(MODES), help="|".join(MODES))
    p.add_argument("--compile-modes", default="train",
                   help="modes run for bf16-compile (compiling is slow; default: train only)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a smoke test of this script (tiny size), timed with the host clock")
    p.add_argument("--out", default="results/01_benchmarking")
    p.add_argument("--csv", default="torch_bench", help="file name without extension")
    a = p.parse_args()
    for name, allowed in (("variants", VARIANTS), ("modes", MODES), ("compile_modes", MODES)):
        vals = [v for v in getattr(a, name).split(",") if v]
        bad = [v for v in vals if v not in allowed]
        if bad:
            p.error(f"--{name.replace('_', '-')}: {bad[0]!r} is not one of {'|'.join(allowed)}")
        setattr(a, name, vals)
    a.sizes = [s for s in a.sizes.split(",") if s]
    try:
        a.contexts = [int(c) for c in a.contexts.split(",") if c]
    except ValueError:
        p.error("--contexts: a comma list of integers, e.g. 128,256,512")
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or any(c < 1 for c in a.contexts):
        p.error("--batch, --steps and contexts must be >= 1, --warmup >= 0")
    return a


def write_csv_atomic(path, rows):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(",".join(COLUMNS) + "\n")
        for r in rows:
            f.write(",".join(str(r.get(c, "")) for c in COLUMNS) + "\n")
    os.replace(tmp, path)


def run_case(torch, tm, size, context, batch, variant, mode, warmup, steps, seed, device):
    """One configuration; returns the row (dict). Builds a fresh model so peaks are per case."""
    dev = torch.device(device)
    cuda = device == "cuda"
    cfg = tm.config_by_name(size, context)
    use_sdpa = variant == "bf16-compile"
    model = tm.TransformerLM(cfg, use_sdpa=use_sdpa, init_seed=seed).to(dev)
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    tokens = torch.randint(0, cfg.vocab, (batch, context + 1), generator=gen).to(dev)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01) if mode == "train" else None
    amp = variant in ("bf16", "bf16-compile")
    loss_fn = model.loss
    if variant == "bf16-compile":
        loss_fn = torch.compile(model.loss)

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(inputs, targets)
        if mode != "forward":
            loss.backward()
        if opt is not None:
            opt.step()
        if mode != "forward":
            model.zero_grad(set_to_none=True)
        return loss

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(steps)]
        for s, e in ev:
            s.record()
            step()
            e.record()
        torch.cuda.synchronize()  # every event has completed: elapsed_time is valid
        times = [s.elapsed_time(e) for s, e in ev]
    else:
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
    med = statistics.median(times)
    row = dict(status="ok", median_ms=f"{med:.3f}", mean_ms=f"{statistics.fmean(times):.3f}",
               std_ms=f"{statistics.stdev(times) if len(times) > 1 else 0.0:.3f}",
               min_ms=f"{min(times):.3f}",
               peak_mib=f"{torch.cuda.max_memory_allocated() / 2**20:.1f}" if cuda else "",
               tokens_per_s=f"{batch * context / (med * 1e-3):.0f}")
    del model, opt, loss_fn
    return row


def main():
    a = parse_args()
    import torch
    try:
        import torch_model as tm
    except ImportError as e:
        sys.exit(f"bench_torch.py: error: cannot import scripts/torch_model.py ({e})")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_torch.py: error: needs a CUDA GPU (torch.cuda.is_available() is False)")
    bad = [s for s in a.sizes if s not in tm.SIZES]
    if bad:
        sys.exit(f"bench_torch.py: error: --sizes: {bad[0]!r} is not one of {'|'.join(tm.SIZES)}")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in our cuBLAS calls
    torch.backends.cudnn.allow_tf32 = False
    gpu = torch.cuda.get_device_name(0).replace(",", " ") if a.device == "cuda" else "cpu"
    rows = []
    t0 = time.time()
    for size in a.sizes:
        for context in a.contexts:
            for variant in a.variants:
                modes = a.compile_modes if variant == "bf16-compile" else a.modes
                for mode in [m for m in a.modes if m in modes]:
                    base = dict(size=size, context=context, batch=a.batch, variant=variant, mode=mode,
                                warmup=a.warmup, steps=a.steps, gpu=gpu, torch=torch.__version__)
                    try:
                        base.update(run_case(torch, tm, size, context, a.batch, variant, mode,
                                             a.warmup, a.steps, a.seed, a.device))
                    except torch.cuda.OutOfMemoryError:
                        base.update(status="OOM")
                    if a.device == "cuda":
                        torch.cuda.empty_cache()
                    rows.append(base)
                    print(f"# {size} ctx {context} {variant} {mode}: {base.get('median_ms', 'OOM')} ms",
                          file=sys.stderr, flush=True)
    path = os.path.join(a.out, a.csv + ".csv")
    write_csv_atomic(path, rows)
    print(f"### PyTorch {torch.__version__} on {gpu}, batch {a.batch}, warm-up {a.warmup}, "
          f"median of {a.steps} steps (ms)\n")
    show = ["size", "context", "variant", "mode", "median_ms", "std_ms", "peak_mib", "tokens_per_s"]
    print("| " + " | ".join(show) + " |")
    print("|" + "---|" * len(show))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "OOM" if c == "median_ms" else "")) for c in show) + " |")
    print(f"\n(wrote {path}; {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
