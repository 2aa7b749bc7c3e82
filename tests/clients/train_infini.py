"""Infini-Transformer (infini-transformer-pytorch, lucidrains) as its README writes it: a causal
transformer whose attention layers each keep a compressive memory (`Memories(kv_mem, k_norm)`:
a (b, h, dk, dv) linear-attention matrix and its (b, h, dk) normaliser) that one segment writes
and the next reads, carried from segment to segment of a long sequence. Seeded, tiny, nothing
downloaded.

    python tests/clients/train_infini.py --steps 3
    memledger trace tests/clients/train_infini.py --steps 2 -o infini.ledger -- --mode wrapper
    memledger compare tests/clients/train_infini.py -p 'checkpoint:model.layers.*' -- --mode wrapper

Modes (`--mode`):

- `wrapper`: the README's `InfiniTransformerWrapper(model, segment_length, detach_mems_every_
  num_segments=K)` called with `backward=True`: it splits the sequence into `--segments`
  segments, runs them in turn with the memories carried, and calls `backward()` inside its
  forward on the running loss every K segments and at the last one, detaching the memories
  in place (`detach_()`) after each such pass: several backward passes per optimizer step.
  `--detach-every K` (default 2, the README's), so 3 segments make 2 passes; 1 makes one
  per segment; a K above the segment count makes one pass, the memories never detached.
- `loss`: the same wrapper called without `backward` (the whole sequence's loss returned,
  the memories never detached inside the step), one `loss.backward()` by the script.
- `carry`: the first README example as a training loop: the script calls the model on each
  segment with `past_memories=` the previous segment's and `return_new_memories=True`, and
  keeps the last segment's memories into the next optimizer step (the "cached memories
  passed between calls"). `--detach`: each segment has its own backward pass, the memories
  detached by the script (`.detach()`) after it; without it the script takes one backward
  over all segments and detaches the carried memories before the next step. (The model's
  own `detach_memories=True` fails in 0.2.1 with `return_new_memories=True`: it detaches
  the cached kvs, `None` there; and the wrapper's `detach_mems_every_num_segments=1`
  fails at the first segment: `detach_()` of a view, the first memory being an einsum's.)

All: `--delta` (`use_mem_delta_rule`), `--learned-delta` (`learned_delta_update`), `--accum N`
(`grad_accum_scale`, N calls per step), `--eval` (the README's eval loss under no_grad, each
step), `--generate N` (the wrapper's `generate`, N tokens, each step), `--clip`.
`--bug no-scale`: `--accum N` calls of the wrapper with `backward=True` and no
`grad_accum_scale` (each call's passes add its whole loss's gradient: N times the mean;
the doctor's `loss_not_divided`, Note [Passes that weigh whole means]).
"""

import argparse

import torch

from infini_transformer_pytorch import InfiniTransformer, InfiniTransformerWrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="wrapper", choices=["wrapper", "loss", "carry"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--segment", type=int, default=8)
    p.add_argument("--segments", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--detach-every", type=int, default=2)
    p.add_argument("--detach", action="store_true")
    p.add_argument("--delta", action="store_true")
    p.add_argument("--learned-delta", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--eval", action="store_true")
    p.add_argument("--generate", type=int, default=0)
    p.add_argument("--bug", default=None, choices=["no-scale"])
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 64
    model = InfiniTransformer(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                              dim_head=args.dim_head, heads=args.heads,
                              use_mem_delta_rule=args.delta,
                              learned_delta_update=args.learned_delta)
    wrapper = InfiniTransformerWrapper(model, segment_length=args.segment,
                                       detach_mems_every_num_segments=args.detach_every)
    optim = torch.optim.Adam(model.parameters(), lr=3e-4)
    seq_len = args.segment * args.segments

    def batch() -> torch.Tensor:
        return torch.randint(0, num_tokens, (args.batch, seq_len + 1))

    memories = None  # `carry`: the last segment's memories, kept into the next step
    for step in range(args.steps):
        wrapper.train()
        for _ in range(args.accum):
            if args.mode == "wrapper":
                scale = 1. if args.bug == "no-scale" else args.accum
                loss = wrapper(batch(), backward=True, grad_accum_scale=scale)
            elif args.mode == "loss":
                loss = wrapper(batch())
                (loss / args.accum).backward()
            else:
                seq = batch()
                inputs, labels = seq[:, :-1], seq[:, 1:]
                total = 0.
                for x, y in zip(inputs.split(args.segment, -1), labels.split(args.segment, -1)):
                    logits, _, memories = model(x, past_memories=memories,
                                                return_new_memories=True)
                    seg_loss = torch.nn.functional.cross_entropy(
                        logits.transpose(1, 2), y) / (args.segments * args.accum)
                    if args.detach:
                        seg_loss.backward()
                        memories = [type(m)(*(t.detach() for t in m)) for m in memories]
                    total = total + seg_loss
                if not args.detach:
                    total.backward()
                    memories = [type(m)(*(t.detach() for t in m)) for m in memories]
                loss = total
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {float(loss):.4f}")

        if args.eval:
            with torch.no_grad():
                wrapper.eval()
                print(f"eval loss {float(wrapper(batch())):.4f}")
        if args.generate:
            out = wrapper.generate(seq_len=args.generate + 1, prompt=batch()[:, :1])
            print("sample", out.shape)


if __name__ == "__main__":
    main()
