"""A normalising layer that initialises its parameters from the first batch inside its
forward, as FrEIA's and Glow's `ActNorm` do (a flag set at construction; `scale` and
`bias` written through `.data` from the batch's statistics, then cleared), in plain torch.

    python tests/clients/train_first_batch_init.py --steps 3
    memledger compare tests/clients/train_first_batch_init.py -p 'checkpoint:norm'

`--init grad` (FrEIA's way): the set-up runs under gradients and its ops save tensors
for a graph nobody reads, so a checkpoint's re-run of the first call, which finds the
flag cleared, saves fewer: torch's checkpoint refuses it, and so does predict (Note [A
set-up on the first call], memledger/replay/first_call.py). `--init no-grad`: the set-up
saves nothing, the re-run saves what the forward did, and the policy runs. `--warm`: one
forward of a batch under torch.no_grad() before training (the fix the refusal gives).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class ActNorm(nn.Module):
    def __init__(self, width: int, no_grad: bool) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(1, width))
        self.bias = nn.Parameter(torch.zeros(1, width))
        self.init_on_next_batch, self.no_grad = True, no_grad

    def _initialise(self, x: torch.Tensor) -> None:
        self.scale.data.view(-1)[:] = torch.log(1 / x.std(dim=0))
        y = x * self.scale.exp()   # saves scale.exp() where gradients are on
        self.bias.data.view(-1)[:] = -y.mean(dim=0)
        self.init_on_next_batch = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.init_on_next_batch:
            if self.no_grad:
                with torch.no_grad():
                    self._initialise(x)
            else:
                self._initialise(x)
        return x * self.scale.exp() + self.bias


class Net(nn.Module):
    def __init__(self, width: int, no_grad: bool) -> None:
        super().__init__()
        self.norm = ActNorm(width, no_grad)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return h + self.fc2(F.gelu(self.fc1(h)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--init", default="grad", choices=["grad", "no-grad"])
    p.add_argument("--warm", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(32, args.init == "no-grad")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if args.warm:
        with torch.no_grad():
            model(torch.randn(16, 32) * 3 + 1)
    for _ in range(args.steps):
        x = torch.randn(16, 32) * 3 + 1
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
