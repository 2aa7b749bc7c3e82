"""Transfusion (transfusion-pytorch, lucidrains) as its README trains it: one transformer
over interleaved text tokens and continuous modality tokens, the next-token loss on the
text beside a flow-matching loss on the modalities (each modality noised to a random time
and its velocity predicted), causal attention for text and bidirectional attention inside
each modality, the mask built per batch from where the modalities sit. Seeded, tiny,
nothing downloaded.

    python tests/clients/train_transfusion.py --steps 3
    memledger trace tests/clients/train_transfusion.py --steps 2 -o tf.ledger -- --mode two
    memledger compare tests/clients/train_transfusion.py -p 'checkpoint:transformer.layers.*.*' -- --mode one

Modes (`--mode`):

- `one`: one modality (latents of 8), the README's first example: a batch of two samples,
  each a list of text tensors (torch.long) and latent sequences (torch.float) of other
  lengths.
- `two`: two modalities (latents of 8 and 4), modality indices given as `(i, tensor)`.
- `image`: images through a `Conv2d` encoder and decoder (`channel_first_latent`, a
  (2, 2) default shape), the README's third example.
- `text`: text only, `Int['batch seq']`, the README's language pretraining.

All: `--depth`, `--dim`, `--accum N` (gradient accumulation), `--validate` (a loss under
no_grad in eval mode each step), `--breakdown` (the loss from `return_breakdown=True`),
`--value-residual`, `--recon W` (`reconstruction_loss_weight`, `image` only), `--ema`
(the velocity consistency loss against an `EMA` of the model, updated each step),
`--pos-emb` (`add_pos_emb`), `--processing S` (`modality_processing`: the library's default
`auto` times its three ways of laying out a batch's modalities on the first batch of each
structure, 4 runs each, and keeps the fastest for the process: a choice by the clock;
`grouped`, `flat`, `hybrid` fix it), `--library-params` (Adam over
`parameters_without_encoder_decoder()`, the library's list without the encoder and
decoder it runs frozen, instead of `model.parameters()`).
"""

import argparse

import torch
from torch import nn, randint, randn

from transfusion_pytorch import Transfusion


def batch_of(mode: str, ntok: int) -> list | torch.Tensor:
    if mode == "text":
        return randint(0, ntok, (2, 24))
    if mode == "one":
        return [[randint(0, ntok, (6,)), randn(4, 8), randint(0, ntok, (3,)), randn(3, 8)],
                [randint(0, ntok, (5,)), randn(5, 8), randint(0, ntok, (4,))]]
    if mode == "two":
        return [[randint(0, ntok, (6,)), (0, randn(4, 8)), randint(0, ntok, (3,)),
                 (1, randn(3, 4))],
                [randint(0, ntok, (5,)), randn(5, 8), randint(0, ntok, (2,)),
                 (1, randn(2, 4)), randint(0, ntok, (3,))]]
    return [[randint(0, ntok, (6,)), randn(3, 4, 4), randint(0, ntok, (3,)), randn(3, 3, 2)],
            [randint(0, ntok, (5,)), randn(3, 2, 5), randint(0, ntok, (4,))]]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="one", choices=["one", "two", "image", "text"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--value-residual", action="store_true")
    p.add_argument("--recon", type=float, default=0.0)
    p.add_argument("--ema", action="store_true")
    p.add_argument("--pos-emb", action="store_true")
    p.add_argument("--library-params", action="store_true")
    p.add_argument("--processing", default="auto",
                   choices=["auto", "grouped", "flat", "hybrid"])
    args = p.parse_args()
    torch.manual_seed(0)

    ntok = 16
    transformer = dict(dim=args.dim, depth=args.depth, dim_head=8, heads=2,
                       ff_expansion_factor=2, use_value_residual=args.value_residual)
    kw: dict = dict(num_text_tokens=ntok, transformer=transformer,
                    modality_processing=args.processing)
    if args.mode in ("one", "text"):
        kw.update(dim_latent=8, modality_default_shape=(4,))
    elif args.mode == "two":
        kw.update(dim_latent=(8, 4), modality_default_shape=((4,), (2,)))
    else:
        kw.update(dim_latent=8, channel_first_latent=True, modality_default_shape=(2, 2),
                  modality_encoder=nn.Conv2d(3, 8, 3, padding=1),
                  modality_decoder=nn.Conv2d(8, 3, 3, padding=1),
                  reconstruction_loss_weight=args.recon)
    if args.pos_emb:
        kw.update(add_pos_emb=True)
    model = Transfusion(**kw)
    params = model.parameters_without_encoder_decoder() if args.library_params \
        else model.parameters()
    optim = torch.optim.Adam(params, lr=1e-3)
    ema = None
    if args.ema:
        from ema_pytorch import EMA
        ema = EMA(model, beta=0.9, update_after_step=0, update_every=1)

    def loss_of(batch) -> torch.Tensor:
        extra = dict(velocity_consistency_ema_model=ema) if ema is not None else {}
        if args.breakdown:
            loss, _ = model(batch, return_breakdown=True, **extra)
            return loss
        return model(batch, **extra)

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of(batch_of(args.mode, ntok)) / args.accum
            loss.backward()
        optim.step()
        optim.zero_grad()
        if ema is not None:
            ema.update()
        if args.validate:
            model.eval()
            with torch.no_grad():
                val = loss_of(batch_of(args.mode, ntok))
            print(f"step {step} val {val.item():.4f}")
        print(f"step {step} loss {loss.item() * args.accum:.4f}")


if __name__ == "__main__":
    main()
