"""tab-transformer-pytorch (lucidrains) as its users write it: a TabTransformer or an
FTTransformer built from its README's config, a DataLoader of mixed batches (categorical
codes as int64, continuous columns as float32) over a random table (nothing downloaded),
a classification (cross-entropy) or regression (MSE) loss, AdamW.

    model = TabTransformer(categories=(10, 5, 6, 5, 8), num_continuous=4, dim=32,
                           dim_out=3, depth=2, heads=4, continuous_mean_std=stats)
    for x_categ, x_cont, y in loader:
        loss = F.cross_entropy(model(x_categ, x_cont), y)
        opt.zero_grad(); loss.backward(); opt.step()

TabTransformer: the categorical columns are embedded (`categorical_embeds`, one table per
column, plus a shared per-column embedding concatenated), go through
`transformer.layers.{i}.{0,1}` (attention, feed-forward, each a `PreNorm` branch inside
hyper_connections' mHC residual streams), are flattened and concatenated with the
continuous columns (standardised by the `continuous_mean_std` buffer, then `norm`, a
LayerNorm), then `mlp` (x-mlps-pytorch's MLP). FTTransformer embeds both kinds into
tokens (`embedding`), prepends a CLS token, and reads the CLS row through `to_logits`.

    python tests/clients/train_tabtf.py --model tab
    memledger trace tests/clients/train_tabtf.py --steps 2 -o tab.ledger -- --model ft
    memledger compare tests/clients/train_tabtf.py -p 'checkpoint:transformer.layers.*'
"""

import argparse
import random

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tab", "ft"], default="tab")
    ap.add_argument("--task", choices=["clf", "reg"], default="clf")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--streams", type=int, default=4)   # mHC residual streams (1: plain)
    ap.add_argument("--cont", type=int, default=4)      # continuous columns
    ap.add_argument("--dropout", type=float, default=0.0)   # attn and ff dropout
    ap.add_argument("--special", action="store_true")   # some codes -1: special tokens
    ap.add_argument("--no-stats", action="store_true")  # no continuous_mean_std buffer
    ap.add_argument("--eval", action="store_true")      # a validation pass per epoch
    ap.add_argument("--amp", action="store_true")       # bf16 autocast around the forward
    ap.add_argument("--clip", type=float, default=0.0)  # clip_grad_norm_ (0: none)
    ap.add_argument("--sched", action="store_true")     # OneCycleLR stepped per batch
    ap.add_argument("--attn", action="store_true")      # return_attn=True, kept (detached)
    ap.add_argument("--workers", type=int, default=0)   # DataLoader num_workers
    ap.add_argument("--predict", action="store_true")   # then predict the table, with maps
    args = ap.parse_args()

    from tab_transformer_pytorch import FTTransformer, TabTransformer

    torch.manual_seed(0)
    random.seed(0)   # hyper_connections picks each layer's residual stream by randrange
    categories = (10, 5, 6, 5, 8)
    n_out = 3 if args.task == "clf" else 1
    x_categ = torch.stack([torch.randint(0, c, (args.rows,)) for c in categories], dim=1)
    if args.special:   # missing values coded -1 (TabTransformer's special tokens)
        x_categ[::4, 1] = -1
    x_cont = torch.randn(args.rows, args.cont) * 3 + 1
    y = (torch.randint(0, n_out, (args.rows,)) if args.task == "clf"
         else torch.randn(args.rows, 1))
    common = dict(categories=categories, num_continuous=args.cont, dim=args.dim,
                  dim_out=n_out, depth=args.depth, heads=args.heads,
                  attn_dropout=args.dropout, ff_dropout=args.dropout,
                  num_residual_streams=args.streams)
    if args.model == "tab":
        stats = None if args.no_stats else torch.stack(
            [x_cont.mean(0), x_cont.std(0)], dim=-1)
        model = TabTransformer(**common, mlp_hidden_mults=(4, 2), mlp_act=torch.nn.ReLU(),
                               continuous_mean_std=stats)
    else:
        model = FTTransformer(**common)
    loader = DataLoader(TensorDataset(x_categ, x_cont, y), batch_size=args.batch,
                        shuffle=True, num_workers=args.workers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=1e-2, total_steps=args.epochs * len(loader)) if args.sched else None
    attn_maps = []   # per-batch attention (interpretability), as its README returns them
    loss_fn = F.cross_entropy if args.task == "clf" else F.mse_loss
    for epoch in range(args.epochs):
        model.train()
        for xc, xn, yb in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                if args.attn:
                    pred, attns = model(xc, xn, return_attn=True)
                    attn_maps.append(attns.detach().mean(dim=1))
                else:
                    pred = model(xc, xn)
            loss = loss_fn(pred.float(), yb)
            opt.zero_grad()
            loss.backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            if sched is not None:
                sched.step()
        if args.eval:
            model.eval()
            with torch.no_grad():
                pred = model(x_categ[:64], x_cont[:64])
                val = loss_fn(pred, y[:64]).item()
            print(f"epoch {epoch}: loss {loss.item():.4f} val {val:.4f}")
        else:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
    if args.predict:   # scoring after training, attention maps for interpretation
        model.eval()
        preds, maps = [], []
        with torch.no_grad():
            for xc, xn, _ in DataLoader(TensorDataset(x_categ, x_cont, y),
                                        batch_size=args.batch):
                pred, attns = model(xc, xn, return_attn=True)
                preds.append(pred.softmax(-1) if args.task == "clf" else pred)
                maps.append(attns.mean(dim=(2, 3)))
        print("predicted", torch.cat(preds).shape, torch.cat(maps, dim=1).shape)


if __name__ == "__main__":
    main()
