"""A layer whose forward checkpoints a plain function that calls no module.

    python tests/clients/train_fn_checkpoint.py --steps 2 [--reentrant]

Each `Mixer` projects its input (`proj`, a Linear), runs `_scan` (elementwise products
and a cumulative sum, no module) through `torch.utils.checkpoint.checkpoint` in its own
forward, as gateloop-transformer's GateLoopedAttention checkpoints `gate_loop_operator`,
and projects back (`out`); each `Block` runs a LayerNorm and its Mixer. `--reentrant`: torch's older kind (the default where a library
names no `use_reentrant`, as gateloop's does).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def _scan(h: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h * h + 1).cumsum(-1) * h


class Mixer(nn.Module):
    def __init__(self, width: int, reentrant: bool, rng: bool = True) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.kw = {"use_reentrant": reentrant, "preserve_rng_state": rng}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(_scan, self.proj(x), **self.kw)
        return x + self.out(h)


class Block(nn.Module):
    def __init__(self, width: int, reentrant: bool, rng: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mix = Mixer(width, reentrant, rng)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mix(self.norm(x))


class Net(nn.Module):
    def __init__(self, width: int, depth: int, reentrant: bool, rng: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(width, reentrant, rng) for _ in range(depth))
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--reentrant", action="store_true")
    p.add_argument("--no-rng-state", action="store_true",
                   help="preserve_rng_state=False: the checkpoint keeps no generator state")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, args.depth, args.reentrant, not args.no_rng_state)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.width, generator=gen)
        y = torch.randint(0, 4, (args.batch_size,), generator=gen)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
