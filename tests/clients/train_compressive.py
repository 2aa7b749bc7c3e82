"""Compressive Transformer (compressive-transformer-pytorch, lucidrains) as its README writes
it: a Transformer-XL-like LM whose attention layers keep a memory of past segments' inputs
and a compressed memory (the memory that falls out of the queue, compressed by a strided
`Conv1d`), each layer wrapped in a GRU-gated residual (`nn.GRUCell`, optionally
`mogrify_gru`: a `Mogrifier` from the mogrifier package), with the auxiliary reconstruction
loss (full attention over the old memory against the compressed one, on the to_kv weight
detached in place). Seeded, tiny, nothing downloaded.

    python tests/clients/train_compressive.py --steps 3
    memledger trace tests/clients/train_compressive.py --steps 2 -o ct.ledger -- --segments 3

The loop (`--loop`):

- `wrapper`: the library's `AutoregressiveWrapper(return_loss=True)`, a generator of one
  (loss, aux_loss, is_last) per segment (and per `--max-batch` slice of the batch), the
  memories carried between segments inside it; `(loss + aux_loss).backward()` each, the
  optimizer stepped at each `is_last`, as its enwik8 train.py does (`--step-each`: after
  every segment instead).
- `hand`: the bare `CompressiveTransformer`, one segment a step, the detached memories it
  returns handed to the next step's forward (a long stream read one segment at a time).

Options: `--segments N` (a sequence of N segments each step), `--max-batch B` (the
wrapper's batch slices), `--mask` (an input mask), `--no-gru` (plain `Residual`),
`--mogrify`, `--glu` (`ff_glu`), `--memory-layers 2,...` (`memory_layers`), `--emb-dim E`
(`emb_dim` != dim: projections in and out), `--no-enhanced` (`enhanced_recurrence=False`),
`--validate` (a wrapper loss under no_grad in eval mode each step), `--generate N`
(sample N tokens with the wrapper's `generate`), `--amp` (bf16 autocast), `--aux-weight W`.
"""

import argparse

import torch

from compressive_transformer_pytorch import AutoregressiveWrapper, CompressiveTransformer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--loop", default="wrapper", choices=["wrapper", "hand"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--mem-len", type=int, default=8)
    p.add_argument("--cmem-len", type=int, default=4)
    p.add_argument("--cmem-ratio", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--segments", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=None)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--no-gru", action="store_true")
    p.add_argument("--mogrify", action="store_true")
    p.add_argument("--glu", action="store_true")
    p.add_argument("--memory-layers", default=None)
    p.add_argument("--emb-dim", type=int, default=None)
    p.add_argument("--no-enhanced", action="store_true")
    p.add_argument("--step-each", action="store_true")
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--aux-weight", type=float, default=1.0)
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    layers = [int(i) for i in args.memory_layers.split(",")] if args.memory_layers else None
    net = CompressiveTransformer(
        num_tokens=num_tokens, dim=args.dim, depth=args.depth, heads=args.heads,
        seq_len=args.seq_len, mem_len=args.mem_len, cmem_len=args.cmem_len,
        cmem_ratio=args.cmem_ratio, emb_dim=args.emb_dim, memory_layers=layers,
        enhanced_recurrence=not args.no_enhanced, gru_gated_residual=not args.no_gru,
        mogrify_gru=args.mogrify, ff_glu=args.glu,
        reconstruction_loss_weight=args.aux_weight)
    model = AutoregressiveWrapper(net)
    optim = torch.optim.Adam(model.parameters(), lr=1e-4)
    amp = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp)  # noqa: E731

    def batch() -> tuple[torch.Tensor, torch.Tensor | None]:
        x = torch.randint(0, num_tokens, (args.batch, args.segments * args.seq_len + 1))
        mask = torch.ones_like(x).bool() if args.mask else None
        return x, mask

    memories = None
    for step in range(args.steps):
        model.train()
        if args.loop == "wrapper":
            x, mask = batch()
            for loss, aux_loss, is_last in model(x, max_batch_size=args.max_batch,
                                                 return_loss=True, mask=mask):
                with amp():
                    total = loss + aux_loss
                total.backward()
                if is_last or args.step_each:
                    optim.step()
                    optim.zero_grad()
        else:
            x = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
            with amp():
                logits, memories, aux_loss = net(x[:, :-1], memories=memories)
                loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:])
            (loss + aux_loss).backward()
            optim.step()
            optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}  aux {aux_loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                x, mask = batch()
                losses = [lo.item() for lo, _, _ in model(x, return_loss=True, mask=mask)]
                print(f"validation loss {sum(losses) / len(losses):.4f}")
        if args.generate:
            prime = torch.randint(0, num_tokens, (1, args.seq_len))
            print("sample", model.generate(prime, args.generate).tolist())


if __name__ == "__main__":
    main()
