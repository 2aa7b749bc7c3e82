"""hl-gauss-pytorch (tests/clients/train_hl_gauss.py): the histogram loss of Imani et al.
(`HLGaussLoss`: a regression target turned into a Gaussian-smoothed histogram over bins by
float64 `erf`s of the bin edges, trained with soft-target cross entropy) as the head of a
small regressor (`HLGaussLayer`: an optional network, an RMSNorm, a bias-free projection to
the bins), as the library's README does. Random features and targets, seeded, tiny,
nothing downloaded.

    python tests/clients/train_hl_gauss.py --steps 3 --model mlp
    memledger trace tests/clients/train_hl_gauss.py --steps 2 -o g.ledger -- --model transformer
    memledger compare tests/clients/train_hl_gauss.py -p 'checkpoint:head' -- --model mlp

Models (`--model`):

- `mlp`: an MLP trunk (`trunk.*`: Linear, SiLU) and an `HLGaussLayer` whose `network` is
  another Linear + SiLU, `hl_gauss_loss` given as a dict (`HLGaussLoss(min, max, bins)`).
- `transformer`: token embedding + `nn.TransformerEncoder` (`encoder.layers.*`), mean
  pooled, into an `HLGaussLayer(norm_embed=True)`.
- `binary`: an MLP to one logit with a `BinaryHLGaussLoss` (two bins, binary cross
  entropy) on a sigmoid target in [0, 1].

Options: `--running-stats` (`HLGaussLossFromRunningStats`: its support follows the running
mean and variance of the targets, a new `HLGaussLossFromSupport` built on each training
forward), `--symlog`, `--aux W` (the auxiliary MSE regression loss on the predicted value),
`--optim adam|adamw|sgd`, `--accum N`, `--clip`, `--validate` (predicted values under
no_grad in eval each step). `--bug no-divide` (with `--accum`): the accumulated losses never
divided by N.
"""

import argparse

import torch
import torch.nn as nn

from hl_gauss_pytorch import BinaryHLGaussLoss, HLGaussLayer


class MLPRegressor(nn.Module):
    def __init__(self, dim_in: int, dim: int, head: HLGaussLayer) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim_in, dim), nn.SiLU(), nn.Linear(dim, dim),
                                   nn.SiLU())
        self.head = head

    def forward(self, x, target=None):
        return self.head(self.trunk(x), target)


class TransformerRegressor(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, head: HLGaussLayer) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 2, dim * 2, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = head

    def forward(self, tokens, target=None):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1), target)


class BinaryRegressor(nn.Module):
    def __init__(self, dim_in: int, dim: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim_in, dim), nn.SiLU(), nn.Linear(dim, 1))
        self.loss = BinaryHLGaussLoss(sigma=0.1)

    def forward(self, x, target=None):
        logits = self.trunk(x).squeeze(-1)    # (B,): one logit, a two-bin histogram
        return self.loss(logits, target) if target is not None else self.loss(logits)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="mlp", choices=["mlp", "transformer", "binary"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--bins", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=6)
    p.add_argument("--running-stats", action="store_true")
    p.add_argument("--symlog", action="store_true")
    p.add_argument("--aux", type=float, default=0.0)
    p.add_argument("--optim", default="adam", choices=["adam", "adamw", "sgd"])
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--bug", default="none", choices=["none", "no-divide"])
    args = p.parse_args()
    torch.manual_seed(0)

    loss_cfg = dict(min_value=-5.0, max_value=5.0, num_bins=args.bins, use_symlog=args.symlog,
                    warn_out_of_range=False)
    if args.running_stats:
        head_kw = dict(hl_gauss_loss_running_stats=dict(num_bins=args.bins,
                                                        use_symlog=args.symlog,
                                                        warn_out_of_range=False))
    else:
        head_kw = dict(hl_gauss_loss=loss_cfg)
    dim_in, vocab = 12, 50
    if args.model == "mlp":
        head = HLGaussLayer(args.dim, network=nn.Sequential(nn.Linear(args.dim, args.dim),
                                                           nn.SiLU()),
                            aux_regress_loss_weight=args.aux, **head_kw)
        model = MLPRegressor(dim_in, args.dim, head)
    elif args.model == "transformer":
        head = HLGaussLayer(args.dim, norm_embed=True, aux_regress_loss_weight=args.aux,
                            **head_kw)
        model = TransformerRegressor(vocab, args.dim, args.layers, head)
    else:
        model = BinaryRegressor(dim_in, args.dim)

    if args.optim == "adam":
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    elif args.optim == "adamw":
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    def batch():
        if args.model == "transformer":
            x = torch.randint(0, vocab, (args.batch, args.seq))
            y = (x.float().mean(dim=1) - vocab / 2) / 5
        else:
            x = torch.randn(args.batch, dim_in)
            y = x[:, :3].sum(dim=1)
        if args.model == "binary":
            y = torch.sigmoid(y)
        return x, y

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            x, y = batch()
            loss = model(x, y)
            if args.accum > 1 and args.bug != "no-divide":
                loss = loss / args.accum
            loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                x, y = batch()
                print(f"validation error {(model(x) - y).abs().mean().item():.4f}")


if __name__ == "__main__":
    main()
