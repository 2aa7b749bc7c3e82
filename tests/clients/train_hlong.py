"""h-transformer-1d and long-short-transformer (lucidrains) as their READMEs write them:
small causal language models trained through each library's `AutoregressiveWrapper`
(next-token cross-entropy), Adam. Seeded, tiny, nothing downloaded.

    python tests/clients/train_hlong.py --steps 3 --lib h
    memledger trace tests/clients/train_hlong.py --steps 2 -o h.ledger -- --lib h --reversible
    memledger compare tests/clients/train_hlong.py -p 'checkpoint:net.layers.*' -- --lib ls

Libraries (`--lib`):

- `h`: `HTransformer1D` (hierarchical attention: queries, keys and values coarsened by
  averaging blocks level by level, each level's block-diagonal attention interpolated back
  up and summed), one `RotaryEmbedding` shared by every layer's attention. `--causal`
  (`CausalHAttention1D`), `--reversible` (the layers in a `ReversibleSequence`: a custom
  autograd Function that keeps no activations and recomputes each block in its backward,
  the RNG state recorded in the forward), `--shift` (`shift_tokens`).
- `ls`: `LongShortTransformer` (windowed local attention plus a low-rank global one through
  a dynamic projection; causal by segments). `--bidirectional` (`causal=False`).

Both: `--mask` (a padding mask), `--validate` (a loss under no_grad in eval mode each step),
`--generate N` (sample N tokens each step with the wrapper's `generate`).
"""

import argparse

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lib", default="h", choices=["h", "ls"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--reversible", action="store_true")
    p.add_argument("--shift", action="store_true")
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    if args.lib == "h":
        from h_transformer_1d import HTransformer1D
        from h_transformer_1d.autoregressive_wrapper import AutoregressiveWrapper
        net = HTransformer1D(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                             max_seq_len=args.seq_len, heads=2, dim_head=8, block_size=8,
                             causal=args.causal, reversible=args.reversible,
                             shift_tokens=args.shift)
    else:
        import long_short_transformer.long_short_transformer as lst
        from long_short_transformer.autoregressive_wrapper import AutoregressiveWrapper
        from rotary_embedding_torch import RotaryEmbedding

        class Rotary(RotaryEmbedding):
            # long-short-transformer 0.0.5 passes `cache_key`, which the installed
            # rotary-embedding-torch (0.9) no longer takes: what a user would write
            def forward(self, t, cache_key=None, **kwargs):
                return super().forward(t, **kwargs)

        lst.RotaryEmbedding = Rotary
        LongShortTransformer = lst.LongShortTransformer
        net = LongShortTransformer(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                                   max_seq_len=args.seq_len, heads=2, dim_head=8,
                                   window_size=8, causal=not args.bidirectional,
                                   segment_size=4 if not args.bidirectional else None,
                                   r=1 if not args.bidirectional else 4)
    model = AutoregressiveWrapper(net)
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loss_of() -> torch.Tensor:
        x = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
        if not args.mask:
            return model(x)
        mask = torch.ones(args.batch, args.seq_len, dtype=torch.bool)
        mask[0, -5:] = False
        return model(x, mask=mask)

    for step in range(args.steps):
        model.train()
        loss = loss_of()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")
        if args.generate:
            prime = torch.randint(0, num_tokens, (1, args.seq_len // 2))
            print("sample", model.generate(prime, args.generate).tolist())


if __name__ == "__main__":
    main()
