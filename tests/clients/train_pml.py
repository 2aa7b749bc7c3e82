"""pytorch-metric-learning: embedding training as its README and examples write it. A
`trunk` (an MLP of `blocks.*`) and an `embedder` (one Linear to the embedding), each with its
own optimizer, as the library's examples keep them; labelled random points (`--classes`
clusters), a DataLoader, a plain loop. Modes:

- `triplet`: `TripletMarginLoss` over `CosineSimilarity` with a `ThresholdReducer`, the pairs
  chosen each step by a miner (`--miner ms`: `MultiSimilarityMiner`, `tm`:
  `TripletMarginMiner`): index tensors whose length depends on the data.
- `arcface`: a classification loss with its own parameters (`--loss arcface | cosface |
  proxyanchor`: a class-by-embedding weight, or proxies) and its own optimizer, stepped
  beside the model's (`loss_optimizer.step()`), as the library's docs say.
- `xbm`: `CrossBatchMemory(ContrastiveLoss(), ...)`: a queue of `--memory` detached
  embeddings and their labels, kept across steps (a buffer of the loss module, filled
  step by step), the pairs mined against it.
- `ntxent`: two augmented views of each batch; `NTXentLoss` with labels that pair them
  (`--self-supervised`: `SelfSupervisedLoss(NTXentLoss())` makes the labels).

`--loop trainer` (modes triplet, arcface, xbm): the library's own `trainers.MetricLossOnly`
instead of the plain loop: `models={"trunk", "embedder"}`, one optimizer per model and
per loss with weights (`metric_loss_optimizer`), `mining_funcs={"tuple_miner"}`, an
`MPerClassSampler` (`--m` per class), `iterations_per_epoch=--steps`. The sampler shuffles with numpy's global generator, which
the script seeds only with `--seed-numpy` (the library's examples seed torch alone).

`--autocast`: the forward and the loss under bf16 autocast (CPU), as torch's AMP recipe puts
them; the losses cast their own weights and CrossBatchMemory its queue to the
embeddings' dtype (by assigning the cast tensor to the parameter's `.data` or the buffer's
name).

Tiny, seeded, in memory, nothing downloaded.

    python tests/clients/train_pml.py --mode xbm --steps 4
    memledger trace tests/clients/train_pml.py --steps 3 -o pml.ledger -- --mode xbm
    memledger predict pml.ledger --policy 'checkpoint:trunk.blocks.*'

`--steps`: optimizer steps (the script stops after that many).
"""

import argparse

import torch
from torch import nn


class Trunk(nn.Module):
    def __init__(self, dim: int, width: int, depth: int) -> None:
        super().__init__()
        self.stem = nn.Linear(dim, width)
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())
            for _ in range(depth)])

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = x + b(x)
        return x


def data(n: int, dim: int, classes: int):
    g = torch.Generator().manual_seed(1)
    centers = torch.randn(classes, dim, generator=g) * 2
    y = torch.randint(0, classes, (n,), generator=g)
    return centers[y] + torch.randn(n, dim, generator=g), y


