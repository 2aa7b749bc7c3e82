"""Feedback Transformer (feedback-transformer-pytorch, lucidrains) as its README writes it:
a causal LM run window by window (`seq_len` tokens at a time) in a Python loop, each window
attending to a FIFO memory of keys / values made from a learned softmax-weighted sum of all
layers' outputs (`layer_weight`), through one key/value projection every layer shares
(`shared_kv_proj`: one `nn.Linear` registered under each layer's attention and at the top).
Seeded, tiny, nothing downloaded.

    python tests/clients/train_feedback.py --steps 3
    memledger trace tests/clients/train_feedback.py --steps 2 -o fb.ledger -- --window 1
    memledger compare tests/clients/train_feedback.py -p 'checkpoint:layers.*.1' -- --carry

Options: `--window W` (`seq_len`: tokens per window; 1 wraps every attention in the
library's `SkipIf`, skipped while the memory is empty), `--mem-len M` (`mem_len`: the FIFO's
length), `--keep-last` (`keep_last_hidden`: memory from the last layer only), `--carry`
(`return_memory=True`, the memory handed to the next step detached, as a Transformer-XL
style loop does), `--dropout P` (attention and feed-forward dropout), `--accum N`
(gradient accumulation), `--amp` (bf16 autocast), `--validate` (a loss under no_grad in
eval mode each step).
"""

import argparse

import torch
import torch.nn.functional as F

from feedback_transformer_pytorch import FeedbackTransformer
from feedback_transformer_pytorch.feedback_transformer_pytorch import Memory


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--length", type=int, default=8)      # tokens per sample
    p.add_argument("--window", type=int, default=2)
    p.add_argument("--mem-len", type=int, default=6)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--keep-last", action="store_true")
    p.add_argument("--carry", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    num_tokens = 32
    model = FeedbackTransformer(num_tokens=num_tokens, dim=args.dim, depth=args.depth,
                                seq_len=args.window, mem_len=args.mem_len,
                                heads=args.heads, dim_head=args.dim_head,
                                attn_dropout=args.dropout, ff_dropout=args.dropout,
                                keep_last_hidden=args.keep_last)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    memory = None

    def loss_of(mem):
        seq = torch.randint(0, num_tokens, (args.batch, args.length + 1))
        inp, target = seq[:, :-1], seq[:, 1:]
        logits, new_mem = model(inp, memory=mem, return_memory=True)
        loss = F.cross_entropy(logits.reshape(-1, num_tokens), target.reshape(-1))
        return loss, new_mem

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss, new_mem = loss_of(memory)
            (loss / args.accum if args.accum > 1 else loss).backward()
            if args.carry:
                # the memory goes on to the next step, its graph cut (the step before's
                # backward freed it)
                memory = Memory(new_mem.keys.detach(), new_mem.values.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")

        if args.validate:
            model.eval()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                 enabled=args.amp):
                print(f"validation loss {loss_of(memory)[0].item():.4f}")


if __name__ == "__main__":
    main()
