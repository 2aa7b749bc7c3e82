"""A tiny transformer trained by PyTorch Lightning's own `Trainer`, as Lightning users write it.

    python tests/clients/train_lightning.py --loop auto --steps 4
    memledger trace tests/clients/train_lightning.py --steps 2 -o pl.ledger -- --loop accum

Lightning steps the optimizer as `optimizer.step(closure)`: the forward and backward run
inside `step()` (automatic optimization). Loops:

- `auto`: plain automatic optimization, AdamW.
- `accum`: `accumulate_grad_batches=2` (the first micro-batch's backward outside `step()`,
  the second inside its closure).
- `clip`: `gradient_clip_val=1.0` (Lightning clips inside the closure, after backward).
- `bf16`: `precision="bf16-mixed"` (CPU autocast around the training step).
- `manual`: `self.automatic_optimization = False`, `manual_backward`, `opt.step()`.
- `sched`: AdamW with a StepLR scheduler that Lightning steps every optimizer step.
- `fabric`: the same model in a loop of the script's own under Lightning Fabric
  (`fabric.setup`, `fabric.backward`, `fabric.clip_gradients`): the model is called
  through Fabric's wrapper, which holds it as `_forward_module`.
- `gan`: a GAN in manual optimization (Lightning's own GAN recipe): a generator of
  residual MLP blocks (`gen.blocks.*`) and a discriminator, two optimizers stepped in one
  `training_step`, each between `toggle_optimizer` / `untoggle_optimizer` (which sets
  `requires_grad=False` on the other's parameters).

The model is `blocks.*` of pre-LN transformer blocks (self-attention, GELU MLP) with an
embedding and a head; the data are random tokens, nothing is downloaded or written
(`logger=False`, no checkpointing). `--steps` is the Trainer's `max_steps`.

`--save FILE` writes a checkpoint when `fit` ends (`trainer.save_checkpoint`); `--resume
FILE` fits on from it (`ckpt_path`: the weights, AdamW's state and the loops' counters by
`torch.load`), to `--steps` in all.

`--log` logs the loss every step (`self.log(..., prog_bar=True)`), `--val` validates on 2
batches every 2 steps, `--dropout` puts dropout in the blocks, `--devices 2 [--strategy
ddp_spawn]` starts Lightning's own ranks (memledger refuses that without `--nproc 2`).

`--bug` plants a mistake for `memledger doctor` to find: `retain` keeps every step's loss
in a list on the module (`self.losses.append(loss)`, the usual Lightning leak), `detach`
cuts the graph after the first block, `no-zero` (manual loop) never zeroes the gradients.
"""

import argparse
import os
import warnings


import torch
import torch.nn.functional as F
from torch import nn

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class Block(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyLM(pl.LightningModule):
    def __init__(self, loop: str, vocab: int, width: int, depth: int, heads: int,
                 bug: str = "", dropout: float = 0.0) -> None:
        super().__init__()
        self.loop, self.bug = loop, bug
        self.log_loss = False
        self.losses = []
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(depth))
        self.head = nn.Linear(width, vocab)
        if loop == "manual":
            self.automatic_optimization = False

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i == 0 and self.bug == "detach":
                x = x.detach()
        return self.head(x)

    def _loss(self, batch) -> torch.Tensor:
        ids, labels = batch
        logits = self(ids)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    def training_step(self, batch, batch_idx):
        if self.loop != "manual":
            loss = self._loss(batch)
            if self.bug == "retain":
                self.losses.append(loss)
            if self.log_loss:
                self.log("train_loss", loss, prog_bar=True)
            return loss
        opt = self.optimizers()
        if self.bug != "no-zero":
            opt.zero_grad()
        loss = self._loss(batch)
        self.manual_backward(loss)
        opt.step()
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        if self.loop != "sched":
            return opt
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class MLPBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.relu(self.fc1(x)))


