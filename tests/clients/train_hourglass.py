"""An autoregressive Hourglass Transformer trained on random tokens, as
hourglass-transformer-pytorch (lucidrains) writes it: `HourglassTransformerLM` with a
nested depth `(pre, (pre, valley, post), post)` (the sequence shortened by
`shorten_factor` at each level), attention resampling at each down/up sample, the
library's `AutoregressiveWrapper` for the next-token cross-entropy, a plain Adam loop
(the repository's train.py, without enwik8). Seeded, tiny, nothing downloaded.

    python tests/clients/train_hourglass.py --steps 3
    memledger trace tests/clients/train_hourglass.py --steps 2 -o hg.ledger -- --updown linear
    memledger plan hg.ledger --budget 400KiB

Options: `--updown naive|linear` (`updown_sample_type`: average pool and repeat, or a
linear projection and reshape), `--no-resampling` (`attn_resampling=False`), `--flat`
(`depth=(2, 2, 2)`: one level, the valley a plain Transformer), `--shorten S`, `--accum N`
(gradient accumulation over N micro-batches, as train.py's GRADIENT_ACCUMULATE_EVERY),
`--validate` (a validation loss under no_grad each step, as train.py's).

The sequence length must be a multiple of the product of the shorten factors: 0.0.6's
`pad_to_multiple` calls `math.ceil` without importing `math`.
"""

import argparse

import torch

from hourglass_transformer_pytorch import HourglassTransformerLM
from hourglass_transformer_pytorch.autoregressive_wrapper import AutoregressiveWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--shorten", type=int, default=2)
    p.add_argument("--updown", default="naive", choices=["naive", "linear"])
    p.add_argument("--no-resampling", action="store_true")
    p.add_argument("--flat", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    model = HourglassTransformerLM(
        num_tokens=num_tokens,
        dim=args.dim,
        max_seq_len=args.seq_len,
        depth=(2, 2, 2) if args.flat else (2, (2, 2, 2), 2),
        shorten_factor=args.shorten,
        heads=2,
        dim_head=8,
        attn_resampling=not args.no_resampling,
        updown_sample_type=args.updown,
        causal=True,
    )
    model = AutoregressiveWrapper(model)
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)

    def batch() -> torch.Tensor:
        # token 0 is the wrapper's pad (`ignore_index=pad_value`): drawn, it would leave each
        # micro-batch a mean over another number of tokens (the doctor's token_denominator)
        return torch.randint(1, num_tokens, (args.batch, args.seq_len + 1))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = model(batch())
            (loss / args.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                val = model(batch())
            print(f"validation loss {val.item():.4f}")


if __name__ == "__main__":
    main()
