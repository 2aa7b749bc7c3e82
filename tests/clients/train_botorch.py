"""BoTorch (pytorch/botorch) as its tutorials use it: a `SingleTaskGP` (float64, inputs
normalised, outcomes standardised: botorch's defaults) fitted on its marginal likelihood,
then an acquisition function maximised over the inputs.

Modes (each a tutorial's recipe, shrunk):
  scipy      `fit_gpytorch_mll(mll)`: L-BFGS-B in scipy through botorch.optim (numpy
             arrays in and out, no torch optimizer at all)
  torch      `fit_gpytorch_mll(mll, optimizer=fit_gpytorch_mll_torch, ...)`: botorch's own
             torch.optim loop (`torch_minimize`: Adam, a closure whose `zero_grad_ctx`
             zeroes the gradients in place, bounds enforced by `param.data = clamp(...)`)
  adam       the "Fitting models in BoTorch with a torch.optim.Optimizer" tutorial's loop,
             written out: `loss = -mll(model(*model.train_inputs), model.train_targets)`
  batch      two outcomes in one `SingleTaskGP` (a batched model, batch_shape [2]) fitted
             by the hand-written Adam loop
  modellist  `ModelListGP` of two `SingleTaskGP`s (one with a Matern kernel), their
             `SumMarginalLogLikelihood` minimised by the hand-written Adam loop
  acqf       a model fitted by `fit_gpytorch_mll`, then `optimize_acqf` on
             `qLogNoisyExpectedImprovement` with `gen_candidates_torch` (Adam over the
             candidate inputs, gradients by `autograd.grad`, a Sobol Monte-Carlo sampler)
  acqf-ei    the same with `qExpectedImprovement` and botorch's default
             `gen_candidates_scipy` (L-BFGS-B over the inputs in scipy)
  bo         the closed loop: `--steps` rounds of fit (scipy), `optimize_acqf`
             (qLogNEI, scipy) and the new point appended to the data

Tiny, seeded, random data (a smooth function of the inputs), nothing downloaded.

    python tests/clients/train_botorch.py --mode adam --steps 3
    memledger trace tests/clients/train_botorch.py --steps 2 -o bo.ledger -- --mode adam
    memledger trace tests/clients/train_botorch.py --steps-by whole -o bo.ledger -- --mode scipy
"""

import argparse
import warnings
from functools import partial

import torch

from botorch.acquisition import qExpectedImprovement, qLogNoisyExpectedImprovement
from botorch.fit import fit_gpytorch_mll
from botorch.generation.gen import gen_candidates_torch
from botorch.models import ModelListGP, SingleTaskGP
from botorch.models.transforms import Normalize, Standardize
from botorch.optim import optimize_acqf
from botorch.optim.fit import fit_gpytorch_mll_torch
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood, SumMarginalLogLikelihood

DTYPE = torch.double   # botorch's advice: float64 throughout


def objective(x: torch.Tensor) -> torch.Tensor:
    """A smooth test function of the inputs, (n, d) -> (n, 1)."""
    return (torch.sin(3 * x[:, :1]) + torch.cos(2 * x[:, 1:2]) - (x - 0.5).pow(2).sum(-1,
            keepdim=True))


def data(n: int, d: int, outputs: int = 1):
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(n, d, generator=gen, dtype=DTYPE)
    y = objective(x)
    if outputs > 1:
        y = torch.cat([y, (x[:, :1] * x[:, 1:2]).cos()], -1)
    return x, y + 0.05 * torch.randn(y.shape, generator=gen, dtype=DTYPE)


def single(x, y, matern: bool = False, torch_loop: bool = False) -> SingleTaskGP:
    covar = ScaleKernel(MaternKernel(nu=2.5, ard_num_dims=x.shape[-1])) if matern else None
    model = SingleTaskGP(x, y, covar_module=covar, input_transform=Normalize(d=x.shape[-1]),
                         outcome_transform=Standardize(m=y.shape[-1]))
    if torch_loop:
        # the tutorial's line: botorch bounds the noise by clamping it (scipy's bounds, or
        # `torch_minimize`'s clamp); a plain torch loop needs a transformed constraint
        model.likelihood.noise_covar.register_constraint("raw_noise", GreaterThan(1e-5))
    return model


