"""Pre-LN blocks under CPU bf16 autocast with an fp32 residual stream (`x + h`, h in bf16),
as transformers models run under torch.autocast.

    python tests/clients/train_autocast_residual.py --steps 3

The residual add casts h to fp32 inside its kernel (scratch the dispatch mode never sees,
Note [Kernel scratch]); in backward the untraced run sums gradients in place (`add_`)
where the traced one calls `add` (Note [In place but for the mode]): matching the scratch
by op name and call order once put the residual's scratch on the wrong event.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.relu(self.fc1(self.ln(x))))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(Block(64), Block(64))
    head = nn.Linear(64, 10)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
    for _ in range(args.steps):
        x, y = torch.randn(8, 16, 64), torch.randint(0, 10, (8,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = head(model(x).mean(1))
        loss = F.cross_entropy(out.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
