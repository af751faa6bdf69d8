"""What stages 03 and 04's PyTorch benchmarks share: the SDPA backends, the course's naive
attention (masked scores -1e6, as the tests use), and one timing method (CUDA events, L2
flushed before every timed run, median over the repetitions after warm-up).

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from torch_attention import BACKENDS, naive_attention, time_ms
"""
import math
import statistics

import torch
from torch.nn.attention import SDPBackend

BACKENDS = {
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
}
_flush = None


def time_ms(fn, reps, warmup, budget_ms):
    """Median ms of fn() over `reps` runs after `warmup` runs; fewer reps (at least 3) when the
    last warm-up run says they would take more than budget_ms in all."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")  # > L2 (50 MiB)
    first = 0.0
    for _ in range(warmup):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        first = s.elapsed_time(e)
    n = reps
    if first > 0 and first * n > budget_ms:
        n = int(budget_ms / first)
    n = max(n, 3)
    times = []
    for _ in range(n):
        _flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def naive_attention(q, k, v, causal):
    """softmax(Q K^T / sqrt(d), masked with -1e6 above the diagonal) V, materialised."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        n_q, n_k = s.shape[-2], s.shape[-1]
        mask = torch.arange(n_k, device=q.device)[None, :] > torch.arange(n_q, device=q.device)[:, None]
        s = s.masked_fill(mask, -1e6)
    return torch.softmax(s, dim=-1) @ v
