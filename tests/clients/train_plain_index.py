"""A constant index a module keeps as a plain attribute, in plain torch: each block holds
`self.idx` (an int64 tensor made at init, not a registered buffer, as lambda-networks'
LambdaLayer holds its `rel_pos`) and gathers a learned table with it in every forward;
`index` saves the indices for backward. `--buffer` registers it instead. `--calls K` applies
the model to its own output K times a step (a rollout: each block saves its index K times).

    python tests/clients/train_plain_index.py --steps 3
    memledger trace tests/clients/train_plain_index.py --steps 2 -o pi.ledger
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int, n: int, buffer: bool):
        super().__init__()
        self.table = nn.Parameter(torch.randn(2 * n - 1, dim))
        idx = (torch.arange(n)[None, :] - torch.arange(n)[:, None]) + n - 1
        if buffer:
            self.register_buffer("idx", idx)
        else:
            self.idx = idx
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.table[self.idx]                  # (n, n, dim)
        return x + torch.tanh(self.proj(x) + bias.mean(1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--buffer", action="store_true")
    p.add_argument("--calls", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)
    n, dim = 32, 8
    model = nn.Sequential(*[Block(dim, n, args.buffer) for _ in range(2)])
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        if args.calls == 1:
            loss = model(torch.randn(4, n, dim)).square().mean()
        else:   # a rollout: the model fed its own output
            x = model(torch.randn(4, n, dim))
            for _ in range(args.calls - 1):
                x = model(x)
            loss = x.square().mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
