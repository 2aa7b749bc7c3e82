"""A Recurrent Memory Transformer trained on long sequences, as recurrent-memory-transformer-pytorch
(lucidrains) writes it: a long token sequence split into segments of `seq_len`, memory
tokens written by one segment read by the next, backprop through time across segments.
Random tokens, seeded (torch, and Python's `random`: hyper-connections picks each layer's
initial residual stream by `randrange`). Tiny, nothing downloaded.

    python tests/clients/train_rmt.py --steps 3 --mode wrapper
    memledger trace tests/clients/train_rmt.py --steps 2 -o rmt.ledger -- --mode mrbp
    memledger compare tests/clients/train_rmt.py -p 'checkpoint:transformer.layers.*.*' --steps 2 -- --mode manual

Modes (`--mode`):

- `wrapper`: `RecurrentMemoryTransformerWrapper(model)(seq, return_loss=True)`, the wrapper
  running every segment with the memories carried (and `--truncate N`: detached every N
  segments), one `loss.backward()` over the whole sequence.
- `mrbp`: the repository's train.py: `model(seq, memory_replay_backprop=True,
  mrbp_loss_weight=1/accum)`: the wrapper runs the segments under no_grad, then walks them
  backwards re-running each with grad and calling `backward` twice per segment itself
  (`retain_graph=True` on the loss, then the memories' gradient); `--accum` micro-batches
  summed into `total_loss` (as train.py does, graphs and all), `clip_grad_norm_`, step.
- `manual`: the README's loop, `logits, mem, xl = model(segment, mem, xl_memories=xl)` per
  segment, a cross-entropy per segment summed, one backward.

Options: `--xl` (`use_xl_memories=True`, `xl_mem_len` half a segment; the manual loop
hands them on), `--rotary`, `--streams N`
(hyper-connection residual streams; 1: plain residuals), `--validate` (a validation loss
under no_grad each step, as train.py's).

`memory_not_causal=False` is not offered: in 0.7.0 it fails in the first forward (the
attention's causal mask is (n, n) while its keys carry a null key, n + 1).
"""

import argparse
import random

import torch
import torch.nn.functional as F

from recurrent_memory_transformer_pytorch import (
    RecurrentMemoryTransformer,
    RecurrentMemoryTransformerWrapper,
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="wrapper", choices=["wrapper", "mrbp", "manual"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--segments", type=int, default=3)
    p.add_argument("--memory", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--truncate", type=int, default=None)
    p.add_argument("--xl", action="store_true")
    p.add_argument("--rotary", action="store_true")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    random.seed(0)
    torch.manual_seed(0)

    num_tokens = 64
    model = RecurrentMemoryTransformer(
        num_tokens=num_tokens,
        num_memory_tokens=args.memory,
        dim=args.dim,
        depth=args.depth,
        dim_head=8,
        heads=2,
        seq_len=args.seq_len,
        causal=True,
        use_xl_memories=args.xl,
        xl_mem_len=args.seq_len // 2,
        rotary_pos_emb=args.rotary,
        abs_pos_emb=not args.rotary,
        num_residual_streams=args.streams,
    )
    wrapper = RecurrentMemoryTransformerWrapper(model, truncate_at_step=args.truncate)
    optim = torch.optim.Adam(wrapper.parameters(), lr=1e-4)
    length = args.seq_len * args.segments

    def batch() -> torch.Tensor:
        return torch.randint(0, num_tokens, (args.batch, length + 1))

    for step in range(args.steps):
        wrapper.train()
        if args.mode == "wrapper":
            loss, _ = wrapper(batch(), return_loss=True)
            loss.backward()
            total_loss = loss
        elif args.mode == "mrbp":
            total_loss = 0.
            for _ in range(args.accum):
                loss = wrapper(batch(), memory_replay_backprop=True,
                               mrbp_loss_weight=1. / args.accum)
                total_loss += loss
            torch.nn.utils.clip_grad_norm_(wrapper.parameters(), 0.5)
        else:
            seq = batch()
            inputs, labels = seq[:, :-1], seq[:, 1:]
            mem, xl = None, None
            total_loss = 0.
            for seg, lab in zip(inputs.split(args.seq_len, dim=-1),
                                labels.split(args.seq_len, dim=-1)):
                logits, mem, xl = model(seg, mem, xl_memories=xl)
                total_loss = total_loss + F.cross_entropy(logits.transpose(1, 2), lab)
            total_loss = total_loss / args.segments
            total_loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {total_loss.item():.4f}")

        if args.validate:
            wrapper.eval()
            with torch.no_grad():
                val, _ = wrapper(batch(), return_loss=True)
            print(f"validation loss {val.item():.4f}")


if __name__ == "__main__":
    main()
