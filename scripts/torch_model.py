"""The Transformer LM of common/model.h in PyTorch: the outside referee for the C/CUDA model.

Used by tests/fixtures/gen_model.py (float64 fixture on the CPU) and by the PyTorch speed
comparison (eager, autocast bf16, torch.compile; attention naive or SDPA). Importing this
module has no side effects; from the repository root:

    import sys; sys.path.insert(0, "scripts")
    from torch_model import ModelConfig, TransformerLM, config_by_name, flat_layout
    cfg = config_by_name("small", context=512)
    model = TransformerLM(cfg, use_sdpa=True).cuda()
    loss = model.loss(inputs, targets)

The state dict's names are exactly common/model.h's parameter names
("token_embeddings.weight", "layers.0.attn.q_proj.weight", ...), and flat_layout() reproduces
common/model_config.c's flat-buffer offsets (64-element aligned), so a flat .npy written by the
C code loads with load_flat() and a torch model saves into that layout with to_flat().

Maths (as the course's basics model): pre-norm blocks with RMSNorm (eps 1e-5, computed in
float32 or wider), causal multi-head attention with RoPE on interleaved pairs (2i, 2i+1),
angle = position * theta^(-2i/HS), theta 10000; SwiGLU FFN W2(SiLU(W1 x) * W3 x); final
RMSNorm; untied LM head; no biases; cross-entropy averaged over all tokens.
"""
from dataclasses import dataclass
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PARAM_ALIGN = 64          # elements; as common/model_config.c
RMSNORM_EPS = 1e-5
ROPE_THETA = 10000.0

# (d_model, d_ff, n_layers, n_heads), vocab: as common/model_config.c
SIZES = {
    "tiny": (64, 192, 2, 4),
    "small": (768, 3072, 12, 12),
    "medium": (1024, 4096, 24, 16),
    "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25),
    "2.7B": (2560, 10240, 32, 32),
    "8b": (4096, 11008, 34, 32),  # the 2026 leaderboard's class, vocabulary LB8B_VOCAB
}
LB8B_VOCAB = 151936


@dataclass
class ModelConfig:
    vocab: int
    context: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int


def config_by_name(name, context):
    d_model, d_ff, n_layers, n_heads = SIZES[name]
    vocab = 512 if name == "tiny" else LB8B_VOCAB if name == "8b" else 10000
    return ModelConfig(vocab, context, d_model, n_layers, n_heads, d_ff)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=RMSNORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        # Normalise in at least float32 (under autocast x may be bf16), return x's dtype.
        dt = x.dtype
        xf = x.float() if dt in (torch.float16, torch.bfloat16) else x
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * rstd * self.weight.to(xf.dtype)).to(dt)


