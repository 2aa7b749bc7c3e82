"""GPyTorch exact Gaussian-process regression, trained as its tutorials do: `model.train()`,
`ExactMarginalLogLikelihood`, `loss = -mll(model(x), y)`, Adam over `model.parameters()`
(which hold the likelihood's noise too). The marginal likelihood runs through
linear_operator: a Cholesky (`--cholesky`, the default at these sizes) or CG with Lanczos,
each a custom autograd Function. Tiny shapes, seeded, nothing downloaded.

    python tests/clients/train_gpytorch.py --case exact --steps 3
    memledger trace tests/clients/train_gpytorch.py --steps 2 -o gp.ledger -- --case dkl

`--case`:
  exact   `ConstantMean` + `ScaleKernel(RBFKernel)` on 64 points in 4 dimensions
  ard     the same with a Matern-5/2 kernel, one lengthscale per dimension, and a prior on
          the outputscale (`GammaPrior`): its log-probability joins the loss
  dkl     deep kernel learning: an MLP feature extractor (`feature_extractor.*`, three
          `Linear` + ReLU blocks) maps 128 points of 8 dimensions to 2 features, scaled to
          [-1, 1] (`ScaleToBounds`), then an RBF kernel
  cg      `exact` at 300 points with `gpytorch.settings.max_cholesky_size(0)`: conjugate
          gradients and stochastic Lanczos quadrature in place of the Cholesky
"""

import argparse

import torch
from torch import nn


def build(case, x, y):
    import gpytorch

    class GP(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(x, y, likelihood)
            self.mean_module = gpytorch.means.ConstantMean()
            if case == "ard":
                base = gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=x.shape[-1])
                self.covar_module = gpytorch.kernels.ScaleKernel(
                    base, outputscale_prior=gpytorch.priors.GammaPrior(2.0, 0.5))
            else:
                self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel())
            if case == "dkl":
                d = x.shape[-1]
                self.feature_extractor = nn.Sequential(
                    nn.Sequential(nn.Linear(d, 32), nn.ReLU()),
                    nn.Sequential(nn.Linear(32, 32), nn.ReLU()),
                    nn.Linear(32, 2))
                self.scale = gpytorch.utils.grid.ScaleToBounds(-1.0, 1.0)

        def forward(self, z):
            if case == "dkl":
                z = self.scale(self.feature_extractor(z))
            return gpytorch.distributions.MultivariateNormal(self.mean_module(z),
                                                             self.covar_module(z))

    likelihood = gpytorch.likelihoods.GaussianLikelihood()
    return GP(likelihood), likelihood


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="exact")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    import gpytorch

    torch.manual_seed(0)
    n, d = {"exact": (64, 4), "ard": (64, 4), "dkl": (128, 8), "cg": (300, 4)}[args.case]
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(n, d, generator=gen)
    y = torch.sin(6 * x[:, 0]) + 0.1 * torch.randn(n, generator=gen)
    model, likelihood = build(args.case, x, y)
    model.train()
    likelihood.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
    size = 0 if args.case == "cg" else 2000
    with gpytorch.settings.max_cholesky_size(size):
        for step in range(args.steps):
            opt.zero_grad()
            out = model(x)
            loss = -mll(out, y)
            loss.backward()
            opt.step()
            print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
