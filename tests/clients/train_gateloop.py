"""GateLoop (lucidrains' gateloop-transformer) as its README and train.py train it: a tiny
`Transformer` whose token mixers are `GateLoopedAttention` layers (a data-controlled,
complex-valued linear recurrence run as an associative scan, by default inside the
library's own `torch.utils.checkpoint`), `model(seq, return_loss=True)`, Adam, gradient
accumulation (`(loss / accum).backward()`), `clip_grad_norm_`, `optim.step()` then
`optim.zero_grad()`. Seeded, tiny, nothing downloaded.

    python tests/clients/train_gateloop.py --steps 3
    memledger trace tests/clients/train_gateloop.py --steps 2 -o gateloop.ledger
    memledger compare tests/clients/train_gateloop.py --steps 2 -p 'checkpoint:layers.*'

Modes (`--mode`):

- `lm`: `Transformer(use_gate_looped_attn=True)`; `--no-lib-checkpoint` turns the library's
  own checkpoint of the scan off (`checkpoint_gate_looped_attn=False`), `--full-attn` uses
  its `CausalFullAttention` with `data_dependent_rel_pos` instead (complex cumprod).
- `simple`: `SimpleGateLoopLayer`s (the simplified, real-valued gate loop, its scan a
  TorchScript binary operator; `--heinsen` the log-space scan) between an embedding and a
  head, regressed onto the next token as README's second example suggests.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from gateloop_transformer import SimpleGateLoopLayer, Transformer


class SimpleLM(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, heinsen: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(SimpleGateLoopLayer(dim, use_heinsen=heinsen)
                                    for _ in range(depth))
        self.head = nn.Linear(dim, vocab)

    def forward(self, seq: torch.Tensor) -> torch.Tensor:
        x, labels = seq[:, :-1], seq[:, 1:]
        x = self.emb(x)
        for layer in self.layers:
            x = layer(x) + x
        return F.cross_entropy(self.head(x).transpose(1, 2), labels)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="lm", choices=["lm", "simple"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=4, help="gate loop heads")
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--accum", type=int, default=1, help="GRAD_ACCUM_EVERY")
    p.add_argument("--no-lib-checkpoint", action="store_true")
    p.add_argument("--full-attn", action="store_true")
    p.add_argument("--heinsen", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.mode == "lm":
        model = Transformer(num_tokens=args.vocab, dim=args.dim, depth=args.depth,
                            dim_head=8, heads=2, ff_mult=2, gate_loop_heads=args.heads,
                            use_gate_looped_attn=not args.full_attn,
                            data_dependent_rel_pos=args.full_attn,
                            checkpoint_gate_looped_attn=not args.no_lib_checkpoint)
    else:
        model = SimpleLM(args.vocab, args.dim, args.depth, args.heinsen)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            seq = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=gen)
            if args.mode == "lm":
                loss = model(seq, return_loss=True)
            else:
                loss = model(seq)
            (loss / args.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
