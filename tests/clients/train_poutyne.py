"""Poutyne (a Keras-like training framework for PyTorch) as its README trains a network:
`Model(network, optimizer, loss_function, batch_metrics=..., epoch_metrics=...)` then
`model.fit(...)`, with its callbacks. Seeded, tiny, nothing downloaded.

    python tests/clients/train_poutyne.py --steps 3
    memledger trace tests/clients/train_poutyne.py --steps 2 -o p.ledger -- --loop fit
    memledger compare tests/clients/train_poutyne.py -p 'checkpoint:blocks.*' -- --loop fit

The network: a token embedding, `--depth` residual blocks (LayerNorm, Linear, GELU,
Dropout, Linear) mean-pooled over the sequence, a classifier head. Poutyne's loss and
metrics are `nn.Module`s of their own (its `DecomposableMetric` wraps
`F.cross_entropy`), called outside the network.

Loops (`--loop`):

- `fit`: `model.fit(x, y, batch_size=...)` on tensors, validation data each epoch
  (`--valid`), the epoch running `--steps` batches (`epochs=1`).
- `generator`: `model.fit_generator(DataLoader, steps_per_epoch=...)`.
- `batch`: a hand loop of `model.train_on_batch(x, y)`, `model.evaluate_on_batch` each
  step with `--valid`.
- `hand`: a plain torch loop over `model.network` and `model.optimizer` (the optimizer
  poutyne built from its string), the loss its `loss_function` module.

Callbacks (each a flag): `--clip N` (`ClipNorm`), `--clip-value V` (`ClipValue`),
`--sched step|cosine|plateau|policy` (poutyne's `StepLR`, `CosineAnnealingLR`,
`ReduceLROnPlateau`, `OptimizerPolicy` one-cycle), `--checkpoint` (`ModelCheckpoint`,
`OptimizerCheckpoint` into a temporary folder), `--best` (`BestModelRestore`, a copy of
the weights), `--tracker` (`GradientTracker` into a tiny writer), `--accum K`
(`batches_per_step=K`). `--opt` picks poutyne's optimizer by its name. `--metrics`:
accuracy per batch, F1 per epoch; `--kept graph|detached`: an epoch metric of the
script's that keeps each batch's predictions (undetached or detached).
"""

import argparse
import tempfile

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import poutyne
from poutyne import Model


