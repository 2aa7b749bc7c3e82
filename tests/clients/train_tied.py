"""A language model whose head is its embedding (`head.weight = emb.weight`, as GPT-2 and
most small LMs tie them), with residual MLP blocks between:

    python tests/clients/train_tied.py --steps 3
    memledger trace tests/clients/train_tied.py --steps 2

Backward sums the tied weight's two gradients. The head's arrives first as a view (the
transposed `mm` of a linear over 3-D input), whose base shares its storage, so torch adds
out of place (`can_accumulate_inplace` in autograd/input_buffer.cpp): the sum is a third
V x C buffer at the peak.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


class TiedLM(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    model = TiedLM(args.vocab, args.width, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        idx = torch.randint(0, args.vocab, (args.batch_size, args.seq), generator=gen)
        loss = F.cross_entropy(model(idx).flatten(0, 1), idx.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
