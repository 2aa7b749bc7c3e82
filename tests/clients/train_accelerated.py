"""pytorch-accelerated as its README trains a model: a `Trainer(model, loss_func=...,
optimizer=...)` and `trainer.train(train_dataset=..., eval_dataset=..., num_epochs=...,
per_device_batch_size=...)`, the library's own loop over a TensorDataset on CPU, with its
callbacks, schedulers, accumulation and clipping. Seeded, tiny, nothing downloaded.

    python tests/clients/train_accelerated.py --steps 3
    memledger trace tests/clients/train_accelerated.py --steps 2 -o a.ledger -- --accum 2
    memledger doctor tests/clients/train_accelerated.py -- --accum 2 --clip 1

The model: a token embedding, `--depth` residual blocks (LayerNorm, Linear, GELU, Dropout,
Linear) mean-pooled over the sequence, a classifier head. The dataset holds exactly
`--steps` optimizer steps of `--accum` micro-batches of `--batch` (one epoch, `--epochs`
of them), and `--tail` micro-batches more: the Trainer steps the optimizer on the epoch's
last micro-batch, so they make one step of fewer micro-batches.

Options, each one of the Trainer's: `--accum K` (`gradient_accumulation_steps`), `--clip V`
(`gradient_clip_value`: accelerate's `clip_grad_value_`, which the loop calls after every
micro-batch), `--sched` (`onecycle`: torch's OneCycleLR through `create_scheduler_fn` with
the Trainer's placeholders; `cosine`: the library's own `CosineLrScheduler`; `timm`-style
`TrainerWithTimmScheduler` is not used), `--valid` (an eval dataset, one no_grad epoch
after each training epoch), `--callbacks` (the default callbacks plus
`SaveBestModelCallback`, `EarlyStoppingCallback`, `ModelEmaCallback` (an EMA copy of the
model, evaluated each epoch) and `StepBasedEvaluationCallback`), `--max-steps N`
(`max_num_train_steps`), `--precision bf16` (the Trainer's Accelerator made with
`mixed_precision="bf16"`: CPU autocast), `--evaluate` (a `trainer.evaluate` run after
training).
"""

import argparse
import os
import tempfile
from functools import partial

import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import TensorDataset

from pytorch_accelerated import Trainer, TrainerPlaceholderValues


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


class PrecisionTrainer(Trainer):
    """The Trainer's documented way to set the Accelerator: override `_create_accelerator`."""

    precision = "no"

    def _create_accelerator(self):
        return Accelerator(cpu=True, mixed_precision=self.precision)


def callbacks_of(args, folder: str) -> tuple:
    from pytorch_accelerated import callbacks as cb
    quiet = (cb.MoveModulesToDeviceCallback, cb.TerminateOnNaNCallback)
    if not args.callbacks:
        return quiet
    return quiet + (
        cb.SaveBestModelCallback(save_path=os.path.join(folder, "best.pt"),
                                 watch_metric="train_loss_epoch"),
        cb.EarlyStoppingCallback(early_stopping_patience=2,
                                 watch_metric="train_loss_epoch"),
        cb.ModelEmaCallback(decay=0.9, save_path=os.path.join(folder, "ema.pt"),
                            evaluate_during_training=args.valid),
        cb.StepBasedEvaluationCallback(eval_every_n_steps=2) if args.valid else
        cb.TerminateOnNaNCallback(),
    )


def scheduler_of(args):
    if args.sched == "onecycle":
        return partial(torch.optim.lr_scheduler.OneCycleLR, max_lr=1e-2,
                       epochs=TrainerPlaceholderValues.NUM_EPOCHS,
                       steps_per_epoch=TrainerPlaceholderValues.NUM_UPDATE_STEPS_PER_EPOCH)
    if args.sched == "cosine":
        from pytorch_accelerated.schedulers import CosineLrScheduler
        return CosineLrScheduler.create_scheduler_fn(
            num_warmup_epochs=1, warmup_starting_lr=1e-4)   # its placeholders, by default
    return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--drop", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--tail", type=int, default=0)   # micro-batches past the last whole step
    p.add_argument("--clip", type=float, default=None)
    p.add_argument("--sched", default="", choices=["", "onecycle", "cosine"])
    p.add_argument("--valid", action="store_true")
    p.add_argument("--callbacks", action="store_true")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--precision", default="no", choices=["no", "bf16"])
    p.add_argument("--evaluate", action="store_true")
    p.add_argument("--opt", default="adamw", choices=["adamw", "sgd"])
    p.add_argument("--workers", type=int, default=0)   # -1: the Trainer's default (all CPUs)
    args = p.parse_args()
    torch.manual_seed(0)

    vocab, classes = 32, 5
    model = Net(vocab, args.dim, args.depth, classes, args.drop)
    if args.opt == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    n = args.batch * (args.steps * args.accum + args.tail)
    g = torch.Generator().manual_seed(1)
    train = TensorDataset(torch.randint(0, vocab, (n, args.seq), generator=g),
                          torch.randint(0, classes, (n,), generator=g))
    valid = TensorDataset(torch.randint(0, vocab, (args.batch, args.seq), generator=g),
                          torch.randint(0, classes, (args.batch,), generator=g))

    workers = {} if args.workers < 0 else {"num_workers": args.workers}
    with tempfile.TemporaryDirectory(prefix="accelerated-") as folder:
        PrecisionTrainer.precision = args.precision
        trainer = PrecisionTrainer(model, loss_func=nn.CrossEntropyLoss(),
                                   optimizer=optimizer, callbacks=callbacks_of(args, folder))
        trainer.train(train_dataset=train, eval_dataset=valid if args.valid else None,
                      num_epochs=args.epochs, per_device_batch_size=args.batch,
                      gradient_accumulation_steps=args.accum,
                      gradient_clip_value=args.clip, create_scheduler_fn=scheduler_of(args),
                      max_num_train_steps=args.max_steps,
                      train_dataloader_kwargs=dict(shuffle=False, **workers),
                      eval_dataloader_kwargs=workers)
        if args.evaluate:
            trainer.evaluate(dataset=valid, per_device_batch_size=args.batch,
                             dataloader_kwargs=workers)


if __name__ == "__main__":
    main()
