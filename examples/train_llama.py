"""A Llama-style decoder (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention)
trained with AdamW on random tokens. Written here; no weights are downloaded.

    python examples/train_llama.py --steps 5                        # tiny, for real
    memledger trace examples/train_llama.py --steps 2 -o llama.ledger
    memledger trace examples/train_llama.py --fake --steps 1 -o 7b.ledger -- \\
        --size 7b --dtype bf16 --batch-size 1 --seq-len 2048        # 7B, never allocated
    memledger plan 7b.ledger --budget 80GiB

Sizes (--size) follow the Llama papers' shapes; any field can be overridden by its flag.
"""

import argparse
import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int = 256      # tokens
    dim: int = 64              # model width d
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 4        # < n_heads: grouped-query attention
    hidden_dim: int = 0        # SwiGLU width; 0: 8/3·d rounded up to `multiple_of`
    multiple_of: int = 32
    max_seq_len: int = 64      # rotary table length
    norm_eps: float = 1e-5


SIZES = {
    "tiny": LlamaConfig(),
    "small": LlamaConfig(vocab_size=32000, dim=768, n_layers=12, n_heads=12, n_kv_heads=12,
                         max_seq_len=2048),
    "1b": LlamaConfig(vocab_size=32000, dim=2048, n_layers=22, n_heads=32, n_kv_heads=4,
                      hidden_dim=5632, max_seq_len=2048),                  # TinyLlama-1.1B
    "7b": LlamaConfig(vocab_size=32000, dim=4096, n_layers=32, n_heads=32, n_kv_heads=32,
                      hidden_dim=11008, max_seq_len=4096),                 # Llama-2-7B
    "13b": LlamaConfig(vocab_size=32000, dim=5120, n_layers=40, n_heads=40, n_kv_heads=40,
                       hidden_dim=13824, max_seq_len=4096),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()                                              # norms run in fp32
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float = 10000.0):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)   # (hd/2,)
    ang = torch.outer(torch.arange(seq_len).float(), inv)                    # (T, hd/2)
    return ang.cos(), ang.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]                      # (B, nh, T, hd/2) each
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2).type_as(x)                         # (B, nh, T, hd)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv = cfg.n_heads, cfg.n_kv_heads
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hd)
        k = self.wk(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)     # (B, nkv, T, hd)
        v = self.wv(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.n_kv != self.n_heads:                              # grouped-query attention
            k = k.repeat_interleave(self.n_heads // self.n_kv, dim=1)
            v = v.repeat_interleave(self.n_heads // self.n_kv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hd)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        hidden = cfg.hidden_dim or cfg.multiple_of * math.ceil(8 * cfg.dim / 3 / cfg.multiple_of)
        self.w1 = nn.Linear(cfg.dim, hidden, bias=False)    # gate
        self.w3 = nn.Linear(cfg.dim, hidden, bias=False)    # up
        self.w2 = nn.Linear(hidden, cfg.dim, bias=False)    # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rotary_tables(cfg.dim // cfg.n_heads, cfg.max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)   # (T_max, hd/2)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        T = tokens.shape[1]
        x = self.tok_embeddings(tokens)                           # (B, T, d)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))                          # (B, T, vocab)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--n-layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: parameters, gradients and AdamW state all in bfloat16")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    args = p.parse_args()

    cfg = SIZES[args.size]
    cfg = replace(cfg, max_seq_len=max(cfg.max_seq_len, args.seq_len),
                  **{k: v for k, v in (("n_layers", args.n_layers), ("dim", args.dim)) if v})
    torch.manual_seed(0)
    model = Llama(cfg).to(args.device)
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        batch = torch.randint(cfg.vocab_size, (args.batch_size, args.seq_len + 1), generator=gen)
        batch = batch.to(args.device)
        x, y = batch[:, :-1], batch[:, 1:]                    # (B, T) inputs and targets
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step:4d}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