class RoPE(nn.Module):
    """Rotates pairs (2i, 2i+1) of the last dimension by position * theta^(-2i/HS)."""

    def __init__(self, head_size, context, theta=ROPE_THETA):
        super().__init__()
        i = torch.arange(head_size // 2, dtype=torch.float64)
        freq = theta ** (-2.0 * i / head_size)                        # (HS/2)
        ang = torch.arange(context, dtype=torch.float64)[:, None] * freq  # (context, HS/2)
        # Not persistent: the state dict holds only the trainable parameters.
        self.register_buffer("cos", torch.cos(ang), persistent=False)
        self.register_buffer("sin", torch.sin(ang), persistent=False)

    def forward(self, x):  # x (B, NH, T, HS)
        T = x.shape[-2]
        cos = self.cos[:T].to(x.dtype)
        sin = self.sin[:T].to(x.dtype)
        x0, x1 = x[..., 0::2], x[..., 1::2]                            # (B, NH, T, HS/2)
        y0 = x0 * cos - x1 * sin
        y1 = x0 * sin + x1 * cos
        return torch.stack((y0, y1), dim=-1).flatten(-2)               # interleave back


class Attention(nn.Module):
    def __init__(self, cfg, use_sdpa):
        super().__init__()
        C = cfg.d_model
        self.n_heads = cfg.n_heads
        self.use_sdpa = use_sdpa
        self.q_proj = nn.Linear(C, C, bias=False)
        self.k_proj = nn.Linear(C, C, bias=False)
        self.v_proj = nn.Linear(C, C, bias=False)
        self.output_proj = nn.Linear(C, C, bias=False)
        self.rope = RoPE(C // cfg.n_heads, cfg.context)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        NH, HS = self.n_heads, C // self.n_heads

        def heads(t):
            return t.view(B, T, NH, HS).transpose(1, 2)                # (B, NH, T, HS)

        q = self.rope(heads(self.q_proj(x)))
        k = self.rope(heads(self.k_proj(x)))
        v = heads(self.v_proj(x))
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)              # (B, NH, T, T)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
            y = torch.softmax(s, dim=-1) @ v                           # (B, NH, T, HS)
        return self.output_proj(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg, use_sdpa):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model)
        self.attn = Attention(cfg, use_sdpa)
        self.ln2 = RMSNorm(cfg.d_model)
        self.ffn = SwiGLU(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, cfg, use_sdpa=False, init_seed=None, init=True):
        super().__init__()
        self.cfg = cfg
        self.token_embeddings = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, use_sdpa) for _ in range(cfg.n_layers))
        self.ln_final = RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        if init:  # init=False: torch's default init, for callers that draw their own (timing_model)
            self.reset_parameters(init_seed)

    @torch.no_grad()
    def reset_parameters(self, seed=None):
        """The course's init: linear std sqrt(2/(d_in+d_out)), embedding std 1, both cut at
        +-3 std; norms 1. With `seed`, a private generator (the global one is not touched)."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        for name, p in self.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_final.weight":
                p.fill_(1.0)
                continue
            std = 1.0 if name == "token_embeddings.weight" else math.sqrt(2.0 / (p.shape[0] + p.shape[1]))
            # Drawn on the CPU in float64 so the numbers do not depend on device or dtype.
            w = torch.empty(p.shape, dtype=torch.float64)
            nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=gen)
            p.copy_(w)

    def forward(self, inputs, targets=None, head_chunk=0):
        """inputs (B, T) int -> logits (B, T, V); with targets, the mean cross-entropy instead,
        and with head_chunk > 0 over that many rows at a time, each chunk's logits recomputed in
        the backward (torch.utils.checkpoint), so the (B*T, V) logits never exist at once. Inside
        forward so that wrappers' hooks (FSDP's gathers of the head) run around it."""
        x = self.token_embeddings(inputs)
        for layer in self.layers:
            x = layer(x)
        h = self.ln_final(x)
        if targets is None:
            return self.lm_head(h)
        h, y = h.reshape(-1, h.shape[-1]), targets.reshape(-1).long()
        if head_chunk <= 0:
            return F.cross_entropy(self.lm_head(h).float(), y)

        def chunk_loss(hc, yc):
            return F.cross_entropy(self.lm_head(hc).float(), yc, reduction="sum")
        from torch.utils.checkpoint import checkpoint
        total = sum(checkpoint(chunk_loss, h[i:i + head_chunk], y[i:i + head_chunk], use_reentrant=False)
                    for i in range(0, h.shape[0], head_chunk))
        return total / h.shape[0]

    def loss(self, inputs, targets):
        logits = self.forward(inputs)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1).long())


# ---------------------------------------------------------------- the flat layout


def flat_layout(cfg):
    """[(name, shape, offset)] in flat-buffer order, and the buffer length: as
    param_layout_make() in common/model_config.c."""
    V, C, Fd = cfg.vocab, cfg.d_model, cfg.d_ff
    entries = [("token_embeddings.weight", (V, C))]
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        entries += [(p + "ln1.weight", (C,)), (p + "attn.q_proj.weight", (C, C)),
                    (p + "attn.k_proj.weight", (C, C)), (p + "attn.v_proj.weight", (C, C)),
                    (p + "attn.output_proj.weight", (C, C)), (p + "ln2.weight", (C,)),
                    (p + "ffn.w1.weight", (Fd, C)), (p + "ffn.w3.weight", (Fd, C)),
                    (p + "ffn.w2.weight", (C, Fd))]
    entries += [("ln_final.weight", (C,)), ("lm_head.weight", (V, C))]

    def align(x):
        return (x + PARAM_ALIGN - 1) // PARAM_ALIGN * PARAM_ALIGN

    out, cur = [], 0
    for name, shape in entries:
        off = align(cur)
        out.append((name, shape, off))
        cur = off + int(np.prod(shape))
    return out, align(cur)


def to_flat(model, dtype=np.float32, grads=False):
    """The model's parameters (or their .grad) as one flat array in our layout; padding 0."""
    layout, total = flat_layout(model.cfg)
    flat = np.zeros(total, dtype=dtype)
    params = dict(model.named_parameters())
    for name, shape, off in layout:
        t = params[name].grad if grads else params[name]
        flat[off:off + int(np.prod(shape))] = t.detach().cpu().double().numpy().reshape(-1)
    return flat


