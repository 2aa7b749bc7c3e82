"""Two backward passes per step, as people write them (helper scripts for the policy tests).

    python tests/clients/train_backward_twice.py --mode retain     # two heads, retain_graph
    python tests/clients/train_backward_twice.py --mode inplace    # Linear + ReLU(inplace)
    python tests/clients/train_backward_twice.py --mode mrbp       # memory replay backprop

- `retain`: two losses on two heads; the first backward keeps the graph
  (`retain_graph=True`) for the second, so every block's saved tensors are read twice.
  torch's checkpoint re-runs a region for each pass; its selective checkpoint refuses the
  second ("Trying to backward an extra time").
- `inplace`: one backward; a block ends in `ReLU(inplace=True)` after a Linear, so the
  Linear's output (which selective checkpointing keeps by default) is changed in place.
- `mrbp`: memory replay backprop as recurrent-memory-transformer-pytorch's wrapper runs it
  (`memory_replay_backprop=True`): the segments' memories are made under no_grad, then each
  segment, last first, is run again with gradients on its memories and gets two backward
  passes, `loss.backward(retain_graph=True)` and then its next memories' backward with the
  gradient the later segment left on them; every segment's loss is summed, graphs and all.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(32, 64), nn.ReLU(inplace=True) if inplace else nn.GELU(),
                          nn.Linear(64, 32)) for _ in range(2))
        self.h1, self.h2 = nn.Linear(32, 4), nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for b in self.blocks:
            x = x + b(x)
        return self.h1(x), self.h2(x)


class Recurrent(nn.Module):
    """Memory tokens concatenated before a segment's tokens, two residual MLP blocks, a
    loss on the segment's tokens and the memory tokens' outputs as the next memories."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 32)) for _ in range(2))
        self.head = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, mem: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.cat([mem, x], dim=1)
        for b in self.blocks:
            h = h + b(h)
        return self.head(h[:, MEMORY:]).pow(2).mean(), h[:, :MEMORY]


MEMORY = 4


def memory_replay_step(model: Recurrent, segments: int) -> None:
    xs = [torch.randn(4, 8, 32) for _ in range(segments)]
    mems = []
    with torch.no_grad():
        mem = torch.zeros(4, MEMORY, 32)
        for x in xs:
            mems.append(mem)
            _, mem = model(x, mem)
    total, grad = 0.0, None
    for x, mem in reversed(list(zip(xs, mems))):
        mem = mem.detach().requires_grad_()
        loss, nxt = model(x, mem)
        loss.backward(retain_graph=True)
        if grad is not None:
            nxt.backward(grad)
        grad = mem.grad
        total = total + loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["retain", "inplace", "mrbp"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--segments", type=int, default=2, help="mrbp: segments per step")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.mode == "mrbp":
        model = Recurrent()
        opt = torch.optim.Adam(model.parameters())
        for _ in range(args.steps):
            memory_replay_step(model, args.segments)
            opt.step()
            opt.zero_grad()
        return
    model = Net(inplace=args.mode == "inplace")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        o1, o2 = model(torch.randn(16, 32))
        opt.zero_grad()
        F.cross_entropy(o1, torch.randint(0, 4, (16,))).backward(
            retain_graph=args.mode == "retain")
        if args.mode == "retain":
            o2.pow(2).mean().backward()
        opt.step()


if __name__ == "__main__":
    main()
