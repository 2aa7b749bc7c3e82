"""frame-averaging-pytorch (tests/clients/train_frame_avg.py): lucidrains' `FrameAverage`,
which makes any network equivariant: it centres the points, takes the eigenvectors of
their covariance (`torch.linalg.eigh`), makes 2^dim frames from their signs (an int64
`operations` buffer), runs the network once on every frame's points merged into the
batch (repeating every tensor argument once per frame) and averages the frames' outputs
mapped back (`invariant_output`: averaged without mapping back). Trained here on random
point clouds to denoise them (the network sees them jittered and gives back points, an
MSE against the clean ones). Seeded (torch and Python's `random`, from which the
stochastic variant draws its frame), tiny, nothing downloaded.

    python tests/clients/train_frame_avg.py --steps 3 --net egnn
    memledger trace tests/clients/train_frame_avg.py --steps 2 -o fa.ledger -- --net xtf
    memledger compare tests/clients/train_frame_avg.py -p 'checkpoint:net.*' -- --net mlp

Networks (`--net`), each wrapped as the README does (`FrameAverage(net, dim=...)`):

- `linear`: the README's `torch.nn.Linear(dim, dim)`.
- `mlp`: Linear -> SiLU -> Linear -> SiLU -> Linear over each point.
- `xtf`: an x-transformers `ContinuousTransformerWrapper` (points in, points out, an
  `Encoder` of `--depth` layers, width 16, 2 heads of 8), the mask handed as `mask=`
  (repeated per frame by FrameAverage).
- `egnn`: egnn-pytorch `EGNN` layers behind a small module that takes the points first
  (FrameAverage hands the framed points as the first argument) and the node features
  second (repeated per frame), returning the moved coordinates.
- `manual`: the README's second form: `FrameAverage()` without a network returns the
  framed points and the averaging function; the script calls its MLP once per frame
  (`--dim 3`: 8 calls of the same module in one forward) and stacks the outputs.

Options: `--dim 2|3`, `--stochastic` (one frame drawn at random per forward),
`--invariant` (`invariant_output=True`: a loss on the averaged outputs as they come),
`--mask` (`frame_average_mask` with the last 4 points of each cloud padded),
`--opt adam|adamw|sgd`, `--accum N` (N micro-batches per optimizer step), `--clip C`
(`clip_grad_norm_`), `--validate` (a loss under no_grad in eval each step).
A loop bug, for the doctor: `--keep-losses` (each step's loss kept in a list, graph and
all: `losses.append(loss)`).
"""

import argparse
import random

import torch
import torch.nn.functional as F
from torch import nn

from egnn_pytorch import EGNN
from frame_averaging_pytorch import FrameAverage
from x_transformers import ContinuousTransformerWrapper, Encoder


class PointsFirstEGNN(nn.Module):
    """EGNN layers called as FrameAverage calls a network: `net(points, feats, mask=...)`."""

    def __init__(self, feat_dim: int, depth: int) -> None:
        super().__init__()
        # the last layer moves the coordinates only: its features would reach no loss
        self.layers = nn.ModuleList(EGNN(dim=feat_dim, m_dim=8, update_feats=i < depth - 1)
                                    for i in range(depth))

    def forward(self, coors, feats, mask=None):
        for layer in self.layers:
            feats, coors = layer(feats, coors, mask=mask)
        return coors


def mlp(d: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                         nn.Linear(hidden, d))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--net", default="mlp", choices=["linear", "mlp", "xtf", "egnn", "manual"])
    p.add_argument("--dim", type=int, default=3, choices=[2, 3])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--points", type=int, default=16)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--stochastic", action="store_true")
    p.add_argument("--invariant", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--opt", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--keep-losses", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)

    d = args.dim
    if args.net == "linear":
        net = nn.Linear(d, d)
    elif args.net in ("mlp", "manual"):
        net = mlp(d, args.hidden)
    elif args.net == "xtf":
        net = ContinuousTransformerWrapper(dim_in=d, dim_out=d, max_seq_len=args.points,
                                           attn_layers=Encoder(dim=16, depth=args.depth,
                                                               heads=2, attn_dim_head=8))
    else:
        net = PointsFirstEGNN(8, args.depth)

    if args.net == "manual":
        fa = FrameAverage(dim=d, stochastic=args.stochastic, invariant_output=args.invariant)
        model = nn.ModuleDict({"fa": fa, "net": net})
    else:
        model = FrameAverage(net, dim=d, stochastic=args.stochastic,
                             invariant_output=args.invariant)
    params = model.parameters()
    if args.opt == "adam":
        optim = torch.optim.Adam(params, lr=1e-3)
    elif args.opt == "adamw":
        optim = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    else:
        optim = torch.optim.SGD(params, lr=1e-2, momentum=0.9)

    feats = torch.randn(args.batch, args.points, 8)
    mask = None
    if args.mask:
        mask = torch.ones(args.batch, args.points, dtype=torch.bool)
        mask[:, -4:] = False

    def forward(points: torch.Tensor) -> torch.Tensor:
        if args.net == "manual":
            framed, average = model["fa"](points, frame_average_mask=mask)
            outs = [model["net"](framed[:, f]) for f in range(framed.shape[1])]
            return average(torch.stack(outs, dim=1))
        extra = {}
        if args.net == "xtf" and mask is not None:
            extra["mask"] = mask
        if args.net == "egnn":
            return model(points, feats, frame_average_mask=mask, mask=mask)
        return model(points, frame_average_mask=mask, **extra)

    def loss_of() -> torch.Tensor:
        clean = torch.randn(args.batch, args.points, d)
        out = forward(clean + 0.1 * torch.randn_like(clean))
        return F.mse_loss(out, clean)

    losses = []
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        if args.keep_losses:
            losses.append(loss)
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
