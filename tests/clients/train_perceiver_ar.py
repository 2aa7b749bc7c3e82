"""A Perceiver AR language model trained on random tokens, as perceiver-ar-pytorch
(lucidrains) writes it: `PerceiverAR` (a prefix the first layers cross-attend to, the rest
of the sequence self-attending causally, rotary embeddings), the library's
`AutoregressiveWrapper` for the next-token cross-entropy, a plain Adam loop with gradient
accumulation and clipping (the repository's train.py, without enwik8). Seeded, tiny,
nothing downloaded.

    python tests/clients/train_perceiver_ar.py --steps 3
    memledger trace tests/clients/train_perceiver_ar.py --steps 2 -o par.ledger -- --cross-dropout 0.5
    memledger predict par.ledger --policy 'checkpoint:net.layers.*'

Options: `--cross-dropout P` (`cross_attn_dropout`: in training, each row keeps a random
`1 - P` of the prefix, drawn with `uniform_` and `topk` and picked out with a boolean mask),
`--prefix-mask` (a `prefix_mask` over the prefix, its last quarter masked out),
`--perceive-depth N` (cross-attending layers), `--dropout P` (attention and feed-forward
dropout), `--accum N` (micro-batches per step, as train.py's GRADIENT_ACCUMULATE_EVERY),
`--validate` (a validation loss under no_grad each step), `--generate N` (sample N tokens
each step with the wrapper's `generate`, as train.py does every GENERATE_EVERY).
"""

import argparse

import torch

from perceiver_ar_pytorch import PerceiverAR
from perceiver_ar_pytorch.autoregressive_wrapper import AutoregressiveWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=24)
    p.add_argument("--prefix", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--perceive-depth", type=int, default=1)
    p.add_argument("--cross-dropout", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--prefix-mask", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    model = PerceiverAR(
        num_tokens=num_tokens,
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        dim_head=32,   # the rotary embedding turns max(32, dim_head // 2) features
        max_seq_len=args.seq_len,
        cross_attn_seq_len=args.prefix,
        cross_attn_dropout=args.cross_dropout,
        dropout=args.dropout,
        perceive_depth=args.perceive_depth,
    )
    model = AutoregressiveWrapper(model)
    optim = torch.optim.Adam(model.parameters(), lr=2e-4)

    def batch() -> torch.Tensor:
        # token 0 is the loss's `ignore_index`: drawn, each micro-batch would average over
        # another number of tokens
        return torch.randint(1, num_tokens, (args.batch, args.seq_len + 1))

    def mask() -> torch.Tensor | None:
        if not args.prefix_mask:
            return None
        m = torch.ones(args.batch, args.prefix, dtype=torch.bool)
        m[:, args.prefix * 3 // 4:] = False
        return m

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = model(batch(), prefix_mask=mask())
            (loss / args.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                val = model(batch(), prefix_mask=mask())
            print(f"validation loss {val.item():.4f}")

        if args.generate:
            prime = batch()[:1, :args.prefix + 1]
            sample = model.generate(prime, args.generate)
            print(f"generated {sample.tolist()}")


if __name__ == "__main__":
    main()
