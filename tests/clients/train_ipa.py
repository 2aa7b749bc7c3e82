"""Invariant point attention (invariant-point-attention, lucidrains): AlphaFold2's IPA over
residues, each with a rotation and a translation (its frame). Seeded, tiny, nothing
downloaded.

    python tests/clients/train_ipa.py --steps 3
    memledger trace tests/clients/train_ipa.py --steps 2 -o ipa.ledger -- --mode structure
    memledger compare tests/clients/train_ipa.py -p 'checkpoint:blocks.*' -- --steps 8

Modes (`--mode`):

- `blocks`: the README's `IPABlock` stack over a single representation (B, n, dim) and a
  pairwise one (B, n, n, dim), random frames (rotations from `utils.rot`), a regression
  of the blocks' output to a target.
- `structure`: `IPATransformer`'s loop written out (the library's class imports
  pytorch3d, which we do not install): per block an `IPABlock` then a `Linear(dim, 6)`
  whose output updates the frames (a quaternion composed by our own plain-torch
  `quaternion_multiply`, the translation moved along the rotations), rotations detached
  as the library does by default (`--no-detach` keeps them); the loss is a distance of
  the predicted points (`to_points`, rotated into the global frame) to random
  coordinates.

Both: `--no-pair` (`require_pairwise_repr=False`), `--mask` (the last residues of half the
batch masked off), `--pre-norm` (`post_norm=False`), `--dropout P`, `--accum N`, `--amp`
(bf16 autocast: the library turns autocast off for its value aggregation, as
`torch.cuda.amp.autocast(enabled=False)`, which leaves CPU autocast on), `--validate`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from invariant_point_attention import IPABlock
from invariant_point_attention.utils import rot


def quaternion_to_matrix(q: torch.Tensor) -> torch.Tensor:
    r, i, j, k = q.unbind(-1)
    two_s = 2.0 / (q * q).sum(-1)
    m = torch.stack((
        1 - two_s * (j * j + k * k), two_s * (i * j - k * r), two_s * (i * k + j * r),
        two_s * (i * j + k * r), 1 - two_s * (i * i + k * k), two_s * (j * k - i * r),
        two_s * (i * k - j * r), two_s * (j * k + i * r), 1 - two_s * (i * i + j * j)), -1)
    return m.reshape(q.shape[:-1] + (3, 3))


def quaternion_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack((aw * bw - ax * bx - ay * by - az * bz,
                        aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx,
                        aw * bz + ax * by - ay * bx + az * bw), -1)


class Structure(nn.Module):
    """IPATransformer's forward, its layers `blocks.i` and `updates.i`."""

    def __init__(self, dim: int, depth: int, detach: bool, **kw) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([IPABlock(dim=dim, **kw) for _ in range(depth)])
        self.updates = nn.ModuleList([nn.Linear(dim, 6) for _ in range(depth)])
        self.to_points = nn.Linear(dim, 3)
        self.detach = detach

    def forward(self, x, pairwise_repr=None, mask=None):
        b, n, _ = x.shape
        quaternions = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(b, n, 4)
        translations = torch.zeros(b, n, 3)
        for block, to_update in zip(self.blocks, self.updates):
            rotations = quaternion_to_matrix(quaternions)
            if self.detach:
                rotations = rotations.detach()
            x = block(x, pairwise_repr=pairwise_repr, rotations=rotations,
                      translations=translations, mask=mask)
            q_update, t_update = to_update(x).chunk(2, dim=-1)
            q_update = F.pad(q_update, (1, 0), value=1.0)
            q_update = q_update / torch.linalg.norm(q_update, dim=-1, keepdim=True)
            quaternions = quaternion_multiply(quaternions, q_update)
            translations = translations + torch.einsum("bnc,bncr->bnr", t_update, rotations)
        rotations = quaternion_to_matrix(quaternions)
        return torch.einsum("bnc,bncd->bnd", self.to_points(x), rotations) + translations


class Blocks(nn.Module):
    def __init__(self, dim: int, depth: int, **kw) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([IPABlock(dim=dim, **kw) for _ in range(depth)])
        self.head = nn.Linear(dim, 3)

    def forward(self, x, pairwise_repr=None, mask=None, rotations=None, translations=None):
        for block in self.blocks:
            x = block(x, pairwise_repr=pairwise_repr, rotations=rotations,
                      translations=translations, mask=mask)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="blocks", choices=["blocks", "structure"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--residues", type=int, default=12)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--no-pair", action="store_true")
    p.add_argument("--no-detach", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--pre-norm", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    kw = dict(heads=args.heads, scalar_key_dim=8, scalar_value_dim=8, point_key_dim=4,
              point_value_dim=4, require_pairwise_repr=not args.no_pair,
              post_norm=not args.pre_norm, post_attn_dropout=args.dropout,
              post_ff_dropout=args.dropout)
    b, n, dim = args.batch, args.residues, args.dim
    if args.mode == "structure":
        model = Structure(dim, args.depth, detach=not args.no_detach, **kw)
    else:
        model = Blocks(dim, args.depth, **kw)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        single = torch.randn(b, n, dim)
        pair = None if args.no_pair else torch.randn(b, n, n, dim)
        mask = None
        if args.mask:
            mask = torch.ones(b, n, dtype=torch.bool)
            mask[: b // 2, -(n // 4):] = False
        target = torch.randn(b, n, 3)
        if args.mode == "structure":
            out = model(single, pairwise_repr=pair, mask=mask)
        else:
            rotations = torch.stack([torch.stack([rot(*torch.rand(3)) for _ in range(n)])
                                     for _ in range(b)])
            out = model(single, pairwise_repr=pair, mask=mask, rotations=rotations,
                        translations=torch.randn(b, n, 3))
        err = (out - target).pow(2).sum(-1)
        if mask is not None:
            return err[mask].mean()
        return err.mean()

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
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
