"""cliffordlayers (tests/clients/train_clifford.py): Microsoft's Clifford neural layers for
PDE surrogates. A field is a multivector per grid point, `(B, C, *grid, blades)`; a
Clifford convolution builds its real kernel from the blade weights and the algebra's
signature in every forward (`get_2d_clifford_kernel`: a `torch.cat` of the signed blade
weights) and runs one ordinary conv on the blades stacked into channels; a Clifford
Fourier layer pairs blades into complex fields (`view_as_complex(stack(...))`), takes
`fft2`/`fftn`, multiplies the kept modes by the geometric product (an einsum) and
inverts. The models are the library's `cliffordlayers.models` (the paper's ResNet and FNO
backbones), built as the library's own tests build them, at tiny sizes, on random
fields. Seeded, CPU, nothing downloaded.

    python tests/clients/train_clifford.py --steps 3 --model fno2d
    memledger trace tests/clients/train_clifford.py --steps 2 -o c.ledger -- --model resnet2d
    memledger compare tests/clients/train_clifford.py -p 'checkpoint:layers.*' -- --model fno2d

Models (`--model`):

- `resnet2d`: `CliffordNet2d` with `CliffordBasicBlock2d` (two Clifford convs per block,
  optional Clifford group norm `--norm`), g = (1, 1); `--rotation` the rotational Clifford
  convolution (g = (-1, -1): a frozen `zero_kernel` parameter in each conv's weight list).
- `fno2d`: `CliffordNet2d` with `CliffordFourierBasicBlock2d` (a `CliffordSpectralConv2d`
  beside a 1x1 Clifford conv), g = (1, 1).
- `fno3d`: `CliffordNet3d` with `CliffordFourierBasicBlock3d` (`fftn` over 3-D grids of
  8-blade multivectors), g = (1, 1, 1).
- `conv1d`: written here from the layers: `CliffordConv1d` blocks with a residual and a
  `CliffordLinear` head, g = (-1,); `--batchnorm` a `CliffordBatchNorm1d` in each block
  (running mean and covariance updated in place in every training forward).

`--rollout K` applies the model to its own output K times and sums the K losses (the same
modules called K times a step), `--accum N` gradient accumulation, `--clip` gradient
norm clipping, `--optim adam|adamw|sgd`, `--grid`, `--hidden`, `--blocks`, `--batch`.
`--bug clip-after-step` clips after the optimizer step (a loop bug: the doctor's
`clip_order`).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from cliffordlayers.models.models_2d import (CliffordBasicBlock2d,
                                             CliffordFourierBasicBlock2d, CliffordNet2d)
from cliffordlayers.models.models_3d import CliffordFourierBasicBlock3d, CliffordNet3d
from cliffordlayers.models.utils import partialclass
from cliffordlayers.nn.modules.batchnorm import CliffordBatchNorm1d
from cliffordlayers.nn.modules.cliffordconv import CliffordConv1d
from cliffordlayers.nn.modules.cliffordlinear import CliffordLinear


class Conv1dBlock(nn.Module):
    """Two 1-D Clifford convolutions with a GELU between and a residual; `batchnorm`: a
    Clifford batch norm (running mean and covariance buffers) after the first."""

    def __init__(self, g, ch: int, batchnorm: bool = False) -> None:
        super().__init__()
        self.conv1 = CliffordConv1d(g, ch, ch, kernel_size=3, padding=1)
        self.norm = CliffordBatchNorm1d(g, ch) if batchnorm else nn.Identity()
        self.conv2 = CliffordConv1d(g, ch, ch, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.gelu(self.norm(self.conv1(x))))


class Clifford1dNet(nn.Module):
    def __init__(self, g, in_ch: int, ch: int, blocks: int, batchnorm: bool = False) -> None:
        super().__init__()
        self.encoder = CliffordConv1d(g, in_ch, ch, kernel_size=1)
        self.blocks = nn.ModuleList(Conv1dBlock(g, ch, batchnorm) for _ in range(blocks))
        self.head = CliffordLinear(g, ch, in_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # (B, C, X, 2)
        x = self.encoder(x)
        for b in self.blocks:
            x = b(x)
        # CliffordLinear takes (B, C, blades): the grid goes into the batch
        B, C, X, I = x.shape
        y = self.head(x.permute(0, 2, 1, 3).reshape(B * X, C, I))
        return y.reshape(B, X, -1, I).permute(0, 2, 1, 3)


def build(args) -> tuple[nn.Module, tuple[int, ...]]:
    """The model and one sample's shape (channels, *grid, blades)."""
    n, ch = args.grid, args.hidden
    blocks = [1] * args.blocks
    if args.model == "resnet2d":
        g = (-1, -1) if args.rotation else (1, 1)
        model = CliffordNet2d(g=g, block=CliffordBasicBlock2d, num_blocks=blocks,
                              in_channels=2, out_channels=2, hidden_channels=ch,
                              activation=F.gelu, norm=args.norm, rotation=args.rotation)
        return model, (2, n, n, 3)
    if args.model == "fno2d":
        block = partialclass("CliffordFourierBasicBlock2d", CliffordFourierBasicBlock2d,
                             modes1=args.modes, modes2=args.modes)
        model = CliffordNet2d(g=(1, 1), block=block, num_blocks=blocks, in_channels=2,
                              out_channels=2, hidden_channels=ch, activation=F.gelu,
                              rotation=False, norm=args.norm)
        return model, (2, n, n, 3)
    if args.model == "fno3d":
        block = partialclass("CliffordFourierBasicBlock3d", CliffordFourierBasicBlock3d,
                             modes1=args.modes, modes2=args.modes, modes3=args.modes)
        model = CliffordNet3d(g=(1, 1, 1), block=block, num_blocks=blocks, in_channels=1,
                              out_channels=1, hidden_channels=ch, activation=F.gelu,
                              norm=args.norm)
        return model, (1, n, n, n, 6)
    return Clifford1dNet((-1,), 2, ch, args.blocks, args.batchnorm), (2, n, 2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="fno2d", choices=["resnet2d", "fno2d", "fno3d", "conv1d"])
    p.add_argument("--grid", type=int, default=8)
    p.add_argument("--hidden", type=int, default=4)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--modes", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--norm", action="store_true")
    p.add_argument("--rotation", action="store_true")
    p.add_argument("--batchnorm", action="store_true")
    p.add_argument("--rollout", type=int, default=1)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--bug", default="", choices=["", "clip-after-step"])
    args = p.parse_args()
    torch.manual_seed(0)

    model, shape = build(args)
    if args.optim == "sgd":
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        # a rollout: the model fed its own prediction, a loss against each target
        u = torch.randn(args.batch, *shape)
        targets = torch.randn(args.rollout, args.batch, *shape)
        loss = 0.0
        for k in range(args.rollout):
            u = model(u)
            loss = loss + F.mse_loss(u, targets[k])
        return loss / args.rollout

    for step in range(args.steps):
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip and args.bug != "clip-after-step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        if args.bug == "clip-after-step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
