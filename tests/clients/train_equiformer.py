"""Equiformer (equiformer-pytorch, lucidrains) as its README writes it: an SE(3)-equivariant
graph attention transformer over points, each node a fiber of features of degrees 0..D-1
(`num_degrees`), attention over its nearest neighbours (`num_neighbors`) with the
relative-position basis (Wigner-D rotations of the edge vectors, the constant spherical
basis kept as buffers), then `reduce_dim_out` to one channel per degree. Trained on a toy
equivariant target: each node's type-1 output regressed on its displacement to the
centroid of the cloud (rotates with the input). Seeded, tiny, nothing downloaded.

    python tests/clients/train_equiformer.py --steps 3
    memledger trace tests/clients/train_equiformer.py --steps 2 -o eq.ledger -- --mlp-attn
    memledger compare tests/clients/train_equiformer.py -p 'checkpoint:layers.blocks.*.0'

Options: `--mlp-attn` (`l2_dist_attention=False`, the paper's MLP attention),
`--reversible` (the library's reversible trunk: a custom autograd Function re-running the
blocks in backward), `--neighbors K`, `--mask` (the last node padded out), `--tokens`
(type-0 input as token ids through `num_tokens`, else random type-0 features), `--adam`
(else SGD), `--accum N`, `--validate` (a loss under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn.functional as F

from equiformer_pytorch import Equiformer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--nodes", type=int, default=6)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dim", type=int, default=4)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--degrees", type=int, default=2)
    p.add_argument("--neighbors", type=float, default=float("inf"))
    p.add_argument("--mlp-attn", action="store_true")
    p.add_argument("--reversible", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--tokens", action="store_true")
    p.add_argument("--adam", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = Equiformer(num_tokens=24 if args.tokens else None, dim=args.dim,
                       dim_head=args.dim, heads=2, num_degrees=args.degrees,
                       depth=args.depth, num_neighbors=args.neighbors,
                       radial_hidden_dim=8, reduce_dim_out=True,
                       l2_dist_attention=not args.mlp_attn, reversible=args.reversible)
    optim = (torch.optim.Adam(model.parameters(), lr=1e-3) if args.adam
             else torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9))
    b, n = args.batch, args.nodes

    def loss_of() -> torch.Tensor:
        feats = (torch.randint(0, 24, (b, n)) if args.tokens else torch.randn(b, n, args.dim))
        coors = torch.randn(b, n, 3)
        mask = torch.ones(b, n, dtype=torch.bool)
        if args.mask:
            mask[:, -1] = False
        out = model(feats, coors, mask)
        target = coors.mean(dim=1, keepdim=True) - coors
        return F.mse_loss(out.type1[mask], target[mask])

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
