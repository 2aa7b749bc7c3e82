"""pytorch-forecasting's models trained as its tutorials write them: a `TimeSeriesDataSet`
built from a small synthetic pandas frame (a few series of noisy sines, a static category
per series, the time index as a known real), its `to_dataloader`, the model made by
`Model.from_dataset(dataset, ...)` and trained by Lightning's `Trainer.fit` (`--loop
trainer`), or by a loop of the script's own (`--loop hand`: `model(x)`, `model.loss`,
`torch.optim.Adam`). Seeded, tiny, nothing downloaded or written (`logger=False`, no
checkpointing).

    python tests/clients/train_pf.py --model tft --steps 3
    memledger trace tests/clients/train_pf.py --steps 2 -o tft.ledger -- --model tft
    memledger compare tests/clients/train_pf.py --steps 2 -p 'offload:lstm_encoder' \
        -- --model tft --loop hand

Models (`--model`):

- `tft`: `TemporalFusionTransformer` (variable selection networks of gated residual
  networks, an LSTM encoder and decoder, interpretable multi-head attention), its default
  `QuantileLoss` (7 quantiles).
- `nbeats`: `NBeats` (a trend and a seasonality stack of fully connected blocks), target
  only, its default `MASE` loss.
- `deepar`: `DeepAR` (an LSTM over the lagged, scaled target and the known covariates),
  its default `NormalDistributionLoss`.

`--steps` is the Trainer's `max_steps` (or the hand loop's step count). `--collect` calls
`gc.collect()` once the model is built: building the model drops torchmetrics metrics (the
default logging metrics), each a reference cycle whose state tensors only Python's garbage
collector frees, at a moment that differs from run to run (`memledger doctor` warns of
them, `cyclic_garbage`).
"""

import argparse
import gc
import warnings

import numpy as np
import pandas as pd
import torch

from pytorch_forecasting import DeepAR, NBeats, TemporalFusionTransformer, TimeSeriesDataSet
from pytorch_forecasting.metrics import MASE

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

ENCODER, PREDICTION = 12, 4


def frame(series: int, length: int) -> pd.DataFrame:
    """`series` noisy sines of their own period, amplitude and level."""
    rng = np.random.default_rng(0)
    rows = []
    for s in range(series):
        t = np.arange(length)
        period, amp, level = rng.uniform(6, 14), rng.uniform(0.5, 2.0), rng.uniform(5, 10)
        value = level + amp * np.sin(2 * np.pi * t / period) + rng.normal(0, 0.1, length)
        rows.append(pd.DataFrame({"series": str(s), "time_idx": t,
                                  "value": value.astype(np.float32)}))
    return pd.concat(rows, ignore_index=True)


def dataset(model: str, data: pd.DataFrame) -> TimeSeriesDataSet:
    common = dict(time_idx="time_idx", target="value", group_ids=["series"],
                  max_encoder_length=ENCODER, max_prediction_length=PREDICTION)
    if model == "nbeats":       # N-BEATS: the target alone, fixed lengths
        return TimeSeriesDataSet(data, min_encoder_length=ENCODER,
                                 time_varying_unknown_reals=["value"], **common)
    if model == "deepar":
        return TimeSeriesDataSet(data, time_varying_known_reals=["time_idx"],
                                 time_varying_unknown_reals=["value"], **common)
    return TimeSeriesDataSet(data, static_categoricals=["series"],
                             time_varying_known_reals=["time_idx"],
                             time_varying_unknown_reals=["value"],
                             add_relative_time_idx=True, add_target_scales=True, **common)


def build(model: str, ds: TimeSeriesDataSet):
    if model == "tft":
        return TemporalFusionTransformer.from_dataset(
            ds, hidden_size=16, attention_head_size=2, hidden_continuous_size=8,
            dropout=0.0, learning_rate=1e-3, log_interval=-1)
    if model == "nbeats":
        return NBeats.from_dataset(ds, widths=[16, 32], num_blocks=[1, 1],
                                   num_block_layers=[2, 2], dropout=0.0, learning_rate=1e-3)
    return DeepAR.from_dataset(ds, hidden_size=16, rnn_layers=2, dropout=0.0,
                               learning_rate=1e-3)


def by_hand(model, loader, steps: int) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    batches = iter(loader)
    for step in range(steps):
        x, y = next(batches)
        out = model(x)
        if isinstance(model.loss, MASE):     # as the models' own `step` calls it
            loss = model.loss(out["prediction"], y, encoder_target=x["encoder_target"],
                              encoder_lengths=x["encoder_lengths"])
        else:
            loss = model.loss(out["prediction"], y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="tft", choices=["tft", "nbeats", "deepar"])
    p.add_argument("--loop", default="trainer", choices=["trainer", "hand"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--series", type=int, default=3)
    p.add_argument("--length", type=int, default=40)
    p.add_argument("--collect", action="store_true", help="gc.collect() after building")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    ds = dataset(args.model, frame(args.series, args.length))
    loader = ds.to_dataloader(train=True, batch_size=args.batch, num_workers=0)
    model = build(args.model, ds)
    if args.collect:
        gc.collect()
    if args.loop == "hand":
        by_hand(model, loader, args.steps)
        return
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    trainer.fit(model, train_dataloaders=loader)


if __name__ == "__main__":
    main()
