"""Point Transformer (point-transformer-pytorch, lucidrains) as its README writes it:
`PointTransformerLayer` (queries minus keys, relative positions through a small MLP, an
attention MLP and a softmax over the neighbours), optionally gathering each point's
`num_neighbors` nearest by `topk` and `gather`, with a mask over padded points; the
multi-head variant `MultiheadPointTransformerLayer`. A tiny classifier over a small point
cloud: a `Linear` embedding, `--depth` layers with residuals, a mean pool and a head.
Seeded, tiny, nothing downloaded.

    python tests/clients/train_point_transformer.py --steps 3 --neighbors 4
    memledger trace tests/clients/train_point_transformer.py --steps 2 -o pt.ledger

`--neighbors K` (k nearest), `--mask` (the last points of each cloud padded out),
`--multihead H`, `--accum N`, `--amp` (bf16 autocast), `--validate`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from point_transformer_pytorch import MultiheadPointTransformerLayer, PointTransformerLayer


class PointClassifier(nn.Module):
    def __init__(self, dim: int, depth: int, neighbors: int | None, heads: int) -> None:
        super().__init__()
        self.embed = nn.Linear(3, dim)
        if heads:
            make = lambda: MultiheadPointTransformerLayer(  # noqa: E731
                dim=dim, heads=heads, dim_head=dim // heads, num_neighbors=neighbors)
        else:
            make = lambda: PointTransformerLayer(  # noqa: E731
                dim=dim, pos_mlp_hidden_dim=16, attn_mlp_hidden_mult=2,
                num_neighbors=neighbors)
        self.layers = nn.ModuleList([make() for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, pos, mask=None):
        x = self.embed(pos)
        for layer in self.layers:
            x = layer(x, pos, mask=mask) + x
        x = self.norm(x)
        if mask is not None:
            x = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        else:
            x = x.mean(1)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--points", type=int, default=12)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--neighbors", type=int, default=None)
    p.add_argument("--multihead", type=int, default=0)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = PointClassifier(args.dim, args.depth, args.neighbors, args.multihead)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        pos = torch.randn(args.batch, args.points, 3)
        mask = None
        if args.mask:
            mask = torch.ones(args.batch, args.points, dtype=torch.bool)
            mask[:, -3:] = False
        logits = model(pos, mask)
        return F.cross_entropy(logits, torch.randint(0, 10, (args.batch,)))

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
