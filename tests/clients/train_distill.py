"""Knowledge distillation: a frozen teacher run under `no_grad`, then its student.

    python tests/clients/train_distill.py --steps 5
    memledger trace tests/clients/train_distill.py --steps 2 -o distill.ledger

The teacher (4 blocks, width 128) is called first, so it is the first top-level module with
parameters; the student (3 blocks, width 64) is the model policies act on (Note [The model]
in memledger/trace/roots.py). A projection `Linear`, called before the student and then
detached, has parameters that want gradients but no optimizer steps them.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    torch.manual_seed(0)
    teacher, student = Net(128, 4).eval(), Net(64, 3)
    proj = nn.Linear(128, 64)
    opt = torch.optim.AdamW(student.parameters(), 1e-3)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 128)
        with torch.no_grad():
            target = teacher(x)
        out = student(proj(x).detach())
        loss = F.kl_div(F.log_softmax(out, -1), F.softmax(target, -1), reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
