"""A small attention model trained with mmengine, as OpenMMLab's users write it: a
`BaseModel` subclass registered in `MODELS` and built from a config dict (`blocks.N` of
pre-LayerNorm self-attention + GELU MLP, a `head`), `forward(inputs, labels, mode)` that
returns a dict of losses in mode "loss", an `optim_wrapper` config (AdamW,
`accumulative_counts`, `clip_grad`), a `LinearLR` param scheduler, a DataLoader over a small
in-memory dataset. Seeded, tiny, nothing downloaded.

    python tests/clients/train_mmengine.py --mode loop --accum 2
    memledger trace tests/clients/train_mmengine.py --steps 1 -o mm.ledger -- --mode runner
    memledger compare tests/clients/train_mmengine.py --steps 1 -p 'checkpoint:blocks.*' \
        -- --mode loop --accum 2 --amp

Modes (`--mode`):

- `loop`: the optimizer wrapper driven by hand, as mmengine's "OptimWrapper" tutorial
  does: `build_optim_wrapper(model, cfg)`, then per batch `with
  optim_wrapper.optim_context(model)`, the model's loss dict, `model.parse_losses`, and
  `optim_wrapper.update_params(loss)` (the loss divided by `accumulative_counts`; `step()`
  and `zero_grad()` only every `--accum` batches). `--amp`: the forward under mmengine's
  `autocast(device_type=..., dtype=torch.bfloat16)` (mmengine's `AmpOptimWrapper` asserts a
  CUDA, NPU or MLU device: on CPU, users autocast with `mmengine.runner.amp.autocast`).
- `runner`: `mmengine.runner.Runner` with `train_cfg=dict(by_epoch=True, max_epochs=1)`, the
  same configs, its `work_dir` in a temporary folder, no checkpoint or logger hook and no
  visualizer backend (nothing written but the Runner's own log file there); `--val`: a
  `ValLoop` after each epoch with a small `BaseMetric` (accuracy); `--ema`: an
  `EMAHook` (an averaged copy of the model, updated after every iteration); `--amp` on a
  CUDA device: `AmpOptimWrapper` with `dtype='bfloat16'`.
"""

import argparse
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from mmengine.model import BaseModel
from mmengine.optim import build_optim_wrapper
from mmengine.registry import MODELS, PARAM_SCHEDULERS


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads) \
            .permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


@MODELS.register_module(force=True)
class TinyAttnNet(BaseModel):
    def __init__(self, in_dim: int, width: int, depth: int, heads: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(in_dim, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, inputs, labels=None, mode="tensor"):
        h = self.embed(inputs)
        for block in self.blocks:
            h = block(h)
        logits = self.head(h.mean(1))
        if mode == "loss":
            return dict(loss_cls=F.cross_entropy(logits, labels))
        if mode == "predict":
            return logits.argmax(-1)
        return logits


class Sequences(Dataset):
    """`n` random sequences with their class, made once in memory."""

    def __init__(self, n: int, seq: int, in_dim: int, classes: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, seq, in_dim, generator=gen)
        self.y = torch.randint(0, classes, (n,), generator=gen)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return dict(inputs=self.x[i], labels=self.y[i])


def configs(args):
    model = dict(type="TinyAttnNet", in_dim=8, width=args.width, depth=args.depth, heads=2,
                 classes=4)
    optim = dict(type="OptimWrapper",
                 optimizer=dict(type="AdamW", lr=1e-3, weight_decay=0.05),
                 accumulative_counts=args.accum)
    if args.paramwise:   # a param group per parameter: no decay on norms and biases
        optim["paramwise_cfg"] = dict(norm_decay_mult=0.0, bias_decay_mult=0.0,
                                      custom_keys={"head": dict(lr_mult=0.1)})
    if args.clip:
        optim["clip_grad"] = dict(max_norm=1.0)
    sched = [dict(type="LinearLR", start_factor=0.5, by_epoch=False, begin=0, end=4)]
    return model, optim, sched


def loop(args, loader: DataLoader) -> None:
    model_cfg, optim_cfg, sched_cfg = configs(args)
    model = MODELS.build(model_cfg)
    optim_wrapper = build_optim_wrapper(model, optim_cfg)
    scheduler = PARAM_SCHEDULERS.build(dict(sched_cfg[0], optimizer=optim_wrapper))
    if args.amp:
        from mmengine.runner.amp import autocast
        amp = lambda: autocast(device_type="cpu", dtype=torch.bfloat16)  # noqa: E731
    else:
        import contextlib
        amp = contextlib.nullcontext
    model.train()
    for epoch in range(args.epochs):
        for i, data in enumerate(loader):
            with optim_wrapper.optim_context(model), amp():
                losses = model(**data, mode="loss")
            loss, log_vars = model.parse_losses(losses)
            optim_wrapper.update_params(loss)
            scheduler.step()
            if not args.quiet:   # formats tensors: a --fake run has no values
                print(f"epoch {epoch} iter {i}  loss {log_vars['loss']:.4f}  "
                      f"lr {optim_wrapper.get_lr()['lr'][0]:.2e}")


def runner(args, loader: DataLoader) -> None:
    from mmengine.evaluator import BaseMetric
    from mmengine.registry import METRICS
    from mmengine.runner import Runner

    @METRICS.register_module(force=True)
    class Accuracy(BaseMetric):
        def process(self, data_batch, data_samples) -> None:
            preds = torch.stack(list(data_samples))   # the Evaluator hands a list
            self.results.append(((preds == data_batch["labels"]).sum().item(), len(preds)))

        def compute_metrics(self, results) -> dict:
            return dict(accuracy=sum(r[0] for r in results) / sum(r[1] for r in results))

    val = dict(val_dataloader=loader, val_cfg=dict(), val_evaluator=dict(type="Accuracy")) \
        if args.val else {}

    model_cfg, optim_cfg, sched_cfg = configs(args)
    if args.amp:
        optim_cfg = dict(optim_cfg, type="AmpOptimWrapper", dtype="bfloat16")
    with tempfile.TemporaryDirectory(prefix="mmengine-work-") as work_dir:
        r = Runner(
            model=model_cfg, work_dir=work_dir, train_dataloader=loader,
            optim_wrapper=optim_cfg, param_scheduler=sched_cfg,
            train_cfg=dict(by_epoch=True, max_epochs=args.epochs, val_interval=1), **val,
            default_hooks=dict(checkpoint=None, logger=None),
            visualizer=dict(type="Visualizer", vis_backends=[]),
            env_cfg=dict(cudnn_benchmark=False, dist_cfg=dict(backend="gloo")),
            randomness=dict(seed=0), log_level="WARNING",
            custom_hooks=[dict(type="EMAHook", momentum=0.01)] if args.ema else None)
        r.train()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="loop", choices=["loop", "runner"])
    p.add_argument("--accum", type=int, default=2, help="accumulative_counts")
    p.add_argument("--clip", action="store_true", help="clip_grad=dict(max_norm=1.0)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast (see the docstring)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--paramwise", action="store_true", help="paramwise_cfg: no decay on "
                   "norms and biases, the head at 0.1 x lr")
    p.add_argument("--val", action="store_true", help="runner: validate after each epoch")
    p.add_argument("--ema", action="store_true", help="runner: custom_hooks EMAHook")
    p.add_argument("--quiet", action="store_true", help="no loss lines (for --fake)")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=24)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    data = Sequences(args.samples, args.seq, 8, 4)
    loader = DataLoader(data, batch_size=args.batch, shuffle=False)
    (runner if args.mode == "runner" else loop)(args, loader)


if __name__ == "__main__":
    main()
