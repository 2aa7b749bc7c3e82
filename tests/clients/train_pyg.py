"""PyTorch Geometric (torch_geometric) models on synthetic random graphs built here, under an
ordinary AdamW loop (`--bf16`: CPU autocast; `--accum N`: micro-batches a step). Tiny
shapes, seeded, nothing downloaded (no datasets).

    python tests/clients/train_pyg.py --case gcn --steps 3
    memledger trace tests/clients/train_pyg.py --steps 2 -o pyg.ledger -- --case gat

Full-batch node classification on one graph (`--nodes` nodes, `--edges` random directed
edges, features 16, classes 4; loss on a training mask): gcn (GCNConv: self loops,
symmetric degree normalisation by scatter), gat (GATConv: per-edge attention,
`torch_geometric.utils.softmax` over each node's in-edges, attention dropout), gatv2
(GATv2Conv with edge features), sage (SAGEConv, mean aggregation), gin (GINConv with an
MLP, sum aggregation), transformer (TransformerConv with edge features and a root weight),
softmax_aggr (GENConv: a learnable softmax aggregation, its MLP with LayerNorm), appnp (GIN
layers, then APPNP: 4 steps of propagation in one module, `prop`), jk (PyG's own
`models.GAT`, BatchNorm, an LSTM jumping-knowledge head: `net.convs.*`, `net.jk`),
basic_gin (`models.GIN`, `jk="cat"`), hetero and hetero_eager (a paper/author graph,
`HeteroConv` of SAGEConv and GATConv per edge type, papers classified, so the last layer's
author branch reaches no loss; hetero builds its layers lazily, `in_channels=-1`).

Mini-batch graph classification (`--graphs` small graphs, `--batch` of them a step joined
by `torch_geometric.data.Batch.from_data_list`, node features pooled per graph):
gin_graph (GINConv + BatchNorm, `global_add_pool`), gps (GPSConv: a GINEConv local layer plus
multi-head attention over each graph's nodes, `to_dense_batch` inside, BatchNorm,
`global_mean_pool`), gat_graph (GATConv, `global_max_pool`), pna_graph (PNAConv: mean, min,
max, std aggregators, three degree scalers, towers), topk_graph (GraphConv + TopKPooling,
`pools.*`: data-dependent sizes), diffpool_graph (dense: `to_dense_batch`, `to_dense_adj`,
DenseSAGEConv, `dense_diff_pool` and its auxiliary losses).

The convolutions are `convs.0`, `convs.1`, ... (`checkpoint:convs.*`).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

IN, CLASSES = 16, 4


def random_graph(n: int, e: int, gen, edge_dim: int = 0):
    from torch_geometric.data import Data
    src = torch.randint(0, n, (e,), generator=gen)
    dst = torch.randint(0, n, (e,), generator=gen)
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    data = Data(x=torch.randn(n, IN, generator=gen), edge_index=ei)
    if edge_dim:
        data.edge_attr = torch.randn(ei.size(1), edge_dim, generator=gen)
    return data


def conv(case: str, i: int, d_in: int, d: int):
    import torch_geometric.nn as gnn
    if case == "gcn":
        return gnn.GCNConv(d_in, d)
    if case == "topk_graph":
        return gnn.GraphConv(d_in, d, aggr="mean")
    if case in ("gat", "gat_graph"):
        return gnn.GATConv(d_in, d // 4, heads=4, dropout=0.1)
    if case == "sage":
        return gnn.SAGEConv(d_in, d, aggr="mean")
    if case in ("gin", "gin_graph", "appnp"):
        return gnn.GINConv(nn.Sequential(nn.Linear(d_in, d), nn.ReLU(), nn.Linear(d, d)),
                           train_eps=True)
    if case == "transformer":
        return gnn.TransformerConv(d_in, d // 4, heads=4, dropout=0.1, edge_dim=8)
    if case == "gatv2":
        return gnn.GATv2Conv(d_in, d // 4, heads=4, dropout=0.1, edge_dim=8)
    if case == "pna_graph":   # four aggregators (std: a scatter of squares) x three scalers
        deg = torch.tensor([0, 2, 4, 6, 4, 2, 1])
        return gnn.PNAConv(d_in, d, aggregators=["mean", "min", "max", "std"],
                           scalers=["identity", "amplification", "attenuation"], deg=deg,
                           towers=2, divide_input=False)
    if case == "softmax_aggr":   # a learnable softmax aggregation (utils.softmax, per channel)
        return gnn.GENConv(d_in, d, aggr="softmax", t=1.0, learn_t=True, num_layers=2,
                           norm="layer")
    if case == "gps":
        local = gnn.GINEConv(nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d)),
                             edge_dim=d)
        return gnn.GPSConv(d, local, heads=4, dropout=0.1, attn_type="multihead")
    raise SystemExit(f"unknown case {case}")


class Net(nn.Module):
    def __init__(self, case: str, layers: int, hidden: int) -> None:
        super().__init__()
        import torch_geometric.nn as gnn
        self.case = case
        self.graph_level = case.endswith("_graph") or case == "gps"
        if case == "gps":
            self.embed = nn.Linear(IN, hidden)
            self.edge_embed = nn.Linear(8, hidden)
        d_in = hidden if case == "gps" else IN
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.pools = nn.ModuleList()
        for i in range(layers):
            self.convs.append(conv(case, i, d_in, hidden))
            if case in ("gin_graph", "pna_graph"):
                self.norms.append(nn.BatchNorm1d(hidden))
            if case == "topk_graph":
                self.pools.append(gnn.TopKPooling(hidden, ratio=0.7))
            d_in = hidden
        if case == "appnp":   # K steps of propagation in one module, no weights
            self.prop = gnn.APPNP(K=4, alpha=0.1, dropout=0.1)
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, data):
        from torch_geometric.nn import (global_add_pool, global_max_pool,
                                        global_mean_pool)
        x, ei = data.x, data.edge_index
        ea = getattr(data, "edge_attr", None)
        batch = getattr(data, "batch", None)
        if self.case == "gps":
            x, ea = self.embed(x), self.edge_embed(ea)
        for i, c in enumerate(self.convs):
            if self.case in ("transformer", "gatv2"):
                x = c(x, ei, ea)
            elif self.case == "gps":
                x = c(x, ei, batch, edge_attr=ea)
            else:
                x = c(x, ei)
            if self.case == "gps":
                continue
            if self.norms:
                x = self.norms[i](x)
            if self.pools:   # keeps the top 70 % of nodes of each graph, and their edges
                x, ei, _, batch, _, _ = self.pools[i](x, ei, batch=batch)
            if i < len(self.convs) - 1:
                x = F.dropout(F.relu(x), p=0.1, training=self.training)
        if self.case == "appnp":
            x = self.prop(x, ei)
        if not self.graph_level:
            return self.head(x)
        pool = {"gin_graph": global_add_pool, "gps": global_mean_pool,
                "gat_graph": global_max_pool, "pna_graph": global_mean_pool,
                "topk_graph": global_max_pool}[self.case]
        return self.head(pool(x, batch))


class LibraryModel(nn.Module):
    """A model class of PyG's own (`torch_geometric.nn.models`), called on x, edge_index:
    jk (GAT, BatchNorm after each layer, an LSTM-attention jumping-knowledge head over the
    layers' outputs), basic_gin (GIN with `jk="cat"`)."""

    def __init__(self, case: str, layers: int, hidden: int) -> None:
        super().__init__()
        from torch_geometric.nn import models
        self.graph_level = False
        if case == "jk":
            self.net = models.GAT(IN, hidden, layers, CLASSES, dropout=0.1, norm="batch_norm",
                                  jk="lstm", heads=2)
        else:
            self.net = models.GIN(IN, hidden, layers, CLASSES, dropout=0.1, jk="cat")

    def forward(self, data):
        return self.net(data.x, data.edge_index)


class Hetero(nn.Module):
    """hetero: two node types (paper, author), three edge types, `HeteroConv` of a SAGEConv
    and a GATConv per edge type, summed per destination type; classifies papers."""

    def __init__(self, layers: int, hidden: int, lazy: bool = True) -> None:
        super().__init__()
        import torch_geometric.nn as gnn
        self.graph_level = False
        self.convs = nn.ModuleList()
        for i in range(layers):
            # lazy: in_channels -1, the layers' weights made at their first forward
            p, a = (-1, -1) if lazy else (IN if i == 0 else hidden, 8 if i == 0 else hidden)
            self.convs.append(gnn.HeteroConv({
                ("paper", "cites", "paper"): gnn.SAGEConv((p, p), hidden),
                ("author", "writes", "paper"): gnn.SAGEConv((a, p), hidden),
                ("paper", "rev_writes", "author"): gnn.GATConv((p, a), hidden,
                                                               add_self_loops=False),
            }, aggr="sum"))
        self.head = nn.Linear(hidden, CLASSES)

    def forward(self, data):
        x, ei = data.x_dict, data.edge_index_dict
        for c in self.convs:
            x = {k: F.relu(v) for k, v in c(x, ei).items()}
        return self.head(x["paper"])


class DiffPool(nn.Module):
    """diffpool_graph: dense graphs (`to_dense_batch`, `to_dense_adj`), DenseSAGEConv
    layers, one `dense_diff_pool` to 4 clusters with its link and entropy losses."""

    def __init__(self, layers: int, hidden: int) -> None:
        super().__init__()
        import torch_geometric.nn as gnn
        self.graph_level = True
        self.convs = nn.ModuleList([gnn.DenseSAGEConv(IN if i == 0 else hidden, hidden)
                                    for i in range(layers)])
        self.assign = gnn.DenseSAGEConv(hidden, 4)
        self.head = nn.Linear(hidden, CLASSES)
        self.aux = 0.0

    def forward(self, data):
        from torch_geometric.nn import dense_diff_pool
        from torch_geometric.utils import to_dense_adj, to_dense_batch
        x, mask = to_dense_batch(data.x, data.batch)
        adj = to_dense_adj(data.edge_index, data.batch)
        for i, c in enumerate(self.convs[:-1]):
            x = F.relu(c(x, adj, mask))
        s = self.assign(x, adj, mask)
        x, adj, link, ent = dense_diff_pool(x, adj, s, mask)
        x = F.relu(self.convs[-1](x, adj))
        self.aux = link + ent
        return self.head(x.mean(dim=1))


def hetero_graph(n: int, e: int, gen):
    from torch_geometric.data import HeteroData
    data = HeteroData()
    data["paper"].x = torch.randn(n, IN, generator=gen)
    data["author"].x = torch.randn(n // 2, 8, generator=gen)
    data["paper", "cites", "paper"].edge_index = torch.randint(0, n, (2, e), generator=gen)
    w = torch.stack([torch.randint(0, n // 2, (e // 2,), generator=gen),
                     torch.randint(0, n, (e // 2,), generator=gen)])
    data["author", "writes", "paper"].edge_index = w
    data["paper", "rev_writes", "author"].edge_index = w.flip(0)
    return data


def build(case: str, layers: int, hidden: int) -> nn.Module:
    if case in ("jk", "basic_gin"):
        return LibraryModel(case, layers, hidden)
    if case in ("hetero", "hetero_eager"):
        return Hetero(layers, hidden, lazy=case == "hetero")
    if case == "diffpool_graph":
        return DiffPool(layers, hidden)
    return Net(case, layers, hidden)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="gcn")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--edges", type=int, default=256)
    p.add_argument("--graphs", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast on CPU")
    p.add_argument("--accum", type=int, default=1, help="micro-batches a step")
    args = p.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    model = build(args.case, args.layers, args.hidden)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    edge_dim = 8 if args.case in ("transformer", "gps", "gatv2") else 0

    if model.graph_level:
        from torch_geometric.data import Batch
        graphs = []
        for _ in range(args.graphs):
            n = int(torch.randint(6, 20, (), generator=gen))
            g = random_graph(n, 3 * n, gen, edge_dim)
            g.y = torch.randint(0, CLASSES, (1,), generator=gen)
            graphs.append(g)
    elif args.case.startswith("hetero"):
        graph = hetero_graph(args.nodes, args.edges, gen)
        labels = torch.randint(0, CLASSES, (args.nodes,), generator=gen)
        train_mask = torch.rand(args.nodes, generator=gen) < 0.5
    else:
        graph = random_graph(args.nodes, args.edges, gen, edge_dim)
        labels = torch.randint(0, CLASSES, (args.nodes,), generator=gen)
        train_mask = torch.rand(args.nodes, generator=gen) < 0.5

    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                if model.graph_level:
                    pick = torch.randperm(len(graphs), generator=gen)[:args.batch].tolist()
                    data = Batch.from_data_list([graphs[i] for i in pick])
                    loss = F.cross_entropy(model(data), data.y)
                    if isinstance(model, DiffPool):
                        loss = loss + model.aux
                else:
                    out = model(graph)
                    loss = F.cross_entropy(out[train_mask], labels[train_mask])
            (loss / args.accum).backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
