"""Memory Transformer-XL (memory-transformer-xl 0.1.0, lucidrains) as its README and its
enwik8 example use it: a Transformer-XL-like LM that reads a long sequence one segment at a
time, carrying a short-term memory (the previous segment's hidden states of the
`memory_layers`, detached) and a long-term memory that a memory-attention network (linear
attention then an nBRC gate, `mem_write_iters` times) writes from them, backpropagated
through time unless truncated. Each layer behind an nBRC-gated residual (or `Residual`).
Seeded, tiny, nothing downloaded.

    python tests/clients/train_memxl.py --steps 3
    memledger trace tests/clients/train_memxl.py --steps 2 -o mx.ledger -- --segments 3

The loop (`--loop`):

- `wrapper`: the library's `AutoregressiveWrapper(return_loss=True)`, a generator of one
  (loss, is_last) per segment and per `--max-batch` slice of the batch, the memories
  carried between segments inside it; `(loss / slices).backward()` each, clipped and
  stepped at each `is_last` (each segment's last slice), as the enwik8 example does: the
  next segment's backward runs through the memory network's graph of the segment before,
  made with the weights before that step (`--truncate N`: the wrapper's `truncate_every`,
  the long-term memory detached every N segments; without it, 3 segments or more fail in
  the library: the third segment's backward runs through the first's graph again).
- `hand`: the bare `MemoryTransformerXL`, `--segments` calls a step, the memories it
  returns handed to the next call and on to the next step (truncated backprop: the
  long-term memory detached at each step's start with `--detach step`, at every call with
  `--detach each`).

Options: `--memory-layers 2,...`, `--no-gru` (plain `Residual`), `--mogrify`, `--glu`,
`--one-kv-head`, `--mem-kv N` (`num_mem_kv`), `--write-iters N` (`mem_write_iters`),
`--emb-dim E`, `--mask`, `--accum N` (an update every N segments with the wrapper, every
N batches by hand, the gradients accumulated), `--clip`
(clip_grad_norm_), `--optim adam|sgd|adamw`, `--validate` (a wrapper pass under no_grad in
eval mode each step), `--generate N` (the wrapper's `generate`, N tokens after each step),
`--bug no-zero-grad` (the gradients never zeroed), `--bug no-detach` (by hand: the long-term
memory carried into the next step undetached, every earlier step's graph kept and
backpropagated again).
"""

import argparse

import torch

from memory_transformer_xl import MemoryTransformerXL
from memory_transformer_xl.autoregressive_wrapper import AutoregressiveWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--loop", default="wrapper", choices=["wrapper", "hand"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--mem-len", type=int, default=8)
    p.add_argument("--lmem-len", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--segments", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=None)
    p.add_argument("--truncate", type=int, default=None)
    p.add_argument("--detach", default="step", choices=["step", "each"])
    p.add_argument("--memory-layers", default=None)
    p.add_argument("--no-gru", action="store_true")
    p.add_argument("--mogrify", action="store_true")
    p.add_argument("--glu", action="store_true")
    p.add_argument("--one-kv-head", action="store_true")
    p.add_argument("--mem-kv", type=int, default=0)
    p.add_argument("--write-iters", type=int, default=2)
    p.add_argument("--emb-dim", type=int, default=None)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--optim", default="adam", choices=["adam", "sgd", "adamw"])
    p.add_argument("--validate", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--bug", default=None, choices=["no-zero-grad", "no-detach"])
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    layers = [int(i) for i in args.memory_layers.split(",")] if args.memory_layers else None
    net = MemoryTransformerXL(
        num_tokens=num_tokens, dim=args.dim, depth=args.depth, heads=args.heads,
        seq_len=args.seq_len, mem_len=args.mem_len, lmem_len=args.lmem_len,
        memory_layers=layers, emb_dim=args.emb_dim, gru_gated_residual=not args.no_gru,
        mogrify_gru=args.mogrify, ff_glu=args.glu, one_kv_head=args.one_kv_head,
        num_mem_kv=args.mem_kv, mem_write_iters=args.write_iters)
    model = AutoregressiveWrapper(net)
    params = model.parameters()
    optim = {"adam": lambda: torch.optim.Adam(params, lr=1e-4),
             "adamw": lambda: torch.optim.AdamW(params, lr=1e-4),
             "sgd": lambda: torch.optim.SGD(params, lr=1e-2, momentum=0.9)}[args.optim]()

    def batch(length: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = torch.randint(0, num_tokens, (args.batch, length))
        mask = torch.ones_like(x).bool() if args.mask else None
        return x, mask

    def update() -> None:
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        if args.bug != "no-zero-grad":
            optim.zero_grad()

    memories, lasts = None, 0
    for step in range(args.steps):
        model.train()
        if args.loop == "wrapper":
            # the enwik8 example: one backward per segment and batch slice, an update at
            # each segment's last slice (every `--accum` of them)
            x, mask = batch(args.segments * args.seq_len + 1)
            slices = -(-args.batch // (args.max_batch or args.batch))
            for loss, is_last in model(x, max_batch_size=args.max_batch, return_loss=True,
                                       truncate_every=args.truncate, mask=mask):
                (loss / slices / args.accum).backward()
                lasts += is_last
                if is_last and lasts % args.accum == 0:
                    update()
        else:
            for _ in range(args.accum):
                x, mask = batch(args.segments * args.seq_len + 1)
                if memories is not None and args.bug != "no-detach":
                    memories = memories._replace(long=memories.long.detach())
                for i in range(args.segments):
                    seg = slice(i * args.seq_len, (i + 1) * args.seq_len)
                    xi, xo = x[:, seg], x[:, i * args.seq_len + 1:(i + 1) * args.seq_len + 1]
                    logits, memories = net(xi, memories=memories,
                                           mask=None if mask is None else mask[:, seg],
                                           detach_lmem=args.detach == "each")
                    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), xo)
                    (loss / args.segments / args.accum).backward(
                        retain_graph=args.detach != "each")
            update()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad():
                x, mask = batch(args.segments * args.seq_len + 1)
                losses = [lo.item() for lo, _ in model(x, return_loss=True, mask=mask)]
                print(f"validation loss {sum(losses) / len(losses):.4f}")
        if args.generate:
            prime = torch.randint(0, num_tokens, (args.seq_len,))
            print("sample", model.generate(prime, args.generate).tolist())


if __name__ == "__main__":
    main()
