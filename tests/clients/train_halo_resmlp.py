"""halonet-pytorch and res-mlp-pytorch (lucidrains) as their READMEs build them, in small
image classifiers on random images. Seeded, tiny, nothing downloaded.

    python tests/clients/train_halo_resmlp.py --steps 3 --model halo
    memledger trace tests/clients/train_halo_resmlp.py --steps 2 -o h.ledger -- --model halo
    memledger compare tests/clients/train_halo_resmlp.py -p 'checkpoint:blocks.*' -- --model halo

Models (`--model`):

- `halo`: a conv stem (`Conv2d` + `--norm` + GELU), then `--depth` residual blocks of our
  own (`HaloBlock`: a norm, halonet-pytorch's `HaloAttention` (the image cut into
  `--block` x `--block` blocks by an einops rearrange, keys and values from each block with
  a `--halo` border gathered by `F.unfold`, relative position logits over the haloed window,
  padding masked by `masked_fill_` on a mask made in every forward), a residual, then a
  1x1-conv MLP), a mean pool and a head. `--heads`, `--dim-head`, `--norm bn|gn` (BatchNorm2d
  or GroupNorm(1, C)), `--size` (the image side; a multiple of `--block`).
- `resmlp`: res-mlp-pytorch's `ResMLP(image_size, patch_size, dim, depth, num_classes)`, a
  top-level `nn.Sequential`: `0` a `Rearrange` into patches, `1` the patch Linear, `2` ..
  `depth+1` the blocks (each an `nn.Sequential` of two `PreAffinePostLayerScale`: an Affine,
  a `Conv1d` over the patches, a layer scale; an Affine, a Linear-GELU-Linear MLP), then an
  `Affine`, a `Reduce` mean pool and the head. `--expansion` (the MLP's factor).

Both: `--accum N` (gradient accumulation), `--amp` (bf16 autocast), `--validate` (a loss
under no_grad in eval mode each step), `--sgd` (momentum) or AdamW, `--clip`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from halonet_pytorch import HaloAttention
from res_mlp_pytorch import ResMLP


class HaloBlock(nn.Module):
    """x + HaloAttention(norm(x)), then x + MLP(norm(x)) with 1x1 convs."""

    def __init__(self, dim: int, block: int, halo: int, heads: int, dim_head: int,
                 norm: str) -> None:
        super().__init__()
        make_norm = (lambda: nn.BatchNorm2d(dim)) if norm == "bn" else \
            (lambda: nn.GroupNorm(1, dim))
        self.norm1 = make_norm()
        self.attn = HaloAttention(dim=dim, block_size=block, halo_size=halo,
                                  dim_head=dim_head, heads=heads)
        self.norm2 = make_norm()
        self.mlp = nn.Sequential(nn.Conv2d(dim, dim * 2, 1), nn.GELU(),
                                 nn.Conv2d(dim * 2, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class HaloNet(nn.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        dim = args.dim
        norm = nn.BatchNorm2d(dim) if args.norm == "bn" else nn.GroupNorm(1, dim)
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 3, padding=1), norm, nn.GELU())
        self.blocks = nn.ModuleList(
            HaloBlock(dim, args.block, args.halo, args.heads, args.dim_head, args.norm)
            for _ in range(args.depth))
        self.head = nn.Linear(dim, 10)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.stem(img)                  # (B, dim, S, S)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x.mean(dim=(2, 3)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="halo", choices=["halo", "resmlp"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--block", type=int, default=4)
    p.add_argument("--halo", type=int, default=1)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--norm", default="bn", choices=["bn", "gn"])
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--expansion", type=int, default=4)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--clip", type=float, default=0.0)
    args = p.parse_args()
    torch.manual_seed(0)

    if args.model == "halo":
        model = HaloNet(args)
    else:
        model = ResMLP(image_size=args.size, patch_size=args.patch, dim=args.dim,
                       depth=args.depth, num_classes=10, expansion_factor=args.expansion)
    optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9) if args.sgd else \
        torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        img = torch.randn(args.batch, 3, args.size, args.size)
        return F.cross_entropy(model(img), torch.randint(0, 10, (args.batch,)))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
