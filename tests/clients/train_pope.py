"""PoPE-pytorch (tests/clients/train_pope.py): polar coordinate positional embeddings
(lucidrains' PoPE-pytorch), in a tiny causal language model written here as its README
uses the library: `PoPE(dim, heads=...)` called with the sequence length gives the
frequencies and the learned (clamped) key bias, and each attention applies them to its
queries and keys. Seeded, tiny, CPU (the library's Triton kernels are CUDA-only; its
non-fused paths run), nothing downloaded.

    python tests/clients/train_pope.py --steps 3 --attn flash
    memledger trace tests/clients/train_pope.py --steps 2 -o p.ledger -- --attn sim

`--attn`: `manual` (`apply_pope_to_qk`, then softmax attention by hand), `complex`
(`apply_pope_to_qk(..., return_complex=True)`: complex64 queries and keys, the similarity
the real part of `q @ k.conj()`), `sim` (`compute_attn_similarity`), `flash`
(`flash_attn_with_pope(..., causal=True)`: SDPA behind it). `--partial` rotates half the
head dimension; `--axial` is a classifier over a 4 x 4 grid of patches with `AxialPoPE`
(no causal mask). `--accum N`, `--clip C`, `--opt adamw|sgd`.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from PoPE_pytorch import (AxialPoPE, PoPE, apply_pope_to_qk, compute_attn_similarity,
                          flash_attn_with_pope)

HEAD = 32   # compute_attn_similarity asks for a head dimension of 32, 48, 64, 128 or 256


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, mode: str, causal: bool) -> None:
        super().__init__()
        self.heads, self.mode, self.causal = heads, mode, causal
        self.to_qkv = nn.Linear(dim, 3 * heads * HEAD, bias=False)
        self.to_out = nn.Linear(heads * HEAD, dim, bias=False)

    def forward(self, x, pos):
        b, n, _ = x.shape
        q, k, v = self.to_qkv(x).view(b, n, 3, self.heads, HEAD).permute(2, 0, 3, 1, 4)
        if self.mode == "flash":
            out = flash_attn_with_pope(q, k, v, pos_emb=pos, causal=self.causal)
        else:
            if self.mode == "sim":
                sim = compute_attn_similarity(q, k, pos) * HEAD ** -0.5
            elif self.mode == "complex":
                qc, kc = apply_pope_to_qk(pos, q, k, return_complex=True)
                sim = torch.einsum("bhid,bhjd->bhij", qc, kc.conj()).real * HEAD ** -0.5
            else:
                qr, kr = apply_pope_to_qk(pos, q, k)
                sim = qr @ kr.transpose(-1, -2) * HEAD ** -0.5
            if self.causal:
                sim = sim.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -1e4)
            out = sim.softmax(dim=-1) @ v
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mode: str, causal: bool) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, mode, causal)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, pos):
        x = x + self.attn(self.norm1(x), pos)
        return x + self.ff(self.norm2(x))


class Net(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        dim, heads = args.dim, args.heads
        rot = HEAD // 2 if args.partial else HEAD
        if args.axial:
            self.embed = nn.Linear(12, dim)   # a 2 x 2 x 3 patch
            self.pope = AxialPoPE(dim=rot, heads=heads, axial_dims=(rot // 2, rot // 2))
            self.head = nn.Linear(dim, 10)
        else:
            self.embed = nn.Embedding(64, dim)
            self.pope = PoPE(rot, heads=heads)
            self.head = nn.Linear(dim, 64)
        self.blocks = nn.ModuleList(Block(dim, heads, args.attn, not args.axial)
                                    for _ in range(args.depth))
        self.norm = nn.LayerNorm(dim)
        self.axial = args.axial

    def forward(self, x):
        pos = self.pope((4, 4)) if self.axial else self.pope(x.shape[1])
        h = self.embed(x)
        for block in self.blocks:
            h = block(h, pos)
        h = self.norm(h)
        return self.head(h.mean(dim=1) if self.axial else h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--attn", default="manual", choices=["manual", "complex", "sim", "flash"])
    p.add_argument("--partial", action="store_true")
    p.add_argument("--axial", action="store_true")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--opt", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    args = p.parse_args()
    torch.manual_seed(0)

    model = Net(args)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3) if args.opt == "adamw" else \
        torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def loss_of() -> torch.Tensor:
        if args.axial:
            x = torch.randn(args.batch, 16, 12)
            return F.cross_entropy(model(x), torch.randint(0, 10, (args.batch,)))
        ids = torch.randint(0, 64, (args.batch, args.seq + 1))
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, 64), ids[:, 1:].reshape(-1))

    for step in range(args.steps):
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
