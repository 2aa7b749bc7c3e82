"""ema-pytorch and torchmetrics in a plain training loop, as their READMEs use them: an EMA
shadow of the model updated after each `optimizer.step()` (`ema.update()`), evaluated
under `torch.no_grad()` with the EMA copy, and torchmetrics metric objects accumulating
state over the loop (`update` each step, `compute()` and `reset()` at each epoch's end).

Modes:
  ema        `EMA(model, beta, update_after_step, update_every)` updated in the loop after
             `opt.step()`; a MetricCollection (Accuracy, F1) and a MeanSquaredError
             updated in the loop; every `--eval-every` steps the EMA copy evaluated under
             `no_grad` (`ema(x)`), with an Accuracy of its own
  hook       the same EMA updated by `ema.add_to_optimizer_post_step_hook(opt)`, with
             `use_foreach=True` and `include_online_model=False`
  karras     `PostHocEMA` (two `KarrasEMA`s, a checkpoint every `--ckpt-every` steps into a
             temporary folder), evaluated with one of its EMA models
  metrics    the metrics as submodules of the model (Lightning's habit): each block's
             `forward` updates a `MeanMetric` of its near-zero hidden units
             (`--no-monitor`: none), and the loop calls the model's MetricCollection
             on the logits (`model.train_metrics(...)`: Metric.forward, the batch value
             logged); compute/reset each epoch

Tiny, seeded, random data, nothing downloaded.

    python tests/clients/train_ema_metrics.py --mode ema --steps 4
    memledger trace tests/clients/train_ema_metrics.py --steps 2 -o ema.ledger -- --mode ema
    memledger predict ema.ledger --policy 'checkpoint:blocks.*' --policy 'offload:blocks.*'
    memledger doctor tests/clients/train_ema_metrics.py --steps 3 -- --mode metrics
"""

import argparse
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

import torchmetrics
from ema_pytorch import EMA, PostHocEMA


