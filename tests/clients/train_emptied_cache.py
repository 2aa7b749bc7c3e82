"""A cache a module fills when it finds it empty, and a loop that empties it before every
forward, in plain torch (tranception-pytorch's `LearnedAlibiPosBias` in small; Note [A
cache emptied before every call] in memledger/replay/emptied_cache.py):

    memledger predict ... -p 'checkpoint:blocks.*'    # refused, as measure refuses it
    python tests/clients/train_emptied_cache.py --case learned --steps 2

Blocks of a one-head attention whose scores get a distance bias, `-|i - j|`, made on the
call that finds the `bias` buffer empty (registered with `register_buffer`) and sliced
from it on later calls. `--case learned`: the bias is scaled by a learned slope (it has an
autograd graph; without `--keep` emptying it the second step fails in torch: "Trying to
backward through the graph a second time"). `--case fixed`: no slope (no graph). The loop
empties every block's cache before each forward unless `--keep`.
"""

import argparse

import torch
import torch.nn as nn


class DistanceBias(nn.Module):
    def __init__(self, learned: bool) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.full((1,), 0.5)) if learned else None
        self.register_buffer("bias", None, persistent=False)

    def forward(self, n: int) -> torch.Tensor:
        if self.bias is not None and self.bias.shape[-1] >= n:
            return self.bias[:n, :n]                       # the cache: a slice
        ar = torch.arange(n, dtype=torch.float32)
        bias = -(ar[None, :] - ar[:, None]).abs()          # (n, n)
        if self.slope is not None:
            bias = bias * self.slope                       # saves the slope's operand
        self.register_buffer("bias", bias, persistent=False)
        return bias


class Block(nn.Module):
    def __init__(self, d: int, learned: bool) -> None:
        super().__init__()
        self.qk = nn.Linear(d, 2 * d)
        self.v = nn.Linear(d, d)
        self.pos = DistanceBias(learned)

    def forward(self, x: torch.Tensor) -> torch.Tensor:    # (B, N, D)
        q, k = self.qk(x).chunk(2, dim=-1)
        sim = q @ k.transpose(-1, -2) + self.pos(x.shape[1])   # (B, N, N)
        return x + sim.softmax(dim=-1) @ self.v(x)


class Net(nn.Module):
    def __init__(self, d: int, depth: int, learned: bool) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, learned) for _ in range(depth)])
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)).mean()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--case", default="learned", choices=["learned", "fixed"])
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(16, 2, args.case == "learned")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        if not args.keep:
            for m in model.modules():
                if isinstance(m, DistanceBias):
                    m.bias = None   # emptied: the learned bias holds last step's graph
        loss = model(torch.randn(2, 8, 16))
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
