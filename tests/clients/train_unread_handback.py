"""Two layers that each write a memory from a save-list output on a branch no loss reaches,
as infini-transformer-pytorch's attention layers write their next compressive memory from
`to_qkv`'s output (its delta rule's `lerp`, `sub`, clones), and a wrapper that calls
`backward()` inside its own forward while it still holds the new memories, as that
library's `InfiniTransformerWrapper(..., backward=True)` does. Each layer's `fc` (an `mm`,
on `selective`'s default save list) output `h` is saved by the layer's `sin` (on the
loss's path) and by its `cos` (the memory's: never unpacked, its node alive while the
memory is held). Plain torch, seeded.

    python tests/clients/train_unread_handback.py --steps 2
    memledger trace tests/clients/train_unread_handback.py --steps 1 -o u.ledger
    memledger compare tests/clients/train_unread_handback.py -p 'selective:layers.*'

Note [A handed-back save no backward reads] (memledger/replay/engine.py).
"""

import argparse

import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.out = nn.Linear(4 * d, d, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x)                       # `mm`: SAC's cache keeps it for the re-run
        y = self.out(h.sin().exp())          # sin saves h (read); exp its output (dropped)
        mem = h.cos().mean(0)                # cos saves h: a branch no loss reaches
        return y, mem


class Wrapper(nn.Module):
    def __init__(self, d: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(d) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        mems = []
        for layer in self.layers:
            x, mem = layer(x)
            mems.append(mem)
        loss = x.pow(2).mean()
        loss.backward()                      # inside the forward, the memories still held
        return loss.detach(), [m.detach() for m in mems]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Wrapper(args.dim, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        loss, _ = model(torch.randn(args.batch, args.dim))
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
