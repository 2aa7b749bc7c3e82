"""local-attention 1.11.2 (lucidrains): `LocalTransformer` as its README trains it (token
and position embeddings, layers of `LocalMHA` (pre-norm, qkv, `LocalAttention` over
windows with look-back / look-forward, rotary or xpos) and a GEGLU feed-forward, under
hyper-connections' residual streams), and a bidirectional `LocalAttention` stack of the
script's own; random tokens, tiny, seeded, CPU.

    memledger trace tests/clients/train_local_attn.py --steps 2 -o la.ledger
    memledger compare tests/clients/train_local_attn.py -p 'checkpoint:layers.*' -- --xpos

`--model lm` (LocalTransformer, causal, `return_loss=True`): `--xpos`, `--dpb` (dynamic
position bias instead of rotary), `--streams N` (residual streams, 1 = plain residual).
`--model bidir`: LocalAttention(causal=False, look_backward=1, look_forward=1, autopad)
blocks on a classification head. `--accum N`, `--clip X`, `--optim adam|sgd`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from local_attention import LocalAttention, LocalTransformer


class BidirBlock(nn.Module):
    def __init__(self, dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attn = LocalAttention(window_size=window, causal=False, look_backward=1,
                                   look_forward=1, autopad=True, dim=dim // heads)
        self.out = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(),
                                nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        o = self.attn(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.out(o)
        return x + self.ff(x)


class BidirNet(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, heads: int, window: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(BidirBlock(dim, heads, window) for _ in range(depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens)
        for blk in self.layers:
            x = blk(x)
        return self.head(x.mean(1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--model", default="lm", choices=["lm", "bidir"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--seq", type=int, default=30)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--xpos", action="store_true")
    p.add_argument("--dpb", action="store_true")
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--optim", default="adam", choices=["adam", "sgd"])
    args = p.parse_args()
    torch.manual_seed(0)

    if args.model == "lm":
        model = LocalTransformer(num_tokens=args.vocab, max_seq_len=args.seq + 1, dim=args.dim,
                                 depth=args.depth, causal=True,
                                 local_attn_window_size=args.window, dim_head=args.dim // 2,
                                 heads=args.heads, use_xpos=args.xpos,
                                 use_dynamic_pos_bias=args.dpb,
                                 num_residual_streams=args.streams)
    else:
        model = BidirNet(args.vocab, args.dim, args.depth, args.heads, args.window)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3) if args.optim == "adam" else \
        torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)

    for step in range(args.steps):
        for _ in range(args.accum):
            if args.model == "lm":
                loss = model(torch.randint(0, args.vocab, (args.batch, args.seq + 1)),
                             return_loss=True)
            else:
                tokens = torch.randint(0, args.vocab, (args.batch, args.seq))
                loss = F.cross_entropy(model(tokens), torch.randint(0, 4, (args.batch,)))
            (loss / args.accum).backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