def adam_loop(model, mll, x, steps: int, lr: float = 0.025) -> None:
    """The tutorial's loop: the training inputs through `model(...)`, the targets the
    model keeps (outcomes standardised)."""
    mll.train()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        opt.zero_grad()
        if isinstance(model, ModelListGP):
            out = model(*[x] * len(model.models))
            loss = -mll(out, model.train_targets)
        elif model.train_inputs[0].dim() > x.dim():
            # a batched model keeps its inputs expanded to its batch shape: botorch's
            # own loss closure calls it on them
            out = model(*model.train_inputs)
            loss = -mll(out, model.train_targets).sum()
        else:
            out = model(x)
            loss = -mll(out, model.train_targets).sum()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


def fit_scipy(mll, steps: int) -> None:
    fit_gpytorch_mll(mll, optimizer_kwargs={"options": {"maxiter": steps}})


def maximise(model, x, args, scipy: bool, ei: bool = False) -> torch.Tensor:
    sampler = SobolQMCNormalSampler(sample_shape=torch.Size([args.mc]), seed=0)
    if ei:
        acqf = qExpectedImprovement(model, best_f=model.train_targets.max(), sampler=sampler)
    else:
        acqf = qLogNoisyExpectedImprovement(model, X_baseline=x, sampler=sampler,
                                            prune_baseline=True)
    bounds = torch.stack([torch.zeros(x.shape[-1], dtype=DTYPE),
                          torch.ones(x.shape[-1], dtype=DTYPE)])
    if scipy:
        gen, options = None, {"maxiter": args.steps}
    else:
        gen = partial(gen_candidates_torch, optimizer=torch.optim.Adam)
        options = {"stopping_criterion_options": {"maxiter": args.steps},
                   "optimizer_options": {"lr": 0.05}}
    cand, value = optimize_acqf(acqf, bounds=bounds, q=args.q, num_restarts=args.restarts,
                                raw_samples=args.raw, options=options, gen_candidates=gen)
    print(f"candidate {cand.tolist()}  value {value.item():.4f}")
    return cand


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="adam",
                    choices=["scipy", "torch", "adam", "batch", "modellist", "acqf",
                             "acqf-ei", "bo"])
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps (bo: rounds)")
    ap.add_argument("--n", type=int, default=32, help="training points")
    ap.add_argument("--d", type=int, default=3, help="input dimensions")
    ap.add_argument("--q", type=int, default=2, help="candidates drawn jointly")
    ap.add_argument("--restarts", type=int, default=2)
    ap.add_argument("--raw", type=int, default=16, help="raw samples for the initial points")
    ap.add_argument("--mc", type=int, default=32, help="Monte-Carlo samples")
    args = ap.parse_args()
    torch.manual_seed(0)
    warnings.simplefilter("ignore")   # botorch's input-scaling and deprecation warnings

    if args.mode == "modellist":
        x, y = data(args.n, args.d, outputs=2)
        model = ModelListGP(single(x, y[:, :1], torch_loop=True),
                            single(x, y[:, 1:], matern=True, torch_loop=True))
        mll = SumMarginalLogLikelihood(model.likelihood, model)
        adam_loop(model, mll, x, args.steps)
        return
    x, y = data(args.n, args.d, outputs=2 if args.mode == "batch" else 1)
    model = single(x, y, torch_loop=args.mode in ("adam", "batch"))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    if args.mode in ("adam", "batch"):
        adam_loop(model, mll, x, args.steps)
    elif args.mode == "torch":
        fit_gpytorch_mll(mll, optimizer=fit_gpytorch_mll_torch,
                         optimizer_kwargs={"step_limit": args.steps,
                                           "optimizer": partial(torch.optim.Adam, lr=0.05)})
    elif args.mode == "scipy":
        fit_scipy(mll, args.steps)
    elif args.mode in ("acqf", "acqf-ei"):
        fit_scipy(mll, 20)
        model.eval()
        maximise(model, x, args, scipy=args.mode == "acqf-ei", ei=args.mode == "acqf-ei")
    elif args.mode == "bo":
        for r in range(args.steps):
            fit_scipy(mll, 20)
            cand = maximise(model, x, args, scipy=True)
            x = torch.cat([x, cand])
            y = torch.cat([y, objective(cand)])
            model = single(x, y)
            mll = ExactMarginalLogLikelihood(model.likelihood, model)
            print(f"round {r}  best {y.max().item():.4f}")
    print("noise", model.likelihood.noise.detach().flatten().tolist())


if __name__ == "__main__":
    main()
