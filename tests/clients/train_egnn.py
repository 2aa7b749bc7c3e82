"""E(n)-equivariant graph networks trained with lucidrains' egnn-pytorch, as its README
writes them: random point clouds (features + 3-D coordinates), a plain Adam loop on an
equivariant loss (denoise the coordinates: the network sees them jittered and must give
back the clean ones, an MSE that rotations and translations leave unchanged, plus a loss
on the features).

Modes (`--mode`):

- `layers`: `EGNN` layers in `blocks.*` (the README's `layer1 = EGNN(dim = 512)`, then
  `feats, coors = layer1(feats, coors)`), float features, a mask of padded nodes,
  `norm_coors`, `coor_weights_clamp_value`, and `--nearest K` neighbours (`topk` over the
  pairwise distances, `batched_index_select`).
- `network`: `EGNN_Network` (token and position embeddings, edge tokens, `num_adj_degrees`
  with an `adj_dim` embedding of the degree, global linear attention every other layer,
  `num_nearest_neighbors`, a mask), a cross-entropy on the tokens of the nodes.
- `sparse`: `EGNN_Network(only_sparse_neighbors = True)` with an adjacency matrix (a chain,
  the README's example): its neighbour count read off the matrix with `.item()` in every
  layer; `--coors-only` makes its layers move coordinates only (`update_feats = False`).
- `pyg`: `EGNN_Sparse_Network` (`EGNN_Sparse` layers, torch_geometric `MessagePassing` over
  an `edge_index`: a radius graph per cloud built by hand, no torch_cluster), nodes packed
  as `[coors | feats | token]` with the token embedded by its `embedding_nums`, a
  per-graph `torch_geometric.nn.norm.LayerNorm` on the features, edge attributes.

`--accumulate N`: N micro-batches per optimizer step (the loss divided by N, `backward`
per micro-batch). `--ckpt` (layers): the script wraps each layer call in
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` (egnn-pytorch has no
checkpointing of its own; `--ckpt reentrant`: `use_reentrant=True`, as older code does).
`--bf16`: the forward and loss under CPU bf16 autocast; `--dtype float64`; `--dropout`,
`--fourier`, `--soft-edges`, `--radius`: the layers' own options. Tiny, seeded, nothing downloaded.

    python tests/clients/train_egnn.py --steps 3 --mode network
    memledger trace tests/clients/train_egnn.py --steps 3 -o egnn.ledger -- --mode network
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from egnn_pytorch import EGNN, EGNN_Network

p = argparse.ArgumentParser()
p.add_argument("--mode", default="layers", choices=["layers", "network", "sparse", "pyg"])
p.add_argument("--steps", type=int, default=4)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--nodes", type=int, default=16)
p.add_argument("--dim", type=int, default=16)
p.add_argument("--depth", type=int, default=2)
p.add_argument("--nearest", type=int, default=0, help="num_nearest_neighbors (0: all pairs)")
p.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
p.add_argument("--ckpt", nargs="?", const="plain", choices=["plain", "reentrant"],
               help="torch.utils.checkpoint around each layer (reentrant: use_reentrant=True)")
p.add_argument("--radius", type=float, default=float("inf"),
               help="layers: valid_radius (neighbours farther away masked out; with --nearest)")
p.add_argument("--dropout", type=float, default=0.0, help="EGNN's dropout in its MLPs")
p.add_argument("--fourier", type=int, default=0, help="fourier_features of the distances")
p.add_argument("--soft-edges", action="store_true", help="soft_edges: a gate on each message")
p.add_argument("--coors-only", action="store_true", help="sparse: update_feats=False")
p.add_argument("--bf16", action="store_true", help="the forward under CPU bf16 autocast")
p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
p.add_argument("--coor-changes", action="store_true",
               help="network: return_coor_changes, the loss on every layer's coordinates")
p.add_argument("--no-mask", action="store_true", help="no mask of padded nodes")
args = p.parse_args()

torch.set_default_dtype(getattr(torch, args.dtype))
torch.manual_seed(0)
TOKENS = 8
EXTRA = dict(dropout=args.dropout, fourier_features=args.fourier, soft_edges=args.soft_edges)
g = torch.Generator().manual_seed(1)


class LayerStack(nn.Module):
    """The README's EGNN layers, called one after the other."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(args.dim, args.dim)
        self.blocks = nn.ModuleList([
            EGNN(dim=args.dim, m_dim=16, num_nearest_neighbors=args.nearest, norm_coors=True,
                 coor_weights_clamp_value=2.0, m_pool_method="mean",
                 valid_radius=args.radius, **EXTRA)
            for _ in range(args.depth)])
        self.out = nn.Linear(args.dim, args.dim)

    def forward(self, feats, coors, mask=None):
        feats = self.inp(feats)
        for block in self.blocks:
            if args.ckpt:
                feats, coors = checkpoint(block, feats, coors, None, mask,
                                          use_reentrant=args.ckpt == "reentrant")
            else:
                feats, coors = block(feats, coors, mask=mask)
        return self.out(feats), coors


if args.mode == "layers":
    model = LayerStack()
