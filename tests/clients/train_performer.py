"""performer-pytorch (lucidrains) as its README and its enwik8 example train it: a
`PerformerLM` wrapped in `AutoregressiveWrapper` (`loss = model(x, return_loss=True)`:
shift, forward, cross-entropy), Adam, `clip_grad_norm_(..., 0.5)`, then
`optim.step(); optim.zero_grad()`.

Modes (each a tiny shape of the library's own documented usage):
  lm       causal FAVOR+ attention (softmax kernel over a random orthogonal projection held
           in a buffer), rotary position embedding, chunked feed-forward (`ff_chunks`), and
           `feature_redraw_interval`: every N+1 forwards the projection buffers are drawn
           again from torch's generator (QR of a Gaussian) and copied in place, and a
           counter buffer is bumped in place on every other forward
  rev      the same with `reversible=True`: `ReversibleSequence`, a custom autograd
           Function that runs the blocks under no_grad and rebuilds their activations in
           backward (its README's memory trick)
  gen      `generalized_attention=True` (ReLU kernel), local attention heads beside the
           global ones (`local_attn_heads`), GLU feed-forward, token shifting, ScaleNorm
  encdec   `PerformerEncDec`: an encoder's encodings handed to a causal decoder's cross
           attention, the decoder trained through its own `AutoregressiveWrapper`
`--reversible` gives `gen` and `encdec` reversible layers too; `--dropout` the embedding,
attention and feed-forward dropouts; `--mask` hands the README's all-true mask.

Tiny, seeded, random tokens, nothing downloaded.

    python tests/clients/train_performer.py --mode rev --steps 3
    memledger trace tests/clients/train_performer.py --steps 2 -o pf.ledger -- --mode lm
    memledger predict pf.ledger --policy 'checkpoint:net.performer.net.layers.*'
"""

import argparse

import torch

from performer_pytorch import PerformerEncDec, PerformerLM
from performer_pytorch.autoregressive_wrapper import AutoregressiveWrapper


def lm_kwargs(args) -> dict:
    kw = dict(num_tokens=args.tokens, max_seq_len=args.seq, dim=args.dim, depth=args.depth,
              heads=2, dim_head=args.dim // 2, causal=True, nb_features=args.features,
              feature_redraw_interval=args.redraw, reversible=args.reversible,
              ff_chunks=args.ff_chunks, emb_dropout=args.dropout, ff_dropout=args.dropout,
              attn_dropout=args.dropout)
    if args.mode == "gen":
        kw.update(generalized_attention=True, local_attn_heads=1,
                  local_window_size=args.seq // 2, ff_glu=True, shift_tokens=True,
                  use_scalenorm=True)
    return kw


def build(args):
    if args.mode == "encdec":
        enc = {f"enc_{k}": v for k, v in lm_kwargs(args).items() if k != "dim"}
        dec = {f"dec_{k}": v for k, v in lm_kwargs(args).items() if k != "dim"}
        enc["enc_causal"] = False
        return PerformerEncDec(dim=args.dim, **enc, **dec)
    return AutoregressiveWrapper(PerformerLM(**lm_kwargs(args)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lm", "rev", "gen", "encdec"], default="lm")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--features", type=int, default=16, help="nb_features")
    ap.add_argument("--redraw", type=int, default=1, help="feature_redraw_interval")
    ap.add_argument("--ff-chunks", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--reversible", action="store_true")
    ap.add_argument("--mask", action="store_true")
    args = ap.parse_args()
    if args.mode == "rev":
        args.reversible = True
    torch.manual_seed(0)
    model = build(args)
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    for i in range(args.steps):
        model.train()
        # the example samples a window of enwik8 bytes; random tokens stand in
        x = torch.randint(0, args.tokens, (args.batch, args.seq + 1))
        kw = {"mask": torch.ones_like(x).bool()} if args.mask else {}
        if args.mode == "encdec":
            src = torch.randint(0, args.tokens, (args.batch, args.seq))
            loss = model(src, x, **({"enc_mask": torch.ones_like(src).bool()}
                                    if args.mask else {}))
        else:
            loss = model(x, return_loss=True, **kw)
        loss.backward()
        print(f"training loss: {loss.item():.4f}")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()


if __name__ == "__main__":
    main()
