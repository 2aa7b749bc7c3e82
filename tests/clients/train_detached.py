"""An MLP with a side branch that backward never reaches, trained with SGD.

    python tests/clients/train_detached.py --steps 5
    memledger trace tests/clients/train_detached.py --steps 3 -o detached.ledger

The side branch reads a detached hidden state and keeps its result as a metric until the
next step (`model.side`), as auxiliary heads and logging code often do: its graph is built
(gradients are on) and never backpropagated, so Python frees it when `model.side` is
replaced. `tanh` and `exp` save their outputs, which is where a profiler that packs saved
tensors as themselves would make a reference cycle and keep every step's branch alive.
"""

import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, d_in: int, d_hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d_in, d_hidden)
        self.aux = nn.Linear(d_hidden, d_hidden)
        self.head = nn.Linear(d_hidden, 10)
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x))                        # (B, H)
        self.side = torch.tanh(self.aux(h.detach())).exp()  # (B, H): backward never comes here
        return self.head(h)                               # (B, 10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    args = p.parse_args()

    torch.manual_seed(0)
    model = Net(256, args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 256, generator=gen)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}  side {model.side.mean().item():.3f}")


if __name__ == "__main__":
    main()
