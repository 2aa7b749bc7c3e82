"""linear-attention-transformer (lucidrains) as its README and examples train it: a
`LinearAttentionTransformerLM` wrapped in its `AutoregressiveWrapper` (`loss =
model(x, return_loss=True)`: shift, pad to the local window through `Autopadder` with an
input mask, forward, cross-entropy), Adam, `clip_grad_norm_(..., 0.5)`, then
`optim.step(); optim.zero_grad()`, `--accumulate` backward passes per step as the enwik8
example's GRADIENT_ACCUMULATE_EVERY, and its validation loss under no_grad plus a sample
from `generate` every `--validate-every` steps.

Modes (each a tiny shape of the library's own documented usage):
  lm       causal Q(KᵀV) attention with a blindspot beside local (QKᵀ)V heads
           (local-attention's `LocalAttention`), chunked GLU feed-forward, token shifting,
           axial positional embedding, embedding factorization (`emb_dim` < `dim`:
           `ProjectInOut`), `attend_axially` (a strided attention over the sequence
           folded by the window, and its own feed-forward, after each layer), layers in
           a `SequentialSequence`
  rev      the same with `reversible=True`: `ReversibleSequence` (a custom autograd
           Function that runs the blocks under no_grad, records the CPU generator state
           on each `Deterministic`, and rebuilds the activations in backward)
  pkm      a product-key memory layer (`pkm_layers`) and rotary embeddings (with
           `attend_axially` the library fails: the folded attention gets the unfolded
           rotary table)
  linformer  a non-causal LM with Linformer self-attention (`LinformerSettings`)
  encdec   the copy task (examples/toy_tasks/copy_task.py): an encoder with
           `return_embeddings=True` and a causal decoder with `receives_context=True`
           inside the wrapper, one Adam over both
  image    images.py's `ImageLinearAttention` (1x1 and 3x3 projections) as residual blocks
           of a small CNN classifier on random images (`--seq` the side, `--tokens` the
           classes), cross-entropy
`--reversible` gives `encdec` reversible layers on both sides (`--reversible dec`: the
decoder's alone). `--dropout` sets the feed-forward, attention-layer and attention dropouts.

Tiny, seeded, random tokens, nothing downloaded.

    python tests/clients/train_linattn.py --mode lm --steps 3
    memledger trace tests/clients/train_linattn.py --steps 2 -o la.ledger -- --mode lm
    memledger predict la.ledger --policy 'checkpoint:net.net.transformer.fn.layers.layers.*.*'
"""

import argparse

import torch

from linear_attention_transformer import LinearAttentionTransformerLM, LinformerSettings
from linear_attention_transformer.autoregressive_wrapper import AutoregressiveWrapper


def lm_kwargs(args) -> dict:
    d = args.dropout
    return dict(num_tokens=args.tokens, dim=args.dim, depth=args.depth, max_seq_len=args.seq,
                heads=2, dim_head=args.dim // 2, ff_dropout=d, attn_layer_dropout=d,
                attn_dropout=d)


def build(args):
    kw = lm_kwargs(args)
    if args.mode in ("lm", "rev"):
        kw.update(causal=True, emb_dim=args.dim // 2, blindspot_size=args.window // 2,
                  n_local_attn_heads=1, local_attn_window_size=args.window, ff_chunks=2,
                  ff_glu=True, shift_tokens=True, reversible=args.mode == "rev",
                  attend_axially=args.mode == "lm")
    elif args.mode == "pkm":
        kw.update(causal=True, pkm_layers=(args.depth,), pkm_num_keys=16,
                  use_rotary_emb=True)
    elif args.mode == "linformer":
        kw.update(linformer_settings=LinformerSettings(k=args.seq // 4))
    elif args.mode == "image":   # images.py's attention as a residual block of a CNN
        from linear_attention_transformer.images import ImageLinearAttention

        class Residual(torch.nn.Module):
            def __init__(self, fn):
                super().__init__()
                self.fn = fn

            def forward(self, x):
                return x + self.fn(x)

        c = args.dim // 4
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, c, 3, padding=1), torch.nn.LeakyReLU(0.2),
            Residual(ImageLinearAttention(c, heads=2, key_dim=8, value_dim=8)),
            torch.nn.Conv2d(c, c, 3, padding=1, stride=2), torch.nn.LeakyReLU(0.2),
            Residual(ImageLinearAttention(c, heads=2, key_dim=8, value_dim=8,
                                          kernel_size=3, padding=1)),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(c, args.tokens))
        return None, net
    elif args.mode == "encdec":
        enc = LinearAttentionTransformerLM(**{**kw, "max_seq_len": args.seq // 2},
                                           shift_tokens=True, return_embeddings=True,
                                           reversible=args.reversible == "both")
        dec = LinearAttentionTransformerLM(**{**kw, "max_seq_len": args.seq + 2}, causal=True,
                                           shift_tokens=True, blindspot_size=2,
                                           receives_context=True,
                                           reversible=args.reversible is not None)
        return enc, AutoregressiveWrapper(dec)
    return None, AutoregressiveWrapper(LinearAttentionTransformerLM(**kw))


def batch(args):
    if args.mode == "encdec":   # the copy task: prefix, the source, the source again
        n = args.seq // 2
        src = torch.randint(2, args.tokens, (args.batch, n))
        tgt = torch.cat((torch.ones(args.batch, 1, dtype=torch.long), src, src), 1)
        return src, tgt, torch.ones(args.batch, n).bool(), \
            torch.ones(args.batch, tgt.shape[1] - 1).bool()
    if args.mode == "image":    # random images, random labels
        return torch.randn(args.batch, 3, args.seq, args.seq), \
            torch.randint(0, args.tokens, (args.batch,)), None, None
    # the enwik8 example samples a window of bytes; random tokens stand in
    return torch.randint(0, args.tokens, (args.batch, (args.len or args.seq) + 1)), None, \
        None, None


def loss_of(args, enc, model, data):
    x, tgt, src_mask, tgt_mask = data
    if args.mode == "image":
        return torch.nn.functional.cross_entropy(model(x), tgt)
    if enc is not None:
        context = enc(x, input_mask=src_mask)
        return model(tgt, context=context, input_mask=tgt_mask, context_mask=src_mask,
                     return_loss=True)
    return model(x, return_loss=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["lm", "rev", "pkm", "linformer", "encdec", "image"],
                    default="lm")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--len", type=int, default=0,
                    help="tokens per batch row, below --seq: `Autopadder` pads them to a "
                         "whole window and masks the padding (0: --seq)")
    ap.add_argument("--window", type=int, default=8, help="local attention window")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--reversible", nargs="?", const="both", choices=["both", "dec"],
                    help="encdec: reversible layers on both sides, as the README's example, "
                         "or on the decoder alone (its reversible backward runs a backward "
                         "into the encoder's output once per context layer)")
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
            if enc is not None:   # as the copy task's loop: `context` kept to the next step
                src, tgt, src_mask, tgt_mask = batch(args)
                context = enc(src, input_mask=src_mask)
                loss = model(tgt, context=context, input_mask=tgt_mask,
                             context_mask=src_mask, return_loss=True)
            else:
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
            x, _, src_mask, _ = batch(args)
            if enc is not None:
                context = enc(x[:1])
                sample = model.generate(torch.ones(1, 1, dtype=torch.long), args.seq // 2,
                                        context=context)
            else:
                sample = model.generate(x[0, :-1], 4)
            print("sample:", sample.tolist())


if __name__ == "__main__":
    main()
