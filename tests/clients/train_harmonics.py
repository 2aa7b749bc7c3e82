"""torch-harmonics (tests/clients/train_harmonics.py): NVIDIA's differentiable spherical
harmonic transforms (`RealSHT` / `InverseRealSHT`: quadrature weights and Legendre tables
as non-persistent buffers made at init, an rfft along longitude and an einsum per real /
imaginary part), DISCO convolutions on the sphere (`DiscreteContinuousConvS2`: its filter
as index / value buffers plus a sparse COO `psi` kept as a plain attribute, contracted by
`torch.bmm` once per output longitude in the pure-torch path) and the library's example
models, trained on random fields on a tiny grid with a quadrature-weighted loss
(`examples.losses.SquaredL2LossS2`). Seeded, tiny, nothing downloaded.

    python tests/clients/train_harmonics.py --steps 3 --model sfno
    memledger trace tests/clients/train_harmonics.py --steps 2 -o h.ledger -- --model sht
    memledger compare tests/clients/train_harmonics.py -p 'checkpoint:blocks.*' -- --model sfno

Models (`--model`):

- `sfno`: `examples.models.SphericalFourierNeuralOperator` (an encoder conv, blocks of
  SHT -> complex spectral weights (`SpectralConvS2`, a complex64 parameter, an einsum)
  -> ISHT plus an MLP of 1x1 convs; the SHT modules are shared among the blocks).
- `lsno`: `examples.models.LocalSphericalNeuralOperator` (DISCO encoder / decoder, blocks
  alternating DISCO and spectral convolutions).
- `sht`: written here from the README: blocks of `RealSHT` -> an einsum with complex
  weights -> `InverseRealSHT`, plus a `DiscreteContinuousConvS2`, a GELU and a residual.

`--nlat/--nlon` the grid (16 x 32), `--embed` channels, `--layers` blocks, `--batch`,
`--accum N` (gradient accumulation), `--validate` (a loss under no_grad in eval each step).
"""

import argparse

import torch
import torch.nn as nn

import torch_harmonics as th
from torch_harmonics.examples.losses import SquaredL2LossS2
from torch_harmonics.examples.models import (LocalSphericalNeuralOperator,
                                             SphericalFourierNeuralOperator)


class SpectralDiscoBlock(nn.Module):
    """SHT -> per-degree complex weights -> ISHT, plus a DISCO convolution, GELU, residual."""

    def __init__(self, nlat: int, nlon: int, ch: int) -> None:
        super().__init__()
        lmax = mmax = nlat // 2
        self.sht = th.RealSHT(nlat, nlon, lmax=lmax, mmax=mmax, grid="equiangular")
        self.isht = th.InverseRealSHT(nlat, nlon, lmax=lmax, mmax=mmax, grid="equiangular")
        self.weight = nn.Parameter(0.5 * torch.randn(ch, ch, lmax, dtype=torch.complex64))
        self.disco = th.DiscreteContinuousConvS2(ch, ch, (nlat, nlon), (nlat, nlon),
                                                 kernel_shape=(3, 3), basis_type="morlet",
                                                 theta_cutoff=0.3)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.sht(x)
        c = torch.einsum("bilm,oil->bolm", c, self.weight)
        return x + self.act(self.isht(c) + self.disco(x))


class SphereNet(nn.Module):
    def __init__(self, nlat: int, nlon: int, ch: int, layers: int) -> None:
        super().__init__()
        self.encoder = nn.Conv2d(2, ch, 1)
        self.blocks = nn.ModuleList(SpectralDiscoBlock(nlat, nlon, ch) for _ in range(layers))
        self.decoder = nn.Conv2d(ch, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(x)
        for b in self.blocks:
            x = b(x)
        return self.decoder(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="sfno", choices=["sfno", "lsno", "sht"])
    p.add_argument("--nlat", type=int, default=16)
    p.add_argument("--nlon", type=int, default=32)
    p.add_argument("--embed", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    shape = (args.nlat, args.nlon)
    if args.model == "sfno":
        model = SphericalFourierNeuralOperator(img_size=shape, grid="equiangular",
                                               scale_factor=2, in_chans=2, out_chans=2,
                                               embed_dim=args.embed, num_layers=args.layers)
    elif args.model == "lsno":
        model = LocalSphericalNeuralOperator(img_size=shape, grid="equiangular",
                                             scale_factor=2, in_chans=2, out_chans=2,
                                             embed_dim=args.embed, num_layers=args.layers)
    else:
        model = SphereNet(args.nlat, args.nlon, args.embed, args.layers)
    loss_fn = SquaredL2LossS2(args.nlat, args.nlon, grid="equiangular")
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        x = torch.randn(args.batch, 2, *shape)
        return loss_fn(model(x), torch.roll(x, 1, dims=-1))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