@torch.no_grad()
def load_flat(model, flat):
    """Copies a flat array in our layout (e.g. written by the C code) into the model."""
    layout, total = flat_layout(model.cfg)
    flat = np.asarray(flat).reshape(-1)
    if flat.size < total:
        raise ValueError(f"flat buffer has {flat.size} elements, the layout needs {total}")
    params = dict(model.named_parameters())
    for name, shape, off in layout:
        src = torch.from_numpy(np.array(flat[off:off + int(np.prod(shape))]).reshape(shape))
        params[name].copy_(src.to(params[name].dtype))


def timing_model(cfg, use_sdpa=False, device="cuda"):
    """A TransformerLM for timing and memory runs (the benchmarks of stages 06 and 07): the
    course's init draws every weight on the CPU in float64 (minutes at XL) and neither time nor
    memory depends on it, so the weights are drawn on the device instead (normal, std 0.02;
    norms 1), from torch.manual_seed(1)."""
    torch.manual_seed(1)
    model = TransformerLM(cfg, use_sdpa=use_sdpa, init=False).to(device)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.fill_(1.0) if p.dim() == 1 else p.normal_(0.0, 0.02)
    return model


def dist_setup():
    """The benchmarks' start under torch.distributed.run: the NCCL process group, this rank's GPU,
    true fp32 matmuls (no TF32, as ours). Returns (rank, world size)."""
    import os
    import torch.distributed as dist
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return rank, dist.get_world_size()


def append_csv(path, header, rows):
    """Appends rows (lists of values) to a CSV, writing the header first if the file is new."""
    import os
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write(header + "\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")


def _self_check():
    """Naive and SDPA attention agree; the flat layout round-trips; init statistics."""
    cfg = config_by_name("tiny", context=64)
    naive = TransformerLM(cfg, use_sdpa=False, init_seed=1).double()
    sdpa = TransformerLM(cfg, use_sdpa=True, init_seed=1).double()
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, cfg.vocab, (2, 37), generator=g)
    y = torch.randint(0, cfg.vocab, (2, 37), generator=g)
    diff = (naive(x) - sdpa(x)).abs().max().item()
    assert diff < 1e-10, f"naive vs SDPA logits differ by {diff}"
    other = TransformerLM(cfg, init_seed=3).double()
    load_flat(other, to_flat(naive, dtype=np.float64))
    assert torch.equal(other.loss(x, y), naive.loss(x, y)), "flat round trip changed the model"
    layout, total = flat_layout(cfg)
    # Module registration order is the flat order, and names and shapes agree.
    assert [(n, tuple(s)) for n, s, _ in layout] == \
        [(n, tuple(p.shape)) for n, p in naive.named_parameters()], "layout and state dict differ"
    assert all(off % PARAM_ALIGN == 0 for _, _, off in layout) and total % PARAM_ALIGN == 0
    # The chunked head: the same loss and head gradient as the whole logits (float64; 74 rows in
    # chunks of 16, the last one short).
    whole = naive(x, y)
    gw = torch.autograd.grad(whole, naive.lm_head.weight)[0]
    chunked = naive(x, y, head_chunk=16)
    gc = torch.autograd.grad(chunked, naive.lm_head.weight)[0]
    assert abs(whole.item() - chunked.item()) < 1e-12 and (gw - gc).abs().max().item() < 1e-12, \
        "the chunked head differs from the whole logits"
    std = naive.token_embeddings.weight.std().item()
    print(f"torch_model self-check ok: naive vs SDPA {diff:.1e}, {total} flat elements, "
          f"embedding std {std:.4f} (truncated N(0,1) at 3: 0.9866)")


if __name__ == "__main__":
    _self_check()
