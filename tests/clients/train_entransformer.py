"""E(n)-equivariant transformers trained with lucidrains' En-transformer, as its README
writes them: `EnTransformer(num_tokens=..., dim=..., depth=..., neighbors=..., edge_dim=...)`
on random point clouds (tokens + 3-D coordinates + edge tokens + a mask), a plain Adam loop
denoising the coordinates (the model sees them jittered and must give back the clean ones,
an MSE that rotations and translations leave unchanged) plus a cross-entropy on the tokens.

Options: `--neighbors K` (`topk` over the distances, `einx.get_at` gathers), `--adj` (the
README's chain adjacency matrix, `num_adj_degrees=2`, `adj_dim`), `--sparse`
(`only_sparse_neighbors=True`: the neighbour count read with `.item()` in every layer),
`--linear-heads N` (global Taylor-series linear attention beside the local one),
`--cross` (`use_cross_product`), `--talking-heads`, `--rel-pos`, `--dropout P` (attn and
ff dropout), `--ckpt` (the library's own `checkpoint=True`: `checkpoint_sequential` over its
blocks), `--accumulate N`, `--bf16` (CPU bf16 autocast). Tiny, seeded, nothing downloaded.

    python tests/clients/train_entransformer.py --steps 3 --neighbors 4
    memledger trace tests/clients/train_entransformer.py --steps 3 -o en.ledger -- --adj
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

from en_transformer import EnTransformer

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--nodes", type=int, default=12)
p.add_argument("--dim", type=int, default=16)
p.add_argument("--depth", type=int, default=2)
p.add_argument("--heads", type=int, default=2)
p.add_argument("--neighbors", type=int, default=4,
               help="(En-transformer 1.6.6 needs neighbours with a mask: k_mask is unset)")
p.add_argument("--adj", action="store_true", help="the README's chain adjacency, 2 degrees")
p.add_argument("--sparse", action="store_true", help="only_sparse_neighbors=True (with --adj)")
p.add_argument("--linear-heads", type=int, default=0, help="num_global_linear_attn_heads")
p.add_argument("--cross", action="store_true", help="use_cross_product")
p.add_argument("--talking-heads", action="store_true")
p.add_argument("--rel-pos", action="store_true", help="rel_pos_emb")
p.add_argument("--dropout", type=float, default=0.0)
p.add_argument("--ckpt", action="store_true", help="EnTransformer(checkpoint=True)")
p.add_argument("--accumulate", type=int, default=1)
p.add_argument("--bf16", action="store_true")
p.add_argument("--no-edges", action="store_true")
p.add_argument("--no-mask", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
TOKENS, EDGE_TOKENS = 8, 4
model = EnTransformer(
    num_tokens=TOKENS, dim=args.dim, depth=args.depth, dim_head=32, heads=args.heads,
    edge_dim=0 if args.no_edges else 4, num_edge_tokens=None if args.no_edges else EDGE_TOKENS,
    neighbors=args.neighbors, only_sparse_neighbors=args.sparse,
    num_adj_degrees=2 if args.adj else None, adj_dim=4 if args.adj else 0,
    num_global_linear_attn_heads=args.linear_heads, use_cross_product=args.cross,
    talking_heads=args.talking_heads, rel_pos_emb=args.rel_pos, checkpoint=args.ckpt,
    attn_dropout=args.dropout, ff_dropout=args.dropout)
head = nn.Linear(args.dim, TOKENS)
opt = torch.optim.Adam([*model.parameters(), *head.parameters()], lr=1e-3)
g = torch.Generator().manual_seed(1)

# the README's adjacency: a chain, each node joined to the next
chain = torch.ones(args.nodes, dtype=torch.long).cumsum(0)
adj_mat = (chain[:, None] >= (chain[None, :] - 1)) & (chain[:, None] <= (chain[None, :] + 1))


def micro_batch():
    tokens = torch.randint(0, TOKENS, (args.batch, args.nodes), generator=g)
    coors = torch.randn(args.batch, args.nodes, 3, generator=g)
    noisy = coors + 0.1 * torch.randn(coors.shape, generator=g)
    edges = None if args.no_edges else \
        torch.randint(0, EDGE_TOKENS, (args.batch, args.nodes, args.nodes), generator=g)
    mask = None
    if not args.no_mask:
        lengths = torch.randint(args.nodes // 2, args.nodes + 1, (args.batch,), generator=g)
        mask = torch.arange(args.nodes)[None, :] < lengths[:, None]
    return tokens, coors, noisy, edges, mask


for step in range(args.steps):
    opt.zero_grad()
    total = 0.0
    for _ in range(args.accumulate):
        tokens, coors, noisy, edges, mask = micro_batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            feats, denoised = model(tokens, noisy, edges=edges, mask=mask,
                                    adj_mat=adj_mat if args.adj else None)
            m = torch.ones_like(tokens, dtype=torch.bool) if mask is None else mask
            coor_loss = ((denoised - coors) ** 2).sum(-1)[m].mean()
            feat_loss = F.cross_entropy(head(feats)[m], tokens[m])
            loss = (coor_loss + 0.1 * feat_loss) / args.accumulate
        loss.backward()
        total += loss.item()
    opt.step()
    print(step, round(total, 5))