def augment(x):
    """A view: noise and a random feature mask (as an image pipeline's crop and jitter)."""
    return (x + 0.1 * torch.randn_like(x)) * (torch.rand_like(x) > 0.1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="triplet", choices=["triplet", "arcface", "xbm", "ntxent"])
    p.add_argument("--miner", default="ms", choices=["ms", "tm"])
    p.add_argument("--loss", default="arcface", choices=["arcface", "cosface", "proxyanchor"])
    p.add_argument("--self-supervised", action="store_true")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dim", type=int, default=24)
    p.add_argument("--width", type=int, default=48)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--emb", type=int, default=16)
    p.add_argument("--classes", type=int, default=6)
    p.add_argument("--memory", type=int, default=80)
    p.add_argument("--loop", default="plain", choices=["plain", "trainer"])
    p.add_argument("--m", type=int, default=4)
    p.add_argument("--autocast", action="store_true")   # bf16 autocast (CPU) around forward
    p.add_argument("--seed-numpy", action="store_true")   # the sampler draws from numpy's
    p.add_argument("--bug", default="", choices=["", "no-loss-opt", "no-loss-zero",
                                                  "no-loss-step", "loss-in-both", "keep"])
    args = p.parse_args()
    from pytorch_metric_learning import distances, losses, miners, reducers

    torch.manual_seed(0)
    if args.seed_numpy:   # MPerClassSampler shuffles with numpy's global generator
        import numpy as np
        np.random.seed(0)
    trunk = Trunk(args.dim, args.width, args.depth)
    embedder = nn.Linear(args.width, args.emb)
    trunk_optimizer = torch.optim.Adam(trunk.parameters(), lr=1e-3)
    embedder_optimizer = torch.optim.Adam(embedder.parameters(), lr=1e-3)
    loss_optimizer = None
    miner = None
    if args.mode == "triplet":
        distance = distances.CosineSimilarity()
        loss_func = losses.TripletMarginLoss(margin=0.2, distance=distance,
                                             reducer=reducers.ThresholdReducer(low=0))
        miner = (miners.MultiSimilarityMiner(epsilon=0.1) if args.miner == "ms" else
                 miners.TripletMarginMiner(margin=0.2, distance=distance,
                                           type_of_triplets="semihard"))
    elif args.mode == "arcface":
        if args.loss == "arcface":
            loss_func = losses.ArcFaceLoss(args.classes, args.emb, margin=28.6, scale=64)
        elif args.loss == "cosface":
            loss_func = losses.CosFaceLoss(args.classes, args.emb, margin=0.35, scale=64)
        else:
            loss_func = losses.ProxyAnchorLoss(args.classes, args.emb, margin=0.1, alpha=32)
        loss_optimizer = torch.optim.SGD(loss_func.parameters(), lr=0.01)
        if args.bug == "no-loss-opt":     # planted: the loss's weights in no optimizer
            loss_optimizer = None
        elif args.bug == "loss-in-both":  # planted: and in the trunk's optimizer too
            trunk_optimizer.add_param_group({"params": loss_func.parameters()})
    elif args.mode == "xbm":
        miner = miners.MultiSimilarityMiner(epsilon=0.1)
        loss_func = losses.CrossBatchMemory(losses.ContrastiveLoss(), args.emb,
                                            memory_size=args.memory, miner=miner)
        miner = None   # the memory mines against the queue itself
    else:
        loss_func = losses.NTXentLoss(temperature=0.07)
        if args.self_supervised:
            loss_func = losses.SelfSupervisedLoss(loss_func)

    x, y = data(512, args.dim, args.classes)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=args.batch, shuffle=True,
                                         generator=torch.Generator().manual_seed(2))
    if args.loop == "trainer":
        train_with_trainer(args, trunk, embedder, trunk_optimizer, embedder_optimizer,
                           loss_func, loss_optimizer, miner, x, y)
        return
    optimizers = [trunk_optimizer, embedder_optimizer] + ([loss_optimizer]
                                                          if loss_optimizer else [])
    trunk.train()
    embedder.train()
    done = 0
    kept = []    # embeddings for an evaluation at the end (AccuracyCalculator)
    while done < args.steps:
        for data_, labels in loader:
            for o in optimizers:
                if not (o is loss_optimizer and args.bug == "no-loss-zero"):
                    o.zero_grad()
            # the forward and the loss under autocast, as torch's AMP recipe puts them
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                if args.mode == "ntxent":
                    a, b = embedder(trunk(augment(data_))), embedder(trunk(augment(data_)))
                    if args.self_supervised:
                        loss = loss_func(a, b)
                    else:
                        idx = torch.arange(a.shape[0])
                        loss = loss_func(torch.cat([a, b]), torch.cat([idx, idx]))
                else:
                    embeddings = embedder(trunk(data_))
                    if miner is not None:
                        indices_tuple = miner(embeddings, labels)
                        loss = loss_func(embeddings, labels, indices_tuple)
                    else:
                        loss = loss_func(embeddings, labels)
                    if args.bug == "keep":    # planted: kept for evaluation without .detach()
                        kept.append(embeddings)
            loss.backward()
            for o in optimizers:
                if not (o is loss_optimizer and args.bug == "no-loss-step"):
                    o.step()
            done += 1
            if done >= args.steps:
                break
    print("loss", round(loss.item(), 4))


def train_with_trainer(args, trunk, embedder, trunk_optimizer, embedder_optimizer,
                       loss_func, loss_optimizer, miner, x, y) -> None:
    """The library's MetricLossOnly trainer: its dicts of models, optimizers, losses and
    miners, its sampler, its loop (zero_grad, forward, mine, loss, backward, step)."""
    import logging

    from pytorch_metric_learning import samplers, trainers

    logging.getLogger("PML").setLevel(logging.WARNING)
    dataset = torch.utils.data.TensorDataset(x, y)
    optimizers = {"trunk_optimizer": trunk_optimizer, "embedder_optimizer": embedder_optimizer}
    if loss_optimizer is not None:
        optimizers["metric_loss_optimizer"] = loss_optimizer
    trainer = trainers.MetricLossOnly(
        models={"trunk": trunk, "embedder": embedder}, optimizers=optimizers,
        batch_size=args.batch, loss_funcs={"metric_loss": loss_func},
        mining_funcs={"tuple_miner": miner} if miner is not None else {},
        dataset=dataset, data_device=torch.device("cpu"),
        sampler=samplers.MPerClassSampler(y, m=args.m, length_before_new_iter=len(y)),
        iterations_per_epoch=args.steps, dataloader_num_workers=0)
    trainer.train(num_epochs=1)
    print("loss", round(float(trainer.losses["total_loss"]), 4))


if __name__ == "__main__":
    main()
