"""Blocks handed a dict of features that replace its entry, as se3-transformer-pytorch's
EGNN layers do (`features[degree] = features[degree] + update`): the replaced tensor is
held by the dict alone, so it goes at the assignment, before the block's peak (a
(batch, batch) fp32 product made under no_grad). Plain torch, seeded.

    python tests/clients/train_dict_handed.py --steps 2
    memledger trace tests/clients/train_dict_handed.py --steps 2 -o d.ledger

Note [Versions read without holding the tensor] (memledger/trace/outside_state.py).
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, feats: dict) -> dict:
        feats["h"] = feats["h"] * 0.5          # the entry's old tensor goes here (mul by a
        z = self.up(feats["h"])                # number saves nothing)
        with torch.no_grad():                  # (batch, batch) fp32: the block's peak
            scale = (z @ z.T).abs().mean()
        feats["h"] = feats["h"] + self.down(torch.relu(z)) / (1 + scale)
        return feats


class Body(nn.Module):
    """`--body`: the dict made inside one module (as SE3Transformer makes its features),
    which a policy can re-run whole."""

    def __init__(self, d: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = {"h": x * 1.0}
        for block in self.blocks:
            feats = block(feats)
        return feats["h"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--body", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.body:
        body = nn.Sequential(Body(args.dim, args.depth))   # selected as `0`
        optim = torch.optim.SGD(body.parameters(), lr=1e-2)
    else:
        blocks = nn.ModuleList(Block(args.dim) for _ in range(args.depth))
        optim = torch.optim.SGD(blocks.parameters(), lr=1e-2)
    for step in range(args.steps):
        if args.body:
            loss = body(torch.randn(args.batch, args.dim)).pow(2).mean()
        else:
            feats = {"h": torch.randn(args.batch, args.dim)}
            for block in blocks:
                feats = block(feats)
            loss = feats["h"].pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
