"""sinkhorn-transformer (lucidrains) as its README and its enwik8 example train it: a
`SinkhornTransformerLM` wrapped in its `AutoregressiveWrapper` (`loss = model(x,
return_loss=True)`: shift, pad to whole buckets through `Autopadder` with an input mask,
forward, cross-entropy), Adam, `clip_grad_norm_(..., 0.5)`, then `optim.step();
optim.zero_grad()`, `--accumulate` backward passes per step as the example's
GRADIENT_ACCUMULATE_EVERY, and its validation loss under no_grad plus a sample from
`generate` every `--validate-every` steps.

Modes (each a tiny shape of the library's own documented usage):
  lm        the enwik8 example's model: causal sorted-bucket attention (a sort net
            over the buckets' first keys, `differentiable_topk` with its in-place
            `scatter_` and `masked_fill_`, learned null keys, half the heads rotated by a
            bucket), local-attention heads beside it, chunked feed-forward
            (`ff_chunks`), an axial positional embedding and `emb_dim` < `dim`
            (`ProjectInOut`), `reversible=True` (`ReversibleSequence`: a custom
            autograd Function that runs the blocks under no_grad and rebuilds them in
            backward)
  plain     the same with `reversible=False`: a `SequentialSequence` of
            `ModuleList([PreNorm(attention), PreNorm(feed-forward)])` layers
  sortcut   non-causal attention with `n_sortcut` (the top sorted buckets for every
            query bucket), key/value buckets of their own size (`kv_bucket_size`), GLU
            feed-forward, the batch randomly truncated by the wrapper
            (`randomly_truncate_sequence=True`: a padded batch and its input mask)
  sinkhorn  non-causal Gumbel-Sinkhorn sorting (`non_permutative=False`: `uniform_`
            noise, iterated logsumexp normalisation) with the simple sort net (a learned
            projection, fixed length)
  encdec    the README's encoder/decoder: an encoder with `return_embeddings=True` and a
            causal decoder with `receives_context=True` (context attention layers),
            masks for both, one Adam over both
`--simple-sort` and `--top-buckets` pick the causal sort net and how many past buckets
each bucket attends to, `--pkm` puts a product-key memory in the last layer, `--weight-tie` shares one attention
and one feed-forward across the layers, `--rezero` uses ReZero for PreNorm, `--reversible`
makes any mode reversible (`--reversible dec`: encdec's decoder alone), `--dropout` sets the attention, attention-layer and feed-forward
dropouts.

Tiny, seeded, random tokens, nothing downloaded.

    python tests/clients/train_sinkhorn.py --mode plain --steps 3
    memledger trace tests/clients/train_sinkhorn.py --steps 2 -o sk.ledger -- --mode plain
    memledger predict sk.ledger --policy 'checkpoint:net.net.sinkhorn_transformer.fn.layers.layers.*.*'
"""

import argparse

import torch

from sinkhorn_transformer import AutoregressiveWrapper, SinkhornTransformerLM


def lm_kwargs(args) -> dict:
    d = args.dropout
    return dict(num_tokens=args.tokens, dim=args.dim, depth=args.depth, max_seq_len=args.seq,
                heads=2, dim_head=args.dim // 2, bucket_size=args.bucket,
                attn_dropout=d, attn_layer_dropout=d, ff_dropout=d,
                weight_tie=args.weight_tie, use_rezero=args.rezero,
                pkm_layers=(args.depth,) if args.pkm else (), pkm_num_keys=32,
                reversible=args.reversible is not None or args.mode == "lm")


def build(args):
    kw = lm_kwargs(args)
    if args.mode in ("lm", "plain"):
        kw.update(causal=True, emb_dim=args.dim // 2, n_local_attn_heads=1, ff_chunks=2,
                  use_simple_sort_net=args.simple_sort, n_top_buckets=args.top_buckets)
    elif args.mode == "sortcut":
        kw.update(causal=False, n_sortcut=2, kv_bucket_size=args.bucket // 2, ff_glu=True)
    elif args.mode == "sinkhorn":
        kw.update(causal=False, non_permutative=False, use_simple_sort_net=True,
                  sinkhorn_iter=3)
    elif args.mode == "encdec":
        enc = SinkhornTransformerLM(**{**kw, "max_seq_len": args.seq // 2,
                                       "reversible": args.reversible == "all"},
                                    return_embeddings=True)
        dec = SinkhornTransformerLM(**kw, causal=True, receives_context=True,
                                    context_bucket_size=args.bucket // 2)
        return enc, AutoregressiveWrapper(dec)
    return None, AutoregressiveWrapper(SinkhornTransformerLM(**kw))


def batch(args):
    if args.mode == "encdec":   # a source and its target, with their masks
        n = args.seq // 2
        src = torch.randint(1, args.tokens, (args.batch, n))
        tgt = torch.randint(1, args.tokens, (args.batch, args.seq + 1))
        return src, tgt, torch.ones(args.batch, n).bool(), \
            torch.ones(args.batch, args.seq + 1).bool()
    # the enwik8 example samples a window of bytes; random tokens stand in
    return torch.randint(0, args.tokens, (args.batch, (args.len or args.seq) + 1)), None, \
        None, None


def loss_of(args, enc, model, data):
    x, tgt, src_mask, tgt_mask = data
    if enc is not None:
        context = enc(x, input_mask=src_mask)
        return model(tgt, context=context, input_mask=tgt_mask, context_mask=src_mask,
                     return_loss=True)
    return model(x, return_loss=True,
                 randomly_truncate_sequence=args.mode == "sortcut" and model.training)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lm", "plain", "sortcut", "sinkhorn", "encdec"],
                    default="lm")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--len", type=int, default=0,
                    help="tokens per batch row, below --seq: `Autopadder` pads them to "
                         "whole buckets and masks the padding (0: --seq)")
    ap.add_argument("--bucket", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--pkm", action="store_true")
    ap.add_argument("--simple-sort", action="store_true",
                    help="lm, plain: the causal simple sort net (a learned projection of "
                         "the keys' running mean)")
    ap.add_argument("--top-buckets", type=int, default=2,
                    help="lm, plain: past buckets each bucket attends to (n_top_buckets)")
    ap.add_argument("--weight-tie", action="store_true")
    ap.add_argument("--rezero", action="store_true")
    ap.add_argument("--reversible", nargs="?", const="all", choices=["all", "dec"],
                    help="reversible layers (encdec: on both sides, or on the decoder "
                         "alone: its reversible backward runs a retained backward into "
                         "the encoder's output once per context layer)")
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--validate-every", type=int, default=0,
                    help="a no_grad validation loss and a generated sample every N steps")
    args = ap.parse_args()
    torch.manual_seed(0)
    enc, model = build(args)
    params = [*(enc.parameters() if enc is not None else ()), *model.parameters()]
    optim = torch.optim.Adam(params, lr=1e-4)
    for i in range(args.steps):
        for m in (enc, model):
            if m is not None:
                m.train()
        for _ in range(args.accumulate):
            loss = loss_of(args, enc, model, batch(args))
            loss.backward()
        print(f"training loss: {loss.item():.4f}")
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        optim.step()
        optim.zero_grad()
        if args.validate_every and i % args.validate_every == 0:
            for m in (enc, model):
                if m is not None:
                    m.eval()
            with torch.no_grad():
                print(f"validation loss: {loss_of(args, enc, model, batch(args)).item():.4f}")
            if enc is None and args.mode != "sinkhorn":   # sinkhorn: a fixed length
                x = batch(args)[0]
                sample = model.generate(x[0, : args.bucket], 4)
                print("sample:", sample.tolist())


if __name__ == "__main__":
    main()
