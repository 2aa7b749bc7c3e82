"""graph-transformer-pytorch (lucidrains) as its README writes it: a `GraphTransformer`
over node features and pairwise edge features (`edges`: (b, n, n, edge_dim)), layers of
`PreNorm(Attention)` (edge features added to each key and value) behind a
`GatedResidual` (a sigmoid gate over `cat(x, res, x - res)`), optionally with
feedforwards, rotary positions (`rel_pos_emb`: one `RotaryEmbedding` shared by every
layer) and an adjacency matrix embedded into the edges. A node-regression or
node-classification head on a tiny random batch of graphs with a node mask. Seeded,
tiny, nothing downloaded.

    python tests/clients/train_graph_transformer.py --steps 3
    memledger trace tests/clients/train_graph_transformer.py --steps 2 -o gt.ledger -- --ff
    memledger compare tests/clients/train_graph_transformer.py -p 'checkpoint:gt.layers.*.*.0' -- --ff

Options: `--ff` (`with_feedforwards`), `--rotary` (`rel_pos_emb`), `--adj` (an
adjacency matrix besides the edges, `accept_adjacency_matrix`), `--no-edges` (the
adjacency matrix alone), `--norm-edges`, `--no-gate` (`gated_residual=False`, which the
library ignores), `--task regress|classify`, `--accum N`, `--amp` (bf16 autocast),
`--validate` (a loss under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from graph_transformer_pytorch import GraphTransformer


class NodeModel(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        self.gt = GraphTransformer(dim=args.dim, depth=args.depth, edge_dim=args.edge_dim,
                                   dim_head=args.dim_head, heads=args.heads,
                                   with_feedforwards=args.ff, gated_residual=not args.no_gate,
                                   norm_edges=args.norm_edges, rel_pos_emb=args.rotary,
                                   accept_adjacency_matrix=args.adj or args.no_edges)
        out = 1 if args.task == "regress" else args.classes
        self.head = nn.Linear(args.dim, out)

    def forward(self, nodes, edges, adj, mask):
        nodes, _ = self.gt(nodes, edges, adj_mat=adj, mask=mask)
        return self.head(nodes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--edge-dim", type=int, default=8)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--nodes", type=int, default=12)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--task", default="regress", choices=["regress", "classify"])
    p.add_argument("--ff", action="store_true")
    p.add_argument("--rotary", action="store_true")
    p.add_argument("--adj", action="store_true")
    p.add_argument("--no-edges", action="store_true")
    p.add_argument("--norm-edges", action="store_true")
    p.add_argument("--no-gate", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = NodeModel(args)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    b, n = args.batch, args.nodes

    def loss_of() -> torch.Tensor:
        nodes = torch.randn(b, n, args.dim)
        edges = None if args.no_edges else torch.randn(b, n, n, args.edge_dim)
        adj = torch.rand(b, n, n) < 0.3 if args.adj or args.no_edges else None
        mask = torch.ones(b, n, dtype=torch.bool)
        mask[:, n - 3:] = False                      # the last 3 nodes of each graph: padding
        out = model(nodes, edges, adj, mask)
        if args.task == "regress":
            return F.mse_loss(out[mask].squeeze(-1), torch.randn(int(mask.sum())))
        labels = torch.randint(0, args.classes, (b, n))
        return F.cross_entropy(out[mask], labels[mask])

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