class Block(nn.Module):
    def __init__(self, dim: int, monitor: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        # the share of hidden units the GELU leaves near zero, a metric the block keeps
        # (`update` adds into its state in place at every training forward)
        self.dead = torchmetrics.MeanMetric() if monitor else None
        self.late = False   # update after the block's last save (--monitor-output)
        self.call = False   # call the metric (Metric.forward), not `update` (--monitor-call)

    def forward(self, x):
        h = F.gelu(self.fc1(self.norm(x)))
        if self.dead is not None and self.training and not self.late:
            share = (h.detach().abs() < 1e-2).float().mean()
            if self.call:   # Metric.forward: the batch's value, the state replaced
                self.dead(share)
            else:
                self.dead.update(share)
        out = x + self.fc2(h)
        if self.dead is not None and self.training and self.late:
            self.dead.update((out.detach().abs() < 1e-2).float().mean())
        return out


def collection(classes: int, regression: bool) -> torchmetrics.MetricCollection:
    """The training metrics: of the classifier (Accuracy and F1 count classes with
    `bincount`, whose size a `--fake` run cannot know), or with `--regression-only` of the
    value head alone."""
    if regression:
        return torchmetrics.MetricCollection({"mae": torchmetrics.MeanAbsoluteError()},
                                             prefix="train_")
    return torchmetrics.MetricCollection({
        "acc": torchmetrics.Accuracy(task="multiclass", num_classes=classes),
        "f1": torchmetrics.F1Score(task="multiclass", num_classes=classes, average="macro"),
    }, prefix="train_")


class Net(nn.Module):
    def __init__(self, dim: int, depth: int, classes: int, metrics: bool, monitor: bool,
                 regression: bool):
        super().__init__()
        self.embed = nn.Linear(16, dim)
        self.blocks = nn.ModuleList([Block(dim, monitor) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)
        self.value = nn.Linear(dim, 1)      # a regression head beside the classifier
        if metrics:
            self.train_metrics = collection(classes, regression)
            self.train_mse = torchmetrics.MeanSquaredError()

    def forward(self, x):
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h)
        return self.head(h), self.value(h).squeeze(-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ema", "hook", "karras", "metrics"], default="ema")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--epoch-steps", type=int, default=2, help="compute()/reset() every N steps")
    ap.add_argument("--eval-every", type=int, default=1)
    ap.add_argument("--eval-first", action="store_true",
                    help="evaluate the EMA copy once before training (a sanity check)")
    ap.add_argument("--ckpt-every", type=int, default=2)
    ap.add_argument("--no-monitor", action="store_true", help="metrics: no MeanMetric in blocks")
    ap.add_argument("--regression-only", action="store_true",
                    help="metrics of the value head alone (no bincount: `--fake` runs)")
    ap.add_argument("--monitor-call", action="store_true",
                    help="metrics: the blocks call their MeanMetric (Metric.forward)")
    ap.add_argument("--monitor-output", action="store_true",
                    help="metrics: the blocks' MeanMetric of their output, updated last")
    args = ap.parse_args()
    torch.manual_seed(0)

    in_model = args.mode == "metrics"
    model = Net(args.dim, args.depth, args.classes, metrics=in_model,
                monitor=in_model and not args.no_monitor, regression=args.regression_only)
    for blk in model.blocks:
        blk.late, blk.call = args.monitor_output, args.monitor_call
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    ema = None
    if args.mode == "ema":
        ema = EMA(model, beta=0.999, update_after_step=1, update_every=1)
    elif args.mode == "hook":
        ema = EMA(model, beta=0.999, update_after_step=0, update_every=2, use_foreach=True,
                  include_online_model=False)
        ema.add_to_optimizer_post_step_hook(opt)
    elif args.mode == "karras":
        ema = PostHocEMA(model, sigma_rels=(0.05, 0.28), update_every=1,
                         checkpoint_every_num_steps=args.ckpt_every,
                         checkpoint_folder=tempfile.mkdtemp(prefix="post-hoc-ema-"))

    if in_model:
        metrics, mse = model.train_metrics, model.train_mse
    else:
        metrics = collection(args.classes, args.regression_only)
        mse = torchmetrics.MeanSquaredError()
    ema_acc = torchmetrics.MeanSquaredError() if args.regression_only else \
        torchmetrics.Accuracy(task="multiclass", num_classes=args.classes)

    x_val = torch.randn(64, 16)
    y_val = torch.randint(0, args.classes, (64,))
    v_val = torch.randn(64) if args.regression_only else None
    def evaluate():
        if args.mode == "karras":   # one of PostHocEMA's EMA models
            ema.ema_models[0].eval()
            with torch.no_grad():
                val_logits, val_value = ema.ema_models[0](x_val)
        else:
            ema.eval()              # EMA.eval: the copy in eval mode, the model as it was
            with torch.no_grad():
                val_logits, val_value = ema(x_val)
        if args.regression_only:
            ema_acc.update(val_value, v_val)
        else:
            ema_acc.update(val_logits, y_val)

    if ema is not None and args.eval_first:
        evaluate()
    model.train()
    for it in range(args.steps):
        x = torch.randn(args.batch, 16)
        y = torch.randint(0, args.classes, (args.batch,))
        v = torch.randn(args.batch)
        logits, value = model(x)
        loss = F.cross_entropy(logits, y) + F.mse_loss(value, v)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.mode in ("ema", "karras"):
            ema.update()
        if in_model:
            # Metric.forward: the batch's value, the state kept
            batch = metrics(value.detach(), v) if args.regression_only else \
                metrics(logits.detach(), y)
            mse(value.detach(), v)
        else:
            if args.regression_only:
                metrics.update(value.detach(), v)
            else:
                metrics.update(logits.detach(), y)
            mse.update(value.detach(), v)
        if ema is not None and (it + 1) % args.eval_every == 0:
            evaluate()
        if (it + 1) % args.epoch_steps == 0:
            out = {**metrics.compute(), "train_mse": mse.compute()}
            if ema is not None:
                out["ema_acc"] = ema_acc.compute()
                ema_acc.reset()
            if in_model and not args.no_monitor:
                out["dead"] = torch.stack([b.dead.compute() for b in model.blocks]).mean()
                for b in model.blocks:
                    b.dead.reset()
            metrics.reset()
            mse.reset()
            print(f"epoch {(it + 1) // args.epoch_steps}: "
                  + " ".join(f"{k} {float(t):.4f}" for k, t in out.items()))
        print(f"step {it} loss {loss.item():.4f}"
              + (f" batch {float(next(iter(batch.values()))):.3f}" if in_model else ""))


if __name__ == "__main__":
    main()