elif args.mode == "network":
    model = EGNN_Network(num_tokens=TOKENS, num_positions=args.nodes, dim=args.dim,
                         depth=args.depth, edge_dim=4, num_edge_tokens=3, num_adj_degrees=2,
                         adj_dim=4, num_nearest_neighbors=args.nearest,
                         global_linear_attn_every=2, global_linear_attn_heads=2,
                         global_linear_attn_dim_head=8, num_global_tokens=2,
                         coor_weights_clamp_value=2.0, **EXTRA)
elif args.mode == "pyg":
    from egnn_pytorch import EGNN_Sparse_Network
    model = EGNN_Sparse_Network(n_layers=args.depth, feats_dim=args.dim + 1, pos_dim=3,
                                m_dim=16, embedding_nums=[TOKENS], embedding_dims=[args.dim],
                                edge_attr_dim=1, fourier_features=args.fourier,
                                soft_edge=int(args.soft_edges), dropout=args.dropout,
                                aggr="mean")
else:
    model = EGNN_Network(num_tokens=TOKENS, dim=args.dim, depth=args.depth,
                         only_sparse_neighbors=True, num_adj_degrees=2, adj_dim=4,
                         norm_coors=True, update_feats=not args.coors_only, **EXTRA)
head = nn.Linear(args.dim * (2 if args.mode == "pyg" else 1), TOKENS) \
    if args.mode != "layers" else None
params = list(model.parameters()) + (list(head.parameters()) if head is not None else [])
opt = torch.optim.Adam(params, lr=1e-3)

# the README's adjacency: a chain, each node joined to the next
chain = torch.ones(args.nodes, dtype=torch.long).cumsum(0)
adj_mat = (chain[:, None] >= (chain[None, :] - 1)) & (chain[:, None] <= (chain[None, :] + 1))


def micro_batch():
    coors = torch.randn(args.batch, args.nodes, 3, generator=g)
    noisy = coors + 0.1 * torch.randn(coors.shape, generator=g)
    mask = None
    if not args.no_mask:
        lengths = torch.randint(args.nodes // 2, args.nodes + 1, (args.batch,), generator=g)
        mask = torch.arange(args.nodes)[None, :] < lengths[:, None]
    if args.mode == "layers":
        feats = torch.randn(args.batch, args.nodes, args.dim, generator=g)
        return (feats, noisy, mask), coors, feats
    if args.mode == "pyg":   # the clouds packed node after node, as torch_geometric batches
        n = args.batch * args.nodes
        feats = torch.randn(n, args.dim, generator=g)
        tokens = torch.randint(0, TOKENS, (n,), generator=g)
        batch = torch.arange(args.batch).repeat_interleave(args.nodes)
        pos = noisy.reshape(n, 3)
        d = torch.cdist(pos, pos)
        edge_index = ((d < 1.5) & (d > 0) & (batch[:, None] == batch[None, :])).nonzero().T
        edge_attr = torch.rand(edge_index.shape[1], 1, generator=g)
        x = torch.cat([pos, feats, tokens[:, None].float()], dim=-1)
        return (x, edge_index, batch, edge_attr), coors.reshape(n, 3), tokens
    tokens = torch.randint(0, TOKENS, (args.batch, args.nodes), generator=g)
    if args.mode == "network":
        edges = torch.randint(0, 3, (args.batch, args.nodes, args.nodes), generator=g)
        return (tokens, noisy, adj_mat, edges, mask), coors, tokens
    return (tokens, noisy, adj_mat, None, mask), coors, tokens


def loss_of(inputs, coors, target):
    if args.mode == "layers":
        feats, noisy, mask = inputs
        out, denoised = model(feats, noisy, mask=mask)
        feat_loss = F.mse_loss(out, target)
    elif args.mode == "pyg":
        x, edge_index, batch, edge_attr = inputs
        out = model(x, edge_index, batch, edge_attr)
        denoised = out[:, :3]
        feat_loss = F.cross_entropy(head(out[:, 3:]), target)
        return ((denoised - coors) ** 2).sum(-1).mean() + 0.1 * feat_loss
    else:
        tokens, noisy, adj, edges, mask = inputs
        if args.coor_changes:   # every layer's coordinates pulled toward the clean ones
            out, denoised, changes = model(tokens, noisy, adj_mat=adj, edges=edges, mask=mask,
                                           return_coor_changes=True)
            denoised = torch.stack(changes[1:]).mean(0)
        else:
            out, denoised = model(tokens, noisy, adj_mat=adj, edges=edges, mask=mask)
        feat_loss = F.cross_entropy(head(out).flatten(0, 1), target.flatten())
    m = torch.ones(coors.shape[:2], dtype=torch.bool) if inputs[-1] is None else inputs[-1]
    coor_loss = ((denoised - coors) ** 2).sum(-1)[m].mean()
    return coor_loss + 0.1 * feat_loss


for step in range(args.steps):
    opt.zero_grad()
    total = 0.0
    for _ in range(args.accumulate):
        inputs, coors, target = micro_batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = loss_of(inputs, coors, target) / args.accumulate
        loss.backward()
        total += loss.item()
    opt.step()
    print(step, round(total, 5))
