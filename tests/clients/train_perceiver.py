"""Perceiver, Perceiver IO and Perceiver LM trained on random data, as perceiver-pytorch
(lucidrains) writes them: latents cross-attending to a Fourier-position-encoded input
(`Perceiver`: an image of `--size` x `--size` pixels, classes), a Perceiver IO whose decoder
queries read the latents back (`--model io`: per-query regression), and the README's
`PerceiverLM` (`--model lm`: token embedding, Perceiver IO, next-token cross-entropy). A plain
Adam loop. Seeded, tiny, nothing downloaded.

    python tests/clients/train_perceiver.py --steps 3
    memledger trace tests/clients/train_perceiver.py --steps 2 -o p.ledger -- --tie
    memledger predict p.ledger --policy 'checkpoint:layers.*'

Options: `--model perceiver|io|lm`, `--depth N`, `--tie` (`weight_tie_layers=True`: the
library's `cache_fn` hands every layer after the first (Perceiver) or every layer (IO) the
same block object, listed once by `named_modules()` and called `depth` times),
`--attn-residual` (the Enformer attention residual over every block output so far),
`--inverted` (inverted cross-attention: softmax over the latents, then an l1 norm),
`--mask` (an input mask, its last quarter masked out), `--self-per-cross N`,
`--seq-dropout P` (IO and LM: the structured dropout of the input sequence, `randn` +
`topk` + a gather), `--queries-kv` (Perceiver: the `Attention`'s `queries_contribute_kv`,
no option of `Perceiver`, set on its cross-attentions after building; the input then has
the latents' channels and no Fourier features), `--decoder-ff`,
`--accum N` (micro-batches per step), `--clip` (gradient clipping), `--autocast` (the
forward and loss under CPU bf16 autocast).
"""

import argparse

import torch
import torch.nn.functional as F

from perceiver_pytorch import Perceiver, PerceiverIO, PerceiverLM


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", choices=["perceiver", "io", "lm"], default="perceiver")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--latents", type=int, default=8)
    p.add_argument("--size", type=int, default=6)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--tie", action="store_true")
    p.add_argument("--attn-residual", action="store_true")
    p.add_argument("--inverted", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--self-per-cross", type=int, default=1)
    p.add_argument("--seq-dropout", type=float, default=0.0)
    p.add_argument("--queries-kv", action="store_true")
    p.add_argument("--decoder-ff", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--autocast", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    common = dict(depth=args.depth, num_latents=args.latents, latent_dim=args.dim,
                  cross_heads=1, latent_heads=2, cross_dim_head=8, latent_dim_head=8,
                  weight_tie_layers=args.tie, attn_residual=args.attn_residual,
                  attn_residual_rank=4)
    num_tokens, n_out = 32, 3
    if args.model == "perceiver":
        # queries joining the keys need the input's channels to be the latents': the input
        # then comes without the Fourier features (as a user encoding positions themselves)
        channels = args.dim if args.queries_kv else 3
        model = Perceiver(input_channels=channels, input_axis=2, num_freq_bands=4,
                          max_freq=10., num_classes=5, self_per_cross_attn=args.self_per_cross,
                          inverted_cross_attn=args.inverted,
                          fourier_encode_data=not args.queries_kv, **common)
        for block in model.layers if args.queries_kv else ():
            block.cross_attn.fn.queries_contribute_kv = True
    elif args.model == "io":
        model = PerceiverIO(dim=5, queries_dim=12, logits_dim=n_out,
                            decoder_ff=args.decoder_ff, seq_dropout_prob=args.seq_dropout,
                            inverted_cross_attn=args.inverted, **common)
        queries = torch.randn(args.seq_len, 12)
    else:
        model = PerceiverLM(dim=args.dim, num_tokens=num_tokens, max_seq_len=args.seq_len,
                            decoder_ff=args.decoder_ff, seq_dropout_prob=args.seq_dropout,
                            inverted_cross_attn=args.inverted, **common)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def mask(n: int) -> torch.Tensor | None:
        if not args.mask:
            return None
        m = torch.ones(args.batch, n, dtype=torch.bool)
        m[:, n * 3 // 4:] = False
        return m

    def loss_of() -> torch.Tensor:
        if args.model == "perceiver":
            img = torch.randn(args.batch, args.size, args.size, channels)
            # the mask over the flattened pixels: `queries_contribute_kv` joins it to the
            # latents' ones along the last axis, which a (b, h, w) mask does not have
            logits = model(img, mask=mask(args.size * args.size))
            return F.cross_entropy(logits, torch.randint(0, 5, (args.batch,)))
        if args.model == "io":
            seq = torch.randn(args.batch, args.seq_len, 5)
            out = model(seq, mask=mask(args.seq_len), queries=queries)
            return F.mse_loss(out, torch.randn(args.batch, args.seq_len, n_out))
        tokens = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
        logits = model(tokens[:, :-1], mask=mask(args.seq_len))
        return F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:])

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
                loss = loss_of()
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
