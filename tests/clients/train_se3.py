"""se3-transformer-pytorch and triangle-multiplicative-module (lucidrains) as their READMEs use
them, tiny. Seeded, nothing downloaded.

    python tests/clients/train_se3.py --steps 3 --model se3
    memledger trace tests/clients/train_se3.py --steps 2 -o se3.ledger -- --model se3
    memledger compare tests/clients/train_se3.py -p 'checkpoint:se3.net.blocks.*' -- --model se3

Models (`--model`):

- `se3`: an `SE3Transformer` on a random point cloud (`--points` nodes, 3-d coordinates,
  `--dim` type-0 features a node), `--degrees` degrees of hidden features, `--neighbors`
  nearest neighbours a node attends to, a feature mask; trained as the README's denoising
  example: the type-1 output (`return_type=1`, `reduce_dim_out=True`) added to the noised
  coordinates, an MSE to the clean ones. The library computes its equivariant basis in
  every forward (spherical harmonics of the neighbours' relative positions times the
  Q_J matrices, which it computes by float64 SVDs at their first use and keeps in an
  `lru_cache` over a pickled disk cache at `CACHE_PATH`: see the tier's fixture).
  `--tokens` (type-0 input as token ids, `num_tokens`), `--adj` (a chain's adjacency
  matrix, `attend_sparse_neighbors`, `num_adj_degrees=2` with an adjacency embedding),
  `--edges` (edge tokens, `num_edge_tokens` / `edge_dim`), `--reversible` (the library's
  reversible trunk: a custom Function that recomputes each block in its backward),
  `--rotary` (`rotary_position`), `--one-kv` (`one_headed_key_values`), `--linear-keys`
  (`linear_proj_keys`), `--tie-kv`, `--null-kv`, `--convs N` (`num_conv_layers`),
  `--diff-coors` (`differentiable_coors`: the basis is differentiated through), `--egnn`
  (`use_egnn`: the EGNN trunk instead of attention; type-0 output), `--global` (global
  features).
- `pair`: an AlphaFold2-style pair representation: token embeddings (i + j outer sum) into
  (b, n, n, d), `--depth` blocks of `TriangleMultiplicativeModule` outgoing then ingoing,
  each residual (`x = x + tri(x, mask)`), then a distogram head (Linear to 8 bins) and a
  cross-entropy on random bins. `--hidden` (hidden_dim), `--mask` (a pair mask from a
  padded sequence).

Both: `--accum N`, `--validate` (a no_grad loss in eval mode each step), `--sgd`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from se3_transformer_pytorch import SE3Transformer
from triangle_multiplicative_module import TriangleMultiplicativeModule


class Denoiser(nn.Module):
    """The README's denoising example as a module: the SE3Transformer's type-1 output moves
    the noised coordinates."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        kw = dict(dim=args.dim, heads=2, dim_head=args.dim, depth=args.depth,
                  num_degrees=args.degrees, valid_radius=10, num_neighbors=args.neighbors,
                  reversible=args.reversible, rotary_position=args.rotary,
                  one_headed_key_values=args.one_kv, linear_proj_keys=args.linear_keys,
                  tie_key_values=args.tie_kv, use_null_kv=args.null_kv,
                  num_conv_layers=args.convs, differentiable_coors=args.diff_coors)
        if args.tokens:
            kw.update(num_tokens=24)
        if args.adj:
            kw.update(attend_sparse_neighbors=True, num_adj_degrees=2, adj_dim=4)
        if args.edges:
            kw.update(num_edge_tokens=4, edge_dim=4)
        if args.global_feats:
            kw.update(global_feats_dim=args.dim)
        if args.egnn:
            kw.update(use_egnn=True, output_degrees=1, egnn_hidden_dim=8)
        else:
            kw.update(output_degrees=2, reduce_dim_out=True)
        self.se3 = SE3Transformer(**kw)

    def forward(self, feats, coors, mask, extra):
        if self.args.egnn:
            out = self.se3(feats, coors, mask, return_type=0, **extra)
            return coors + out.mean(dim=-1, keepdim=True)
        return coors + self.se3(feats, coors, mask, return_type=1, **extra)


class PairNet(nn.Module):
    """A pair representation refined by triangle multiplicative updates, outgoing then
    ingoing, each residual, then a distogram head."""

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        d = args.dim
        self.embed = nn.Embedding(21, d)
        self.blocks = nn.ModuleList(
            nn.ModuleList([TriangleMultiplicativeModule(dim=d, hidden_dim=args.hidden,
                                                        mix="outgoing"),
                           TriangleMultiplicativeModule(dim=d, hidden_dim=args.hidden,
                                                        mix="ingoing")])
            for _ in range(args.depth))
        self.to_bins = nn.Linear(d, 8)

    def forward(self, seq, mask):
        e = self.embed(seq)                                   # (b, n, d)
        x = e[:, :, None, :] + e[:, None, :, :]               # (b, n, n, d)
        for out_mix, in_mix in self.blocks:
            x = x + out_mix(x, mask=mask)
            x = x + in_mix(x, mask=mask)
        return self.to_bins(x)                                # (b, n, n, 8)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="se3", choices=["se3", "pair"])
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--points", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--degrees", type=int, default=2)
    p.add_argument("--neighbors", type=int, default=4)
    p.add_argument("--tokens", action="store_true")
    p.add_argument("--adj", action="store_true")
    p.add_argument("--edges", action="store_true")
    p.add_argument("--reversible", action="store_true")
    p.add_argument("--rotary", action="store_true")
    p.add_argument("--one-kv", action="store_true")
    p.add_argument("--linear-keys", action="store_true")
    p.add_argument("--tie-kv", action="store_true")
    p.add_argument("--null-kv", action="store_true")
    p.add_argument("--convs", type=int, default=0)
    p.add_argument("--diff-coors", action="store_true")
    p.add_argument("--egnn", action="store_true")
    p.add_argument("--global-feats", action="store_true")
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    b, n = args.batch, args.points
    if args.model == "se3":
        model = Denoiser(args)

        def loss_of() -> torch.Tensor:
            if args.tokens:
                feats = torch.randint(0, 24, (b, n))
            else:
                feats = torch.randn(b, n, args.dim)
            coors = torch.randn(b, n, 3)
            mask = torch.ones(b, n, dtype=torch.bool)
            mask[1:, -2:] = False
            extra = {}
            if args.adj:
                i = torch.arange(n)
                adj = (i[:, None] == i[None, :] + 1) | (i[:, None] == i[None, :] - 1)
                extra["adj_mat"] = adj[None].expand(b, n, n)
            if args.edges:
                extra["edges"] = torch.randint(0, 4, (b, n, n))
            if args.global_feats:
                extra["global_feats"] = torch.randn(b, 2, args.dim)
            noised = coors + torch.randn_like(coors) * 0.1
            return F.mse_loss(model(feats, noised, mask, extra), coors)
    else:
        model = PairNet(args)

        def loss_of() -> torch.Tensor:
            seq = torch.randint(0, 21, (b, n))
            mask = None
            if args.mask:
                keep = torch.ones(b, n, dtype=torch.bool)
                keep[1:, -2:] = False
                mask = keep[:, :, None] & keep[:, None, :]
            logits = model(seq, mask)
            bins = torch.randint(0, 8, (b, n, n))
            return F.cross_entropy(logits.reshape(-1, 8), bins.reshape(-1))

    optim = (torch.optim.SGD(model.parameters(), lr=1e-2) if args.sgd
             else torch.optim.Adam(model.parameters(), lr=1e-3))
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
