"""Neural Circuit Policies (ncps) trained as its README and examples do: `ncps.torch.CfC`
and `ncps.torch.LTC`, fully connected (`units=` an int, or `ncps.wirings.FullyConnected`)
or wired sparsely (`ncps.wirings.AutoNCP`), as batch-first sequence regressors fitted
with MSE by Adam. Seeded random sequences (a sine-like target), nothing downloaded.

    python tests/clients/train_ncps.py --steps 3 --model cfc
    memledger trace tests/clients/train_ncps.py --steps 2 -o ncp.ledger -- --model ltc-ncp
    memledger predict ncp.ledger --policy 'checkpoint:rnn_cell'

Models (`--model`):

- `cfc`: `CfC(in, units, proj_size=out)`: the CfC cell's backbone MLP (`rnn_cell.backbone`)
  and its `ff1`, `ff2`, `time_a`, `time_b` heads, a linear readout `fc`.
- `cfc-mixed`: the same with `mixed_memory=True` (an LSTM cell, `lstm`, before the CfC cell
  each time step, its hidden and cell state handed back as `hx`).
- `cfc-ncp`: `CfC(in, AutoNCP(units, out))`: a `WiredCfCCell` of one CfC cell per NCP layer
  (`rnn_cell.layer_0..2`), each masking its weights by the wiring's sparsity.
- `ltc-ncp`: `LTC(in, AutoNCP(units, out))`: the LTC cell's ODE unfolded `ode_unfolds` times
  per time step.
- `ltc-fc`: `LTC(in, FullyConnected(units, out))`.

Both `CfC` and `LTC` call their cell as `self.rnn_cell.forward(inputs, h, ts)`, and the
wired CfC cell its layers as `self._layers[i].forward(...)`: no module call.

Loops (`--loop`):

- `plain`: `model(x)` (or `model.forward(x)` with `--call forward`), `nn.MSELoss`, Adam,
  `optimizer.zero_grad()`; `--timespans` hands `timespans=` (elapsed time per step).
- `lightning`: the package's PyTorch example: a `SequenceLearner` LightningModule whose
  `training_step` calls `self.model.forward(x)`, an `optimizer_step` that steps the
  optimizer and then calls `apply_weight_constraints()` on an LTC cell, Lightning's
  `Trainer` with `gradient_clip_val=1`.

`--explicit` builds an LTC with `implicit_param_constraints=False`: the cell clips its
positive parameters after each step by replacing their `.data`.
`--hx` carries the final state of one batch into the next, detached (stateful training).
"""

import argparse
import warnings

import torch
from torch import nn

from ncps.torch import CfC, LTC
from ncps.wirings import AutoNCP, FullyConnected


def build(args) -> nn.Module:
    seq = args.task == "regress"   # a classifier reads the last output alone
    if args.model == "cfc":
        return CfC(args.inputs, args.units, proj_size=args.outputs, batch_first=True,
                   return_sequences=seq, mode=args.mode, backbone_units=args.backbone,
                   backbone_layers=args.backbone_layers, backbone_dropout=args.dropout)
    if args.model == "cfc-mixed":
        return CfC(args.inputs, args.units, proj_size=args.outputs, batch_first=True,
                   return_sequences=seq, mixed_memory=True, backbone_units=args.backbone)
    if args.model == "cfc-ncp":
        return CfC(args.inputs, AutoNCP(args.units, args.outputs, seed=0), batch_first=True,
                   return_sequences=seq, mode=args.mode)
    if args.model == "ltc-ncp":
        return LTC(args.inputs, AutoNCP(args.units, args.outputs, seed=0), batch_first=True,
                   return_sequences=seq, ode_unfolds=args.unfolds,
                   implicit_param_constraints=not args.explicit)
    return LTC(args.inputs, FullyConnected(args.units, args.outputs), batch_first=True,
               return_sequences=seq, ode_unfolds=args.unfolds,
               implicit_param_constraints=not args.explicit)


def batches(args, gen: torch.Generator):
    """Sequences of `inputs` features whose target is a sine of their running sum."""
    while True:
        x = torch.randn(args.batch, args.seq, args.inputs, generator=gen)
        y = torch.sin(x.cumsum(1)[..., :args.outputs])
        if args.task == "classify":   # which feature's running sum ends highest
            y = x.cumsum(1)[:, -1, :args.outputs].argmax(-1)
        ts = torch.rand(args.batch, args.seq, 1, generator=gen) + 0.5
        yield x, y, ts


def constrain(model: nn.Module) -> None:
    """The LTC cell's own weight constraints (a no-op with implicit constraints)."""
    cell = getattr(model, "rnn_cell", None)
    if hasattr(cell, "apply_weight_constraints"):
        cell.apply_weight_constraints()


def plain(args, model: nn.Module) -> None:
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss() if args.task == "regress" else nn.CrossEntropyLoss()
    data = batches(args, torch.Generator().manual_seed(1))
    hx = None
    for step in range(args.steps):
        x, y, ts = next(data)
        kw = {"timespans": ts} if args.timespans else {}
        call = model.forward if args.call == "forward" else model
        y_hat, h = call(x, hx, **kw)
        loss = loss_fn(y_hat, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        constrain(model)
        if args.hx:
            hx = tuple(t.detach() for t in h) if isinstance(h, tuple) else h.detach()


def lightning(args, model: nn.Module) -> None:
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    class SequenceLearner(pl.LightningModule):
        def __init__(self, model, lr=0.005):
            super().__init__()
            self.model = model
            self.lr = lr

        def training_step(self, batch, batch_idx):
            x, y = batch
            y_hat, _ = self.model.forward(x)
            y_hat = y_hat.view_as(y)
            loss = nn.MSELoss()(y_hat, y)
            self.log("train_loss", loss, prog_bar=True)
            return {"loss": loss}

        def configure_optimizers(self):
            return torch.optim.Adam(self.model.parameters(), lr=self.lr)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure)
            constrain(self.model)   # the example's "apply weight constraints"

    gen = torch.Generator().manual_seed(1)
    data = batches(args, gen)
    xs, ys = zip(*(next(data)[:2] for _ in range(args.steps)))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.cat(xs), torch.cat(ys)), batch_size=args.batch,
        shuffle=False, num_workers=0)
    learn = SequenceLearner(model, lr=args.lr)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                         gradient_clip_val=1, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(model=learn, train_dataloaders=loader)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cfc",
                   choices=["cfc", "cfc-mixed", "cfc-ncp", "ltc-ncp", "ltc-fc"])
    p.add_argument("--loop", default="plain", choices=["plain", "lightning"])
    p.add_argument("--call", default="module", choices=["module", "forward"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=6)
    p.add_argument("--inputs", type=int, default=3)
    p.add_argument("--outputs", type=int, default=2)
    p.add_argument("--units", type=int, default=12)
    p.add_argument("--backbone", type=int, default=16)
    p.add_argument("--backbone-layers", type=int, default=1)
    p.add_argument("--unfolds", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--task", default="regress", choices=["regress", "classify"])
    p.add_argument("--mode", default="default", choices=["default", "pure", "no_gate"],
                   help="the CfC cell's")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="the CfC backbone's (with --backbone-layers 2 or more)")
    p.add_argument("--timespans", action="store_true", help="with --batch 1")
    p.add_argument("--explicit", action="store_true")
    p.add_argument("--hx", action="store_true")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = build(args)
    (lightning if args.loop == "lightning" else plain)(args, model)


if __name__ == "__main__":
    main()
