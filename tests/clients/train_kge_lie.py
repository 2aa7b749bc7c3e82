"""Two libraries as their READMEs train them, tiny, seeded, nothing downloaded.

    python tests/clients/train_kge_lie.py --steps 3 --lib kge --model transe
    memledger trace tests/clients/train_kge_lie.py --steps 2 -o kge.ledger -- --lib kge
    memledger compare tests/clients/train_kge_lie.py -p 'checkpoint:net.blocks.*.*' -- --lib lie

`--lib kge`: torchkge's knowledge-graph embeddings on a `KnowledgeGraph` built from a pandas
DataFrame of random (from, rel, to) triples (40 entities, 4 relations, 160 facts), batches
from its `DataLoader`, negatives made each step by its sampler (`--sampler bern` or `unif`,
`--n-neg N` per fact), scored by the model's forward (positives and negatives), its
`MarginLoss` (`--loss logistic`, `bce`: the other losses), Adam. `--model transe`
(`dissimilarity_type` L2, `--l1`: L1), `distmult`, `complex`, `transh`. After each step
the loop calls `model.normalize_parameters()` (the README calls it each epoch; an epoch is a
step here): the entity embeddings are renormed and the result assigned to the weight's
`.data` (a new storage for the parameter, the old one let go). `--trainer`: the steps run
through the library's `Trainer.process_batch` with its `TrainDataLoader` (negatives made
per epoch, not per step). `--sparse`: the embeddings `sparse=True` and `SparseAdam` (no
option of the library: a user's change). `--no-renorm`. `--evaluate`: after each step the
library's `LinkPredictionEvaluator` ranks every entity as head and tail of the first 32 facts
(`evaluate(b_size=16)`, as its README calls it: with gradients on).

`--lib lie`: lie-transformer-pytorch's `LieTransformer` on random point clouds (8 points in
3-D, features of dim 16, `liftsamples` 2, 2 heads of 8, `nbhd` 4, depth 2), its output
features regressed on random targets (MSE), Adam. Each training forward of a
`LieSelfAttention` updates its ball radius buffer `r` in place from the fill it saw.
`--reversible` (`ReversibleSequence`: the blocks' forward under no_grad, their backward a
re-run), `--tokens` (integer features through its token embedding), `--mask` (the last 2
points of each cloud masked). (0.0.17's `ds_frac` < 1 and `return_pooled` fail in the
library itself: a residual over the subsampled points, a pool that unpacks 3 of 4.)

Both: `--accum N`, `--validate` (a loss under no_grad in eval mode each step).
"""

import argparse

import torch
import torch.nn.functional as F


