"""PoPE-pytorch (tests/clients/train_pope.py): polar positional embeddings (`PoPE`: per
position frequencies and a learned, clamped per-head key bias; `apply_pope_to_qk` makes q and
k softplus magnitudes and rotates them, `(d two)` cos / sin halves, so q and k come out twice
the rotated width) in the attention of a small causal language model, as the library's
README does, and its axial variant (`AxialPoPE`, positions on a 2-D grid) in a patch
encoder. Random tokens / patches, seeded, tiny, nothing downloaded; the pure-torch paths
(the Triton kernels are CUDA only).

    python tests/clients/train_pope.py --steps 3 --attn sdpa
    memledger trace tests/clients/train_pope.py --steps 2 -o p.ledger -- --attn manual
    memledger compare tests/clients/train_pope.py -p 'checkpoint:blocks.*' -- --attn sdpa

Attention (`--attn`):

- `sdpa`: `flash_attn_with_pope(q, k, v, pos_emb, causal=True)`: the non-fused path, the
  rotated q / k into `F.scaled_dot_product_attention`.
- `manual`: `compute_attn_similarity(q, k, pos_emb)` (einsum of the rotated q / k), a causal
  mask, softmax, `@ v`.
- `mixed`: `flash_attn_with_pope(..., pope_pos_emb_indices=...)`: only the positions listed
  get the rotation (the others' frequencies padded with zeros); its manual einsum path,
  `torch.where` between the rotated and unrotated similarities.
- `axial`: an image-patch encoder (non-causal), `AxialPoPE(axial_dims=(16, 16))` over a
  4 x 4 grid, `flash_attn_with_pope` without a causal mask, mean pooled to classes.

Options: `--rotate D` the PoPE width (32: all of the 32-wide heads; 16: a partial rotation,
the rest concatenated), `--kv-heads` (grouped-query attention: k / v repeated), `--mask`
(a key padding mask, `sdpa` only), `--optim adam|adamw|sgd`, `--accum N`, `--clip`,
`--validate` (a loss under no_grad in eval each step). `--bug zero-late`: the gradients
zeroed between backward and the step.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from PoPE_pytorch import AxialPoPE, PoPE, compute_attn_similarity, flash_attn_with_pope

HEAD = 32   # compute_attn_similarity asserts a head width in {32, 48, 64, 128, 256}


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, attn: str) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.attn = heads, kv_heads, attn
        self.to_q = nn.Linear(dim, heads * HEAD, bias=False)
        self.to_kv = nn.Linear(dim, 2 * kv_heads * HEAD, bias=False)
        self.to_out = nn.Linear(heads * HEAD, dim, bias=False)

    def forward(self, x, pos_emb, mask=None, indices=None):
        b, n, _ = x.shape
        q = self.to_q(x).view(b, n, self.heads, HEAD).transpose(1, 2)       # (B, h, N, d)
        k, v = self.to_kv(x).view(b, n, 2, self.kv_heads, HEAD).permute(2, 0, 3, 1, 4)
        if self.attn == "manual":
            g = self.heads // self.kv_heads
            sim = compute_attn_similarity(q, k, pos_emb) * HEAD ** -0.5      # (B, h, N, N)
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            attn = sim.masked_fill(~causal, float("-inf")).softmax(dim=-1)
            out = attn @ v.repeat_interleave(g, dim=1) if g > 1 else attn @ v
        else:
            causal = self.attn != "axial"
            if mask is not None and causal:
                # the library's non-fused path hands SDPA both attn_mask and is_causal,
                # which it refuses: the causal mask goes into the padding one, (B, N, N)
                mask = mask[:, None, :] & torch.ones(n, n, dtype=torch.bool).tril()
                causal = False
            out = flash_attn_with_pope(q, k, v, pos_emb=pos_emb, mask=mask, causal=causal,
                                       pope_pos_emb_indices=indices)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, attn: str) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, kv_heads, attn)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, pos_emb, mask=None, indices=None):
        x = x + self.attn(self.norm1(x), pos_emb, mask, indices)
        return x + self.ff(self.norm2(x))


class PoPELM(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, heads: int, kv_heads: int,
                 attn: str, rotate: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pope = PoPE(rotate, heads=heads)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads, attn) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, vocab, bias=False)
        self.mixed = attn == "mixed"

    def forward(self, tokens, mask=None):
        n = tokens.shape[1]
        # mixed: every other position rotated (a prefix of patches among text, say)
        indices = torch.arange(0, n, 2) if self.mixed else None
        pos_emb = self.pope(n // 2 if self.mixed else n)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, pos_emb, mask, indices)
        return self.to_logits(self.norm(x))


class AxialPatchEncoder(nn.Module):
    def __init__(self, grid: int, patch_dim: int, dim: int, depth: int, heads: int,
                 classes: int) -> None:
        super().__init__()
        self.grid = grid
        self.to_patch = nn.Linear(patch_dim, dim)
        self.pope = AxialPoPE(HEAD, heads=heads, axial_dims=(HEAD // 2, HEAD // 2))
        self.blocks = nn.ModuleList(Block(dim, heads, heads, "axial") for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, patches):
        pos_emb = self.pope((self.grid, self.grid))
        x = self.to_patch(patches)
        for block in self.blocks:
            x = block(x, pos_emb)
        return self.head(x.mean(dim=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "manual", "mixed", "axial"])
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=0, help="0: as many as --heads")
    p.add_argument("--rotate", type=int, default=HEAD)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--bug", default="none", choices=["none", "zero-late"])
    args = p.parse_args()
    torch.manual_seed(0)

    vocab, grid, classes = 40, 4, 5
    if args.attn == "axial":
        model = AxialPatchEncoder(grid, 12, args.dim, args.depth, args.heads, classes)
    else:
        model = PoPELM(vocab, args.dim, args.depth, args.heads, args.kv_heads or args.heads,
                       args.attn, args.rotate)
    if args.optim == "adam":
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def loss_of() -> torch.Tensor:
        if args.attn == "axial":
            patches = torch.randn(args.batch, grid * grid, 12)
            return F.cross_entropy(model(patches), torch.randint(0, classes, (args.batch,)))
        tokens = torch.randint(0, vocab, (args.batch, args.seq + 1))
        mask = None
        if args.mask:   # the last two keys of the second sequence are padding
            mask = torch.ones(args.batch, args.seq, dtype=torch.bool)
            mask[1, -2:] = False
        logits = model(tokens[:, :-1], mask)
        return F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum).backward()
        if args.bug == "zero-late":
            optim.zero_grad()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
