"""Plain-torch models whose modules' work never runs as a module call (helper script for
tests/clients/test_uncalled_advice.py; docs/decisions.md, fifty-seventh session, fix57d).

    python tests/clients/train_uncalled_advice.py --case encode
    python tests/clients/train_uncalled_advice.py --case own-call

- `encode`: the model runs its VAE through `vae.encode(x)` and `vae.decode(z)`, which call
  the encoder's and decoder's Sequentials themselves (no call of `vae`), and a block whose
  forward calls its Linear's `.forward()` directly (`self.lin.forward(x)`): `vae` and
  `block.lin` are never called as modules (Note [What an uncalled module's refusal
  advises], memledger/replay/policies.py).
- `own-call`: a module whose class has a `__call__` of its own, as gpytorch's modules
  have, running `forward` without torch's module hooks; the two Linears inside it are
  called as modules (Note [A class with a call of its own]).
"""

import argparse

import torch
from torch import nn

D = 16


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(D, 2 * D), nn.SiLU(), nn.Linear(2 * D, D))
        self.dec = nn.Sequential(nn.Linear(D, 2 * D), nn.SiLU(), nn.Linear(2 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # not what the model calls
        return self.decode(self.encode(x))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.enc(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.dec(z)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.lin.forward(x))


class OwnCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(D, D)
        self.b = nn.Linear(D, D)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:   # no module hooks run
        return self.forward(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


class Net(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.vae = VAE()
        self.block = Block()
        self.own = OwnCall()
        self.out = nn.Linear(D, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.case == "encode":
            x = self.block(self.vae.decode(self.vae.encode(x)))
        else:
            x = self.own(x)
        return self.out(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["encode", "own-call"], required=True)
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.case)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        loss = model(torch.randn(8, D)).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