def kge(args) -> None:
    import pandas as pd
    from torchkge.data_structures import KnowledgeGraph
    from torchkge.evaluation import LinkPredictionEvaluator
    from torchkge.models import ComplExModel, DistMultModel, TransEModel, TransHModel
    from torchkge.sampling import BernoulliNegativeSampler, UniformNegativeSampler
    from torchkge.utils import BinaryCrossEntropyLoss, DataLoader, LogisticLoss, MarginLoss
    from torchkge.utils.training import Trainer, TrainDataLoader

    g = torch.Generator().manual_seed(1)
    n_ent, n_rel, n_facts = 40, 4, 160
    ids = torch.randint(0, n_ent, (n_facts, 2), generator=g).tolist()
    rels = torch.randint(0, n_rel, (n_facts,), generator=g).tolist()
    df = pd.DataFrame({"from": [f"e{a}" for a, _ in ids], "rel": [f"r{r}" for r in rels],
                       "to": [f"e{b}" for _, b in ids]})
    kg = KnowledgeGraph(df=df)
    kg_test = KnowledgeGraph(df=df[:32], ent2ix=kg.ent2ix, rel2ix=kg.rel2ix) \
        if args.evaluate else None

    dim = args.dim
    if args.model == "transe":
        model = TransEModel(dim, kg.n_ent, kg.n_rel, dissimilarity_type="L1" if args.l1 else "L2")
    elif args.model == "transh":
        model = TransHModel(dim, kg.n_ent, kg.n_rel)
    elif args.model == "distmult":
        model = DistMultModel(dim, kg.n_ent, kg.n_rel)
    else:
        model = ComplExModel(dim, kg.n_ent, kg.n_rel)
    criterion = {"margin": lambda: MarginLoss(0.5), "logistic": LogisticLoss,
                 "bce": BinaryCrossEntropyLoss}[args.loss]()
    if args.sparse:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding):
                m.sparse = True
        optim = torch.optim.SparseAdam(list(model.parameters()), lr=1e-3)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)

    if args.trainer:
        trainer = Trainer(model, criterion, kg, 1, args.batch, optim, sampling_type=args.sampler)
        batches = iter(TrainDataLoader(kg, args.batch, args.sampler))
        for _ in range(args.steps):
            trainer.process_batch(next(batches))
            if not args.no_renorm:
                model.normalize_parameters()
        return

    sampler = (BernoulliNegativeSampler if args.sampler == "bern" else
               UniformNegativeSampler)(kg, n_neg=args.n_neg)
    batches = iter(DataLoader(kg, batch_size=args.batch))
    for _ in range(args.steps):
        optim.zero_grad()
        for _ in range(args.accum):
            h, t, r = next(batches)
            n_h, n_t = sampler.corrupt_batch(h, t, r)
            pos, neg = model(h, t, r, n_h, n_t)
            loss = criterion(pos, neg) / args.accum
            loss.backward()
        optim.step()
        if not args.no_renorm:
            model.normalize_parameters()
        if args.evaluate:
            LinkPredictionEvaluator(model, kg_test).evaluate(b_size=16, verbose=False)
        if args.validate:
            model.eval()
            with torch.no_grad():
                h, t, r = next(batches)
                n_h, n_t = sampler.corrupt_batch(h, t, r)
                criterion(*model(h, t, r, n_h, n_t)).item()
            model.train()


def lie(args) -> None:
    from lie_transformer_pytorch import LieTransformer

    model = LieTransformer(dim=args.dim, depth=2, heads=2, dim_head=8, liftsamples=2,
                           nbhd=4, reversible=args.reversible,
                           num_tokens=10 if args.tokens else None)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    b, n = args.batch, 8
    mask = torch.ones(b, n).bool()
    if args.mask:
        mask[:, -2:] = False

    def batch():
        coors = torch.randn(b, n, 3)
        feats = (torch.randint(0, 10, (b, n)) if args.tokens else torch.randn(b, n, args.dim))
        return feats, coors

    def loss_of() -> torch.Tensor:
        feats, coors = batch()
        out = model(feats, coors, mask=mask)
        return F.mse_loss(out, torch.randn_like(out))

    for _ in range(args.steps):
        optim.zero_grad()
        for _ in range(args.accum):
            (loss_of() / args.accum).backward()
        optim.step()
        if args.validate:
            model.eval()
            with torch.no_grad():
                loss_of().item()
            model.train()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lib", default="kge", choices=["kge", "lie"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    # kge
    p.add_argument("--model", default="transe", choices=["transe", "transh", "distmult", "complex"])
    p.add_argument("--l1", action="store_true")
    p.add_argument("--loss", default="margin", choices=["margin", "logistic", "bce"])
    p.add_argument("--sampler", default="bern", choices=["bern", "unif"])
    p.add_argument("--n-neg", type=int, default=1)
    p.add_argument("--trainer", action="store_true")
    p.add_argument("--sparse", action="store_true")
    p.add_argument("--no-renorm", action="store_true")
    p.add_argument("--evaluate", action="store_true")
    # lie
    p.add_argument("--reversible", action="store_true")
    p.add_argument("--tokens", action="store_true")
    p.add_argument("--mask", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.lib == "kge":
        args.batch = args.batch or 16
        kge(args)
    else:
        args.batch = args.batch or 2
        lie(args)


if __name__ == "__main__":
    main()
