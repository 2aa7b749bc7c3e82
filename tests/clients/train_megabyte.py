"""MEGABYTE (MEGABYTE-pytorch) as its README trains it: a tiny two-stage `MEGABYTE` (a global
transformer over patches, a local one over the bytes of each patch) on random byte sequences,
`return_loss=True`, a plain Adam loop. Seeded, tiny, nothing downloaded.

    python tests/clients/train_megabyte.py --steps 3
    memledger trace tests/clients/train_megabyte.py --steps 2 -o megabyte.ledger
    memledger compare tests/clients/train_megabyte.py --steps 2 \
        -p 'checkpoint:transformers.*.layers.*'

`--seq` (batch, patches, bytes per patch) ids, as the README passes them (or a flat
`(batch, patches * bytes)` sequence with `--flat`, which MEGABYTE pads and reshapes itself).
"""

import argparse

import torch

from MEGABYTE_pytorch import MEGABYTE


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, nargs=2, default=[64, 32])
    p.add_argument("--depth", type=int, nargs=2, default=[2, 2])
    p.add_argument("--patches", type=int, default=16)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=16)
    p.add_argument("--flat", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--rel-pos", action="store_true")
    p.add_argument("--pos-emb", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(0)
    model = MEGABYTE(num_tokens=256, dim=tuple(args.dim), depth=tuple(args.depth),
                     max_seq_len=(args.patches, args.patch), dim_head=args.dim_head,
                     heads=args.heads, attn_dropout=args.dropout, ff_dropout=args.dropout,
                     rel_pos=args.rel_pos, pos_emb=args.pos_emb, flash_attn=False)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(0)
    shape = ((args.batch, args.patches * args.patch) if args.flat
             else (args.batch, args.patches, args.patch))
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = model(torch.randint(0, 256, shape, generator=gen), return_loss=True)
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                val = model(torch.randint(0, 256, shape, generator=gen), return_loss=True)
            print(f"  val {val.item():.4f}")
        if args.generate:
            model.eval()
            prime = torch.randint(0, 256, (1, args.generate), generator=gen)
            sample = model.generate(prime)
            print(f"  sample {tuple(sample.shape)}")


if __name__ == "__main__":
    main()
