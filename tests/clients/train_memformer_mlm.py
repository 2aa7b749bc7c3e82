"""Memformer (memformer, lucidrains) and a masked-LM wrapper (mlm-pytorch, lucidrains) as
their READMEs train them. Seeded, tiny, nothing downloaded.

    python tests/clients/train_memformer_mlm.py --steps 3 --mode mrbp
    memledger trace tests/clients/train_memformer_mlm.py --steps 2 -o m.ledger -- --mode mlm
    memledger compare tests/clients/train_memformer_mlm.py -p 'checkpoint:encoder' -- --mode bptt

Modes (`--mode`):

- `mrbp`: `Memformer` (an encoder that reads `num_memory_slots` memory vectors by
  cross-attention, a memory updated by attention over memory and encoding, a GRU cell and a
  feed-forward; an autoregressive decoder on the last segment's encoding) trained by the
  library's `memory_replay_backprop`: the source split into segments of the encoder's
  `max_seq_len`, every segment but the last run under no_grad to collect the memories, then
  from the last segment back to the first each segment run again with grad, its loss and
  its next memory's gradient back-propagated (`retain_graph=True`) and its memory's
  gradient handed to the segment before. `--encoder-only` is refused by the library's
  function (it reads a decoder loss), so not offered there.
- `bptt`: the README's forward: `model(seg, tgt, mems=mems)` over the segments in one
  graph, the decoder's loss on the last, one backward. `--carry detach` keeps the last
  memory, cut from its graph, for the next micro-batch's first segment (truncated BPTT);
  `--carry keep` keeps it in its graph between the micro-batches of one step (`--accum`,
  each backward with `retain_graph=True`, so the next one reaches into the graph before)
  and cuts it at the optimizer step (the step changes the weights in place, and a
  backward into the graph before would fail).
- `mlm`: `MLM` (mask made in each call: 15 % of the non-pad tokens chosen by `torch.rand`
  and `topk`, 90 % of those replaced by the mask token, `--random-token P` of the tokens
  replaced by random ones) around x-transformers' `TransformerWrapper(Encoder)` as the
  mlm-pytorch README builds it, or around Memformer's encoder (`--body memformer`: a
  `TransformerWrapper` with logits and the memformer `Encoder`, no memory).

All: `--accum N`, `--validate` (a loss under no_grad in eval mode each step), `--sgd`.
"""

import argparse

import torch
import torch.nn as nn

from memformer import Memformer, memory_replay_backprop
from mlm_pytorch import MLM

NUM_TOKENS = 32


def memformer(args) -> Memformer:
    return Memformer(dim=args.dim, num_memory_slots=args.slots,
                     enc_num_tokens=NUM_TOKENS, enc_depth=args.depth, enc_heads=2,
                     enc_max_seq_len=args.seg,
                     dec_num_tokens=NUM_TOKENS, dec_depth=args.depth, dec_heads=2,
                     dec_max_seq_len=args.seg, mem_update_attn_heads=2,
                     num_mem_updates=args.updates)


def mlm_body(args) -> nn.Module:
    n = args.seg * args.segments
    if args.body == "memformer":
        from memformer.memformer import Encoder, TransformerWrapper
        return TransformerWrapper(num_tokens=NUM_TOKENS, max_seq_len=n, dim=args.dim,
                                  layer_blocks=Encoder(dim=args.dim, depth=args.depth,
                                                       heads=2))
    from x_transformers import Encoder, TransformerWrapper
    return TransformerWrapper(num_tokens=NUM_TOKENS, max_seq_len=n,
                              attn_layers=Encoder(dim=args.dim, depth=args.depth, heads=2))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="mrbp", choices=["mrbp", "bptt", "mlm"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=1)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--updates", type=int, default=1)
    p.add_argument("--seg", type=int, default=8)       # tokens a segment (max_seq_len)
    p.add_argument("--segments", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--mask", action="store_true")      # src/tgt masks with padding
    p.add_argument("--carry", default="none", choices=["none", "detach", "keep"])
    p.add_argument("--body", default="x", choices=["x", "memformer"])
    p.add_argument("--random-token", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    p.add_argument("--sgd", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    if args.mode == "mlm":
        model = MLM(mlm_body(args), mask_token_id=2, pad_token_id=0, mask_prob=0.15,
                    replace_prob=0.9, num_tokens=NUM_TOKENS,
                    random_token_prob=args.random_token, mask_ignore_token_ids=[1])
    else:
        model = memformer(args)
    optim = (torch.optim.SGD(model.parameters(), lr=1e-2) if args.sgd
             else torch.optim.Adam(model.parameters(), lr=1e-4))

    b, n = args.batch, args.seg * args.segments
    carried = None

    def batch():
        src = torch.randint(3, NUM_TOKENS, (b, n))
        tgt = torch.randint(3, NUM_TOKENS, (b, args.seg + 1))
        src_mask = tgt_mask = None
        if args.mask:
            src_mask = torch.ones(b, n, dtype=torch.bool)
            src_mask[0, -3:] = False
            tgt_mask = torch.ones(b, args.seg + 1, dtype=torch.bool)
            tgt_mask[1, -2:] = False
        return src, tgt, src_mask, tgt_mask

    def micro_step() -> float:
        nonlocal carried
        src, tgt, src_mask, tgt_mask = batch()
        if args.mode == "mlm":
            src[:, -2:] = 0                      # padding the mask never picks
            loss = model(src) / args.accum
            loss.backward()
            return loss.item()
        if args.mode == "mrbp":
            memory_replay_backprop(model, src=src, tgt=tgt, src_mask=src_mask,
                                   tgt_mask=tgt_mask)
            return 0.0
        mems = carried
        segs = src.split(args.seg, dim=1)
        masks = src_mask.split(args.seg, dim=1) if src_mask is not None else [None] * len(segs)
        for i, (seg, m) in enumerate(zip(segs, masks)):
            last = i == len(segs) - 1
            _, mems, dec = model(seg, tgt if last else None, mems=mems, src_mask=m,
                                 tgt_mask=tgt_mask if last else None)
        loss = dec / args.accum
        loss.backward(retain_graph=args.carry == "keep")
        if args.carry != "none":
            carried = mems.detach() if args.carry == "detach" else mems
        return loss.item()

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            micro_step()
        optim.step()
        optim.zero_grad(set_to_none=True)
        if carried is not None:
            carried = carried.detach()
        if args.validate:
            model.eval()
            with torch.no_grad():
                src, tgt, src_mask, tgt_mask = batch()
                if args.mode == "mlm":
                    model(src)
                else:
                    model(src[:, :args.seg], tgt, src_mask=None)


if __name__ == "__main__":
    main()
