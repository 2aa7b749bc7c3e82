"""An open item's repro (docs/decisions.md, fifty-first session, se3-transformer-pytorch,
"Seen, left alone"): blocks handed a dict {h, v} that replace both entries, the `v` path a
side output the loss drops (as se3-transformer's EGNN layers update the degree-1 features
while the loss reads type-0), each block keeping `list(feats.items())` to its return (the
EGNN's `htypes`). `checkpoint:0` (the whole body) is predicted one (128, 64) fp32 tensor,
32,768 B, under measured from depth 2 on; exact at depth 1 and with `--no-items`. Exact
since Note [Held by a container the region made] (memledger/replay/engine.py;
tests/clients/test_side_output.py). Plain torch, seeded.

    python tests/clients/train_side.py --depth 2
    memledger predict ... -p checkpoint:0      # `--ckpt`: the script's own checkpoint
"""

import argparse
import torch
import torch.nn as nn
import torch.utils.checkpoint


class Block(nn.Module):
    def __init__(self, d, items=True):
        super().__init__()
        self.items = items
        self.f = nn.Linear(d, d)
        self.g = nn.Linear(d, d)
        self.gate = nn.Linear(d, d)

    def forward(self, feats):
        items = list(feats.items()) if self.items else None   # EGNN's `htypes`
        h = feats["h"]
        new_h = self.f(h).relu() + h
        feats["h"] = new_h
        feats["v"] = feats["v"] + self.g(h)
        feats["v"] = feats["v"] * torch.sigmoid(self.gate(new_h))
        return feats


class Body(nn.Module):
    def __init__(self, d, depth, items=True):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, items) for _ in range(depth))

    def forward(self, x):
        feats = {"h": x * 1.0, "v": x * 2.0}
        for b in self.blocks:
            feats = b(feats)
        return feats["h"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--ckpt", action="store_true")
    p.add_argument("--no-items", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(Body(64, args.depth, not args.no_items))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x = torch.randn(128, 64)
        if args.ckpt:
            out = torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)
        else:
            out = model(x)
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
