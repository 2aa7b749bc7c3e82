"""iTransformer (lucidrains' iTransformer) as its README trains it: multivariate series
forecasting where each variate's whole lookback window is one token (an `nn.Linear` over
time), attention runs across the variates, and a head per prediction length maps each
token back to the future; the model returns the MSE loss itself when given the targets.
Seeded, tiny, nothing downloaded.

    python tests/clients/train_itransformer.py --steps 3 --model itransformer
    memledger trace tests/clients/train_itransformer.py --steps 2 -o it.ledger -- --revin
    memledger compare tests/clients/train_itransformer.py -p 'checkpoint:layers.*.*' -- --model 2d

Models (`--model`):

- `itransformer`: `iTransformer` (memory tokens prepended, hyper-connections: the residual
  stream expanded to `--streams` copies mixed by learned matrices around each branch, the
  first layer's values mixed into the later layers' by a learned gate, value residual);
  `--tokens N` (`num_tokens_per_variate`).
- `2d`: `iTransformer2D` (time tokens from a causal `Conv1d` per variate beside the variate
  token, each layer a `SimpleGateLoopLayer` (gateloop-transformer's associative scan),
  causal attention across time with one rotary embedding shared by every layer, full
  attention across the variates); `--time-tokens N`.
- `fft`: `iTransformerFFT` (a second token per variate from the window's FFT, `view_as_real`,
  post-norm layers).

All: `--pred 12,24` (several prediction lengths: a tuple of targets, the losses summed),
`--revin` (reversible instance normalization; `--affine`: its gamma and beta trained),
`--mem N` (memory tokens), `--dropout P` (attention and feed-forward), `--no-flash` (the
einsum attention rather than `F.scaled_dot_product_attention`), `--accum N`, `--amp` (bf16
autocast), `--validate` (predictions under no_grad in eval mode each step), `--sgd`
(momentum) or Adam, `--clip` (clip_grad_norm_).
"""

import argparse
import random

import torch

from iTransformer import iTransformer, iTransformer2D, iTransformerFFT


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="itransformer", choices=["itransformer", "2d", "fft"])
    p.add_argument("--variates", type=int, default=6)
    p.add_argument("--lookback", type=int, default=16)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--pred", default="8")
    p.add_argument("--mem", type=int, default=2)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--tokens", type=int, default=1)
    p.add_argument("--time-tokens", type=int, default=4)
    p.add_argument("--revin", action="store_true")
    p.add_argument("--affine", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--no-flash", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    p.add_argument("--clip", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    random.seed(0)   # hyper-connections picks each layer's residual stream by random.randrange

    preds = tuple(int(n) for n in args.pred.split(","))
    common = dict(num_variates=args.variates, lookback_len=args.lookback, dim=args.dim,
                  depth=args.depth, heads=args.heads, dim_head=args.dim_head,
                  pred_length=preds if len(preds) > 1 else preds[0],
                  num_mem_tokens=args.mem, attn_dropout=args.dropout,
                  ff_dropout=args.dropout, ff_mult=2, flash_attn=not args.no_flash,
                  use_reversible_instance_norm=args.revin,
                  reversible_instance_norm_affine=args.affine)
    if args.model == "itransformer":
        model = iTransformer(num_tokens_per_variate=args.tokens,
                             num_residual_streams=args.streams, **common)
    elif args.model == "2d":
        model = iTransformer2D(num_time_tokens=args.time_tokens, **common)
    else:
        model = iTransformerFFT(**common)
    if args.sgd:
        optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batch():
        series = torch.randn(args.batch, args.lookback, args.variates)
        targets = tuple(torch.randn(args.batch, n, args.variates) for n in preds)
        return series, (targets if len(targets) > 1 else targets[0])

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            series, targets = batch()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = model(series, targets)   # the summed MSE, as the README trains
            (loss / args.accum if args.accum > 1 else loss).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                series, targets = batch()
                out = model(series)
                out = out if isinstance(out, dict) else {preds[0]: out}
                err = sum(((out[n] - t) ** 2).mean() for n, t in
                          zip(preds, targets if len(preds) > 1 else (targets,)))
                print(f"validation mse {err.item():.4f}")


if __name__ == "__main__":
    main()
