"""axial-attention (lucidrains) as its README writes it: an `AxialImageTransformer` (per
layer, attention along each image axis (`PermuteToFrom(PreNorm(SelfAttention))`: permute,
merge all but the axis, attend, permute back) and two conv feed-forwards (`ChanLayerNorm`,
3x3 conv, in-place LeakyReLU, 3x3 conv)), with its axial positional embedding, run either
`reversible=True` (the default: a custom autograd Function runs every block under no_grad,
keeps only the output (a ctx attribute, not saved through autograd) and rebuilds each
block's input in backward by recomputing it under enable_grad) or as a plain residual
`Sequential`; a 1x1 conv stem and a mean-pool linear head make it an image classifier.
Seeded, tiny, nothing downloaded.

    python tests/clients/train_axial.py --steps 3
    memledger trace tests/clients/train_axial.py --steps 2 -o axial.ledger -- --plain

`--plain` (reversible=False), `--no-pos` (no axial positional embedding), `--attn` (an
`AxialAttention` layer, summed over both axes, in front of the transformer), `--accum N`,
`--amp` (bf16 autocast), `--validate` (a loss under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from axial_attention import AxialAttention, AxialImageTransformer


class Classifier(nn.Module):
    def __init__(self, dim: int, depth: int, size: int, reversible: bool, pos: bool,
                 attn: bool, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 1)
        self.attn = AxialAttention(dim=dim, dim_index=1, heads=2, num_dimensions=2) \
            if attn else None
        self.body = AxialImageTransformer(dim=dim, depth=depth, heads=2,
                                          reversible=reversible,
                                          axial_pos_emb_shape=(size, size) if pos else None)
        self.head = nn.Linear(dim, classes)

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.stem(img)
        if self.attn is not None:
            x = x + self.attn(x)
        x = self.body(x)
        return self.head(x.mean(dim=(2, 3)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--size", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--plain", action="store_true")
    p.add_argument("--no-pos", action="store_true")
    p.add_argument("--attn", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = Classifier(args.dim, args.depth, args.size, not args.plain, not args.no_pos,
                       args.attn)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        img = torch.randn(args.batch, 3, args.size, args.size)
        return F.cross_entropy(model(img), torch.randint(0, 10, (args.batch,)))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
