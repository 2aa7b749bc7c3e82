"""Blocks handed their features inside an object that is not a tuple, list or dict, as
pytorch-frame hands its models a `TensorFrame` (its tensors in attributes, a dict of
them by stype) and PyG a `Data`: a dataclass (`--box dataclass`) or a plain object
(`--box object`); `--box dict` is the control. Each block scales its input by a number
(which saves nothing) before its Linears, so the tensor handed in lives only as long as
whoever holds the box. Plain torch, seeded.

    python tests/clients/train_held_in_object.py --steps 2 --box dataclass
    memledger trace tests/clients/train_held_in_object.py --steps 2 -o h.ledger

Note [Tensors handed inside an object] (memledger/trace/collector.py).
"""

import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Frame:
    h: torch.Tensor


class Plain:
    def __init__(self, h: torch.Tensor) -> None:
        self.feat = {"h": h}


def box(kind: str, h: torch.Tensor):
    return {"h": h} if kind == "dict" else Frame(h) if kind == "dataclass" else Plain(h)


def unbox(b) -> torch.Tensor:
    return b["h"] if isinstance(b, dict) else b.h if isinstance(b, Frame) else b.feat["h"]


class Block(nn.Module):
    def __init__(self, d: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, b):
        h = unbox(b) * 0.5                     # a mul by a number saves nothing
        return box(self.kind, h + self.down(torch.relu(self.up(h))))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--box", default="dataclass", choices=["dataclass", "object", "dict"])
    args = p.parse_args()
    torch.manual_seed(0)
    blocks = nn.ModuleList(Block(args.dim, args.box) for _ in range(args.depth))
    optim = torch.optim.SGD(blocks.parameters(), lr=1e-2)
    for step in range(args.steps):
        b = box(args.box, torch.randn(args.batch, args.dim))
        for block in blocks:
            b = block(b)
        loss = unbox(b).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
