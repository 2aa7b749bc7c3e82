"""A two-block GPT whose blocks end in dropout, trained with AdamW on random tokens.

    python tests/clients/train_dropout_gpt.py --steps 5
    memledger trace tests/clients/train_dropout_gpt.py --steps 2 -o drop.ledger
    memledger predict drop.ledger --policy 'checkpoint:blocks.*' --policy 'offload:blocks.*'

On CPU `nn.Dropout` is `input * mask`: the multiply saves the mask before it runs, so it is
a region's last saved tensor and the last op of the block. The peak is in the forward
(the logits and the loss over a large vocabulary), where offload has to free what the
blocks saved while the script's own locals still hold some of it.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c: int, p: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(c)
        self.attn = nn.MultiheadAttention(c, 4, batch_first=True)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.proj = nn.Linear(4 * c, c)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]         # (B, T, C)
        x = x + self.proj(F.gelu(self.fc(self.ln2(x))))           # (B, T, C)
        return self.drop(x)                                       # the block's last op


class GPT(nn.Module):
    def __init__(self, vocab: int, seq: int, c: int, layers: int, p: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, c)
        self.pos = nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, p) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))   # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))                            # (B, T, vocab)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    args = p.parse_args()

    torch.manual_seed(0)
    model = GPT(args.vocab, args.seq, args.hidden, args.layers, args.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1234)
    for step in range(args.steps):
        idx = torch.randint(0, args.vocab, (args.batch_size, args.seq + 1), generator=gen)
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
