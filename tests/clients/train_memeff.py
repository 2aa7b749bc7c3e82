"""memory-efficient-attention-pytorch (lucidrains) as its README and train.py use it:
attention computed in (q, k) chunks, each chunk's summary run under torch's own
`torch.utils.checkpoint.checkpoint` (the library calls it per chunk, reentrant: it passes
no `use_reentrant`), and its plain-PyTorch flash attention (an `autograd.Function` whose
backward recomputes the chunks). Seeded, tiny, nothing downloaded.

    python tests/clients/train_memeff.py --steps 3 --mode stack
    memledger trace tests/clients/train_memeff.py --steps 2 -o me.ledger -- --mode stack
    memledger compare tests/clients/train_memeff.py -p 'checkpoint:blocks.*' -- --mode stack

Modes (`--mode`):

- `stack`: a small causal LM of our own: token + position embeddings, `--depth` pre-norm
  residual blocks (`blocks.N.attn`: the library's `Attention(memory_efficient=True)`, its
  `CosineSimAttention` with `--attn cosine`, its `FlashAttention` with `--attn flash`;
  `blocks.N.ff`: Linear-GELU-Linear), a LayerNorm and a head; next-token cross-entropy,
  AdamW. A memledger policy on `blocks.*` wraps the library's own per-chunk checkpoints.
- `lm`: the library's `Transformer` (reversible: `ReversibleSequence` of
  `PreNorm(attention)` / `PreNorm(FeedForward)`, chunked feed-forward) under its
  `AutoregressiveWrapper`, as its train.py builds it; `--attn flash` (its default,
  `use_flash_attn=True`) or `--attn memeff` (`Attention(memory_efficient=True)`, whose
  chunk checkpoints then run inside the reversible backward). Adam, clipping.

Options: `--q-bucket` / `--k-bucket` (chunk sizes), `--mask` (a key padding mask),
`--bias` (an `attn_bias` of learned relative-position logits, `stack` only), `--dropout P`
(attention dropout inside the checkpointed chunk, `--attn memeff` only), `--no-causal`,
`--accum N`, `--validate` (a loss under no_grad in eval mode each step: the library then
skips its checkpoints).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from memory_efficient_attention_pytorch import Attention, CosineSimAttention, FlashAttention
from memory_efficient_attention_pytorch.autoregressive_wrapper import AutoregressiveWrapper
from memory_efficient_attention_pytorch.transformer import Transformer


class Block(nn.Module):
    def __init__(self, attn: nn.Module, dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attn
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, mask=None, attn_bias=None):
        kw = {"mask": mask}
        if attn_bias is not None:
            kw["attn_bias"] = attn_bias
        x = x + self.attn(self.norm1(x), **kw)
        return x + self.ff(self.norm2(x))


class StackLM(nn.Module):
    def __init__(self, args, num_tokens: int):
        super().__init__()
        d, n = args.dim, args.seq_len
        self.tok = nn.Embedding(num_tokens, d)
        self.pos = nn.Embedding(n, d)
        common = dict(dim=d, heads=args.heads, dim_head=args.dim_head,
                      causal=not args.no_causal, q_bucket_size=args.q_bucket,
                      k_bucket_size=args.k_bucket)

        def attn() -> nn.Module:
            if args.attn == "flash":
                return FlashAttention(**common)
            if args.attn == "cosine":
                return CosineSimAttention(seq_len=n, memory_efficient=True, **common)
            return Attention(memory_efficient=True, dropout=args.dropout, **common)

        self.blocks = nn.ModuleList(Block(attn(), d) for _ in range(args.depth))
        # relative-position logits per head, handed to every block as attn_bias
        self.rel = nn.Parameter(torch.zeros(args.heads, 2 * n - 1)) if args.bias else None
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_tokens)

    def forward(self, x, mask=None):
        n = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(n))
        bias = None
        if self.rel is not None:
            idx = torch.arange(n)[:, None] - torch.arange(n)[None, :] + n - 1  # (n, n)
            bias = self.rel[:, idx]                                           # (h, n, n)
        for block in self.blocks:
            h = block(h, mask=mask, attn_bias=bias)
        return self.head(self.norm(h))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="stack", choices=["stack", "lm"])
    p.add_argument("--attn", default="memeff", choices=["memeff", "cosine", "flash"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim-head", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--q-bucket", type=int, default=8)
    p.add_argument("--k-bucket", type=int, default=8)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--mask", action="store_true")
    p.add_argument("--bias", action="store_true")
    p.add_argument("--no-causal", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    num_tokens = 32

    if args.mode == "lm":
        net = Transformer(num_tokens=num_tokens, dim=args.dim, max_seq_len=args.seq_len,
                          depth=args.depth, heads=args.heads, dim_head=args.dim_head,
                          causal=not args.no_causal, q_bucket_size=args.q_bucket,
                          k_bucket_size=args.k_bucket, ff_chunks=2,
                          use_flash_attn=args.attn == "flash")
        model = AutoregressiveWrapper(net)
        optim = torch.optim.Adam(model.parameters(), lr=1e-4)

        def loss_of() -> torch.Tensor:
            return model(torch.randint(0, num_tokens, (args.batch, args.seq_len + 1)))
    else:
        model = StackLM(args, num_tokens)
        optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def loss_of() -> torch.Tensor:
            seq = torch.randint(0, num_tokens, (args.batch, args.seq_len + 1))
            mask = None
            if args.mask:   # the last quarter of the second sequence is padding
                mask = torch.ones(args.batch, args.seq_len, dtype=torch.bool)
                mask[-1, -(args.seq_len // 4):] = False
            logits = model(seq[:, :-1], mask=mask)
            return F.cross_entropy(logits.transpose(1, 2), seq[:, 1:])

    for step in range(args.steps):
        model.train()
        for _ in range(args.accum):
            loss = loss_of()
            (loss / args.accum).backward()
        if args.mode == "lm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.validate:
            model.eval()
            with torch.no_grad():
                print(f"validation loss {loss_of().item():.4f}")


if __name__ == "__main__":
    main()
