"""FLASH (FLASH-pytorch, lucidrains) as its README writes it: gated attention units with
their own chunked linear attention (quadratic attention inside groups of `group_size`
tokens, a linear attention across groups: a cumulative sum of per-group key-value products
when causal), token shift, one rotary embedding every layer shares, ScaleNorm. Seeded,
tiny, nothing downloaded.

    python tests/clients/train_flash.py --steps 3
    memledger trace tests/clients/train_flash.py --steps 2 -o flash.ledger -- --mode gau
    memledger compare tests/clients/train_flash.py -p 'checkpoint:net.layers.*' -- --pad 3

Modes (`--mode`):

- `lm`: a `FLASHTransformer` language model (causal unless `--bidirectional`) trained
  through the library's `AutoregressiveWrapper` (next-token cross-entropy), Adam with
  clipping. `--group G` (`group_size`), `--pad P` (the sequence P tokens short of a whole
  number of groups: the library pads queries, keys and values), `--laplace`
  (`laplace_attn_fn`), `--layernorm` (`norm_type='layernorm'`), `--no-shift`
  (`shift_tokens=False`), `--per-group` (`reduce_group_non_causal_attn=False`),
  `--mask` (a key padding mask, bidirectional only), `--generate N` (sample N tokens each
  step with the wrapper's `generate`).
- `gau`: a stack of the README's standalone `GAU`s (quadratic attention, relative position
  bias) on random features, regression, AdamW.

Both: `--dropout P`, `--accum N`, `--amp` (bf16 autocast).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from flash_pytorch import FLASHTransformer, GAU
from flash_pytorch.autoregressive_wrapper import AutoregressiveWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="lm", choices=["lm", "gau"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--qk", type=int, default=8)            # query_key_dim
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--groups", type=int, default=3)        # sequence = groups x group - pad
    p.add_argument("--pad", type=int, default=0)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--bidirectional", action="store_true")
    p.add_argument("--laplace", action="store_true")
    p.add_argument("--layernorm", action="store_true")
    p.add_argument("--no-shift", action="store_true")
    p.add_argument("--per-group", action="store_true")
    p.add_argument("--mask", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    n = args.groups * args.group - args.pad
    if args.mode == "lm":
        net = FLASHTransformer(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                               group_size=args.group, query_key_dim=args.qk,
                               causal=not args.bidirectional, attn_dropout=args.dropout,
                               norm_type="layernorm" if args.layernorm else "scalenorm",
                               shift_tokens=not args.no_shift, laplace_attn_fn=args.laplace,
                               reduce_group_non_causal_attn=not args.per_group)
        model = AutoregressiveWrapper(net)
        optim = torch.optim.Adam(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            seq = torch.randint(0, num_tokens, (args.batch, n + 1))
            if args.mask:
                mask = torch.ones(args.batch, n, dtype=torch.bool)
                mask[0, n // 2:] = False
                return model(seq, mask=mask)
            return model(seq)
    else:
        model = nn.Sequential(*[GAU(dim=args.dim, query_key_dim=args.qk,
                                    causal=not args.bidirectional, dropout=args.dropout,
                                    laplace_attn_fn=args.laplace)
                                for _ in range(args.depth)])
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            x = torch.randn(args.batch, n, args.dim)
            return F.mse_loss(model(x), x.flip(1))

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of()
            (loss / args.accum if args.accum > 1 else loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.generate and args.mode == "lm":
            prime = torch.randint(0, num_tokens, (1, 4))
            print("sample", model.generate(prime, args.generate).tolist())


if __name__ == "__main__":
    main()