class Block(nn.Module):
    def __init__(self, dim: int, drop: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(drop),
                                nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, classes: int, drop: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*[Block(dim, drop) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.embed(tokens))     # (B, T, dim)
        return self.head(h.mean(1))             # (B, classes)


class _Writer:
    """A SummaryWriter's one method GradientTracker calls (no tensorboard needed)."""

    def __init__(self) -> None:
        self.scalars = []

    def add_scalars(self, tag, values, step) -> None:
        self.scalars.append((tag, dict(values), step))


class KeptPredictions(poutyne.Metric):
    """An epoch metric that keeps each batch's predictions for the epoch's end, as a
    first try at a ranking metric would: `pred_y` as poutyne hands it, not detached."""

    def __init__(self, detach: bool) -> None:
        super().__init__()
        self.detach = detach
        self.preds, self.targets = [], []

    def update(self, y_pred, y_true) -> None:
        self.preds.append(y_pred.detach() if self.detach else y_pred)
        self.targets.append(y_true)

    def forward(self, y_pred, y_true):
        self.update(y_pred, y_true)

    def compute(self):
        p, t = torch.cat(self.preds), torch.cat(self.targets)
        return (p.argmax(-1) == t).float().mean()

    def reset(self) -> None:
        self.preds, self.targets = [], []


def callbacks_of(args, model, folder: str) -> list:
    cbs = []
    params = list(model.network.parameters())
    if args.clip:
        cbs.append(poutyne.ClipNorm(params, args.clip))
    if args.clip_value:
        cbs.append(poutyne.ClipValue(params, args.clip_value))
    if args.sched == "step":
        cbs.append(poutyne.StepLR(step_size=1, gamma=0.5))
    elif args.sched == "cosine":
        cbs.append(poutyne.CosineAnnealingLR(T_max=4))
    elif args.sched == "plateau":
        cbs.append(poutyne.ReduceLROnPlateau(monitor="loss", patience=0))
    elif args.sched == "policy":
        cbs.append(poutyne.OptimizerPolicy(poutyne.one_cycle_phases(
            steps=max(4, args.steps * args.epochs), lr=(1e-3, 1e-2))))
    if args.checkpoint:
        cbs.append(poutyne.ModelCheckpoint(f"{folder}/model.ckpt"))
        cbs.append(poutyne.OptimizerCheckpoint(f"{folder}/optim.ckpt"))
    if args.best:
        cbs.append(poutyne.BestModelRestore(monitor="loss", verbose=False))
    if args.tracker:
        cbs.append(poutyne.GradientTracker(_Writer()))
    return cbs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--loop", default="fit", choices=["fit", "generator", "batch", "hand"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--drop", type=float, default=0.0)
    p.add_argument("--opt", default="adam")
    p.add_argument("--valid", action="store_true")
    p.add_argument("--metrics", action="store_true")   # accuracy per batch, F1 per epoch
    p.add_argument("--kept", default="", choices=["", "graph", "detached"])
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--clip-value", type=float, default=0.0)
    p.add_argument("--sched", default="", choices=["", "step", "cosine", "plateau", "policy"])
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--best", action="store_true")
    p.add_argument("--tracker", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(0)

    vocab, classes = 32, 5
    net = Net(vocab, args.dim, args.depth, classes, args.drop)
    metrics = dict(batch_metrics=["accuracy"], epoch_metrics=["f1"]) if args.metrics else {}
    if args.kept:   # `graph`: the predictions kept as handed, `detached`: detached
        metrics = dict(epoch_metrics=[KeptPredictions(args.kept == "detached")])
    model = Model(net, args.opt, "cross_entropy", **metrics)

    n = args.batch * args.steps * args.accum
    x = torch.randint(0, vocab, (n, args.seq))
    y = torch.randint(0, classes, (n,))
    xv = torch.randint(0, vocab, (args.batch, args.seq))
    yv = torch.randint(0, classes, (args.batch,))
    valid = (xv, yv) if args.valid else None

    with tempfile.TemporaryDirectory(prefix="poutyne-") as folder:
        cbs = callbacks_of(args, model, folder)
        if args.loop == "fit":
            model.fit(x, y, validation_data=valid, batch_size=args.batch, epochs=args.epochs,
                      callbacks=cbs, batches_per_step=args.accum, verbose=False)
        elif args.loop == "generator":
            loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True)
            vloader = DataLoader(TensorDataset(xv, yv), batch_size=args.batch) if valid else None
            model.fit_generator(loader, vloader, epochs=args.epochs, callbacks=cbs,
                                batches_per_step=args.accum, verbose=False)
        elif args.loop == "batch":
            for s in range(args.steps * args.epochs):
                i = (s % args.steps) * args.batch
                model.train_on_batch(x[i:i + args.batch], y[i:i + args.batch])
                if valid:
                    model.evaluate_on_batch(xv, yv)
        else:
            net, opt, loss_fn = model.network, model.optimizer, model.loss_function
            net.train()
            for s in range(args.steps * args.epochs):
                i = (s % args.steps) * args.batch
                opt.zero_grad()
                loss = loss_fn(net(x[i:i + args.batch]), y[i:i + args.batch])
                loss.backward()
                if args.clip:
                    torch.nn.utils.clip_grad_norm_(net.parameters(), args.clip)
                opt.step()
                if valid:
                    net.eval()
                    with torch.no_grad():
                        loss_fn(net(xv), yv)
                    net.train()


if __name__ == "__main__":
    main()
