"""normflows (VincentStimper/normalizing-flows) as its README and example notebooks train
it: `nf.NormalizingFlow(q0, flows)` (or `nf.MultiscaleFlow` for images) fitted by
`loss = model.forward_kld(x)` (the flows run through their `inverse` methods, data to
latent), or by `model.reverse_kld(num_samples)` against a target density (the flows run
forward on samples of the base), with the README's guard
`if ~(torch.isnan(loss) | torch.isinf(loss))` around `backward` and `step`.

Modes (each the library's own example, shrunk):
  realnvp   2-D, `AffineCouplingBlock(MLP)` + `Permute(swap)` (README), Adam, forward KLD
  glow      3x8x8 images, `MultiscaleFlow` of `GlowBlock`s (affine coupling over a
            ConvNet2d, invertible 1x1 conv with LU, ActNorm initialised from the first
            batch) with `Squeeze` and `Merge`, class-conditional Gaussian bases, Adamax
  nsf       neural spline flows: `AutoregressiveRationalQuadraticSpline` +
            `LULinearPermute`, and with `--coupled` `CoupledRationalQuadraticSpline`
  residual  `Residual(LipschitzMLP, reduce_memory=True)` + `ActNorm` (the power-series
            log-det estimated inside the forward by a custom autograd Function that
            runs its own backward), `nf.utils.update_lipschitz` after each step
  reverse   `MaskedAffineFlow` + `ActNorm` trained by `reverse_kld` against `TwoModes`
            (ActNorm initialised by a `sample` before training, as the notebook does)

Tiny, seeded (torch and numpy: the residual flow draws its series length from numpy's
global generator), random data, nothing downloaded.

    python tests/clients/train_normflows.py --mode glow --steps 3
    memledger trace tests/clients/train_normflows.py --steps 2 -o nf.ledger -- --mode glow
    memledger predict nf.ledger --policy 'checkpoint:flows.0.*'
"""

import argparse

import numpy as np
import torch

import normflows as nf


def two_moons(n: int) -> torch.Tensor:
    """Random 2-D data in two interleaved half circles (the notebooks' `TwoMoons` target,
    drawn directly: its rejection sampler reads two tensors normflows makes at import,
    which a test's process holds before the script starts)."""
    t = torch.rand(n) * np.pi
    upper = torch.rand(n) < 0.5
    x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
    y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
    return torch.stack([x, y], 1) + 0.1 * torch.randn(n, 2)


def realnvp(args):
    base = nf.distributions.base.DiagGaussian(2)
    flows = []
    for _ in range(args.layers):
        param_map = nf.nets.MLP([1, args.hidden, args.hidden, 2], init_zeros=True)
        flows.append(nf.flows.AffineCouplingBlock(param_map))
        flows.append(nf.flows.Permute(2, mode="swap"))
    model = nf.NormalizingFlow(base, flows)
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-5)
    return model, opt, lambda: (two_moons(args.batch),)


def glow(args):
    levels, blocks, channels, size, classes = 2, args.layers, 3, 8, 4
    q0, merges, flows = [], [], []
    for i in range(levels):
        flows_ = [nf.flows.GlowBlock(channels * 2 ** (levels + 1 - i), args.hidden,
                                     split_mode="channel", scale=True)
                  for _ in range(blocks)]
        flows_ += [nf.flows.Squeeze()]
        flows += [flows_]
        if i > 0:
            merges += [nf.flows.Merge()]
            latent = (channels * 2 ** (levels - i), size // 2 ** (levels - i),
                      size // 2 ** (levels - i))
        else:
            latent = (channels * 2 ** (levels + 1), size // 2 ** levels, size // 2 ** levels)
        q0 += [nf.distributions.ClassCondDiagGaussian(latent, classes)]
    model = nf.MultiscaleFlow(q0, flows, merges)
    opt = torch.optim.Adamax(model.parameters(), lr=1e-3, weight_decay=1e-5)

    def batch():
        x = torch.rand(args.batch, channels, size, size)
        return x, torch.randint(0, classes, (args.batch,))
    return model, opt, batch


def nsf(args):
    flows = []
    for i in range(args.layers):
        if args.coupled:
            flows += [nf.flows.CoupledRationalQuadraticSpline(4, 1, args.hidden,
                                                              reverse_mask=bool(i % 2))]
        else:
            flows += [nf.flows.AutoregressiveRationalQuadraticSpline(4, 1, args.hidden)]
        flows += [nf.flows.LULinearPermute(4)]
    q0 = nf.distributions.DiagGaussian(4, trainable=False)
    model = nf.NormalizingFlow(q0=q0, flows=flows)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
    return model, opt, lambda: (torch.randn(args.batch, 4) * 0.5,)


def residual(args):
    flows = []
    for _ in range(args.layers):
        net = nf.nets.LipschitzMLP([2, args.hidden, args.hidden, 2], init_zeros=True,
                                   lipschitz_const=0.9)
        flows += [nf.flows.Residual(net, reduce_memory=not args.full_memory)]
        flows += [nf.flows.ActNorm(2)]
    q0 = nf.distributions.DiagGaussian(2, trainable=False)
    model = nf.NormalizingFlow(q0=q0, flows=flows)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=1e-5)
    return model, opt, lambda: (two_moons(args.batch),)


def reverse(args):
    target = nf.distributions.TwoModes(2, 0.1)
    q0 = nf.distributions.DiagGaussian(2)
    b = torch.tensor([1.0 if i % 2 == 0 else 0.0 for i in range(2)])
    flows = []
    for i in range(args.layers):
        s = nf.nets.MLP([2, args.hidden, args.hidden, 2], init_zeros=True)
        t = nf.nets.MLP([2, args.hidden, args.hidden, 2], init_zeros=True)
        flows += [nf.flows.MaskedAffineFlow(b if i % 2 == 0 else 1 - b, t, s)]
        flows += [nf.flows.ActNorm(2)]
    model = nf.NormalizingFlow(q0=q0, flows=flows, p=target)
    model.sample(num_samples=2 ** 7)    # the notebook's "Initialize ActNorm"
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-6)
    return model, opt, None


MODES = {"realnvp": realnvp, "glow": glow, "nsf": nsf, "residual": residual,
         "reverse": reverse}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(MODES), default="realnvp")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--coupled", action="store_true", help="nsf: coupling, not autoregressive")
    ap.add_argument("--full-memory", action="store_true",
                    help="residual: reduce_memory=False (the log-det's graph kept for backward)")
    args = ap.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)
    model, opt, batch = MODES[args.mode](args)
    model.train()
    for it in range(args.steps):
        opt.zero_grad()
        if batch is None:
            loss = model.reverse_kld(args.batch, beta=min(1.0, 0.01 + it / 10))
        else:
            loss = model.forward_kld(*batch())
        if ~(torch.isnan(loss) | torch.isinf(loss)):
            loss.backward()
            opt.step()
        if args.mode == "residual":
            nf.utils.update_lipschitz(model, 5)
        print(f"step {it} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
