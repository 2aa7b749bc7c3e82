"""A spline layer fitted by least squares, and losses logged through `.numpy()`, in plain
torch: the two things pykan's KAN does that a fake run got wrong (Note [A least-squares fit
in a fake run], memledger/trace/fake_lstsq.py; Note [What `.numpy()` keeps],
memledger/trace/fake_literals.py).

    python tests/clients/train_lstsq_fit.py --steps 3
    memledger trace --fake --device cpu tests/clients/train_lstsq_fit.py -o f.ledger -- --refit 2

The model: a Linear, then per feature a fixed basis (8 Gaussian bumps) whose coefficients
are fitted to a target curve with `torch.linalg.lstsq` when it is made (and with `--refit
N` every N steps, under no_grad, to the batch), then a Linear head; MSE, Adam. Each step
logs its loss as `torch.sqrt(loss).detach().numpy()` and keeps the arrays in a list, as
pykan's `fit` does (`--log item`: `loss.item()`, which keeps nothing). `--driver D` (the
lstsq driver: gelsy, gels, gelsd, gelss).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class BumpLayer(nn.Module):
    def __init__(self, dim: int, bumps: int, driver: str | None) -> None:
        super().__init__()
        self.register_buffer("centers", torch.linspace(-2, 2, bumps))
        self.driver = driver
        self.coef = nn.Parameter(torch.empty(dim, bumps))
        self.refit(torch.linspace(-2, 2, 32)[:, None].expand(32, dim))

    def basis(self, x: torch.Tensor) -> torch.Tensor:   # (B, dim) -> (dim, B, bumps)
        return torch.exp(-(x.T[..., None] - self.centers) ** 2)

    @torch.no_grad()
    def refit(self, x: torch.Tensor) -> None:
        """The coefficients that make each feature's curve tanh(x), by least squares."""
        target = torch.tanh(x).T[..., None]   # (dim, B, 1)
        self.coef.copy_(torch.linalg.lstsq(self.basis(x), target,
                                           driver=self.driver).solution[..., 0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("dbk,dk->bd", self.basis(x), self.coef)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--refit", type=int, default=0)
    p.add_argument("--driver", default=None, choices=["gelsy", "gels", "gelsd", "gelss"])
    p.add_argument("--log", default="numpy", choices=["numpy", "item"])
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), BumpLayer(8, 8, args.driver), nn.Linear(8, 2))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    log = []
    for step in range(args.steps):
        x, y = torch.randn(16, 4, generator=gen), torch.randn(16, 2, generator=gen)
        if args.refit and step % args.refit == 0:
            model[1].refit(model[0](x))
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        log.append(torch.sqrt(loss).detach().numpy() if args.log == "numpy" else loss.item())


if __name__ == "__main__":
    main()