class Generator(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(width) for _ in range(depth))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            z = block(z)
        return z


class GAN(pl.LightningModule):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.width = width
        self.gen = Generator(width, depth)
        self.disc = nn.Sequential(nn.Linear(width, 2 * width), nn.LeakyReLU(0.2),
                                  nn.Linear(2 * width, 1))

    def training_step(self, batch, batch_idx):
        real, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], self.width)
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
        self.toggle_optimizer(opt_g)
        fake = self.gen(z)
        g_loss = F.binary_cross_entropy_with_logits(self.disc(fake), ones)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        self.toggle_optimizer(opt_d)
        d_loss = (F.binary_cross_entropy_with_logits(self.disc(real), ones)
                  + F.binary_cross_entropy_with_logits(self.disc(fake.detach()), zeros)) / 2
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

    def configure_optimizers(self):
        return [torch.optim.Adam(self.gen.parameters(), lr=2e-4),
                torch.optim.Adam(self.disc.parameters(), lr=2e-4)]


class RandomVectors(torch.utils.data.Dataset):
    def __init__(self, n: int, width: int) -> None:
        self.n, self.width = n, width

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.width, generator=g), 0


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return ids[:-1], ids[1:]


def fabric_loop(model: nn.Module, data, steps: int) -> None:
    from lightning_fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = fabric.setup(model, opt)
    for step, (ids, labels) in enumerate(fabric.setup_dataloaders(data)):
        if step == steps:
            break
        loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
        opt.zero_grad()
        fabric.backward(loss)
        fabric.clip_gradients(model, opt, max_norm=1.0)
        opt.step()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loop", choices=["auto", "accum", "clip", "bf16", "manual", "sched", "gan",
                            "fabric"],
                   default="auto")
    p.add_argument("--steps", type=int, default=4, help="the Trainer's max_steps")
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--bug", choices=["", "retain", "detach", "no-zero"], default="")
    p.add_argument("--val", action="store_true",
                   help="validate on 2 batches every 2 training steps (inference_mode, eval)")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--precision", default="", help="the Trainer's, e.g. bf16-true")
    p.add_argument("--log", action="store_true", help="self.log the loss every step")
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto", help="with --devices 2: ddp, ddp_spawn")
    p.add_argument("--save", default="", help="write a checkpoint here when fit ends")
    p.add_argument("--resume", default="", help="fit on from this checkpoint")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    pl.seed_everything(0, verbose=False)
    model = TinyLM(args.loop, args.vocab, args.width, args.depth, args.heads, args.bug,
                   args.dropout)
    model.log_loss = args.log
    data = torch.utils.data.DataLoader(RandomTokens(256, args.seq, args.vocab),
                                       batch_size=args.batch_size, shuffle=False,
                                       num_workers=0)
    if args.loop == "gan":
        model = GAN(args.width, args.depth)
        data = torch.utils.data.DataLoader(RandomVectors(256, args.width),
                                           batch_size=args.batch_size * args.seq)
    if args.loop == "fabric":
        fabric_loop(model, data, args.steps)
        return
    trainer = pl.Trainer(
        max_steps=args.steps, accelerator="cpu", devices=args.devices, logger=False,
        strategy=args.strategy,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accumulate_grad_batches=2 if args.loop == "accum" else 1,
        gradient_clip_val=1.0 if args.loop == "clip" else None,
        precision=args.precision or ("bf16-mixed" if args.loop == "bf16" else "32-true"),
        num_sanity_val_steps=0, val_check_interval=2 if args.val else None,
        limit_val_batches=2 if args.val else 0)
    val = torch.utils.data.DataLoader(RandomTokens(8, args.seq, args.vocab),
                                      batch_size=args.batch_size) if args.val else None
    trainer.fit(model, data, val, ckpt_path=args.resume or None)
    if args.save:
        trainer.save_checkpoint(args.save)


if __name__ == "__main__":
    main()
