"""Tensors of other layouts inside a training step (Note [Sparse tensors] in
memledger/trace/collector.py); each once crashed the trace while the script ran alone.

    python tests/clients/train_layouts.py --case sparse   # w += sparse COO delta in forward
                                                          # (peft's SHiRA), saved by autograd
    python tests/clients/train_layouts.py --case nested   # nn.TransformerEncoder evaluated
                                                          # with a padding mask: its fast path
                                                          # makes a nested tensor
                                                          # (--eval-batch 64: the peak)
    python tests/clients/train_layouts.py --case jagged   # an MLP trained on a batch of
                                                          # sequences of other lengths, a
                                                          # jagged nested tensor (a wrapper
                                                          # subclass: Note [Wrapper
                                                          # subclasses], trace/wrapped.py)
    python tests/clients/train_layouts.py --case embeddings   # sparse embedding gradients
                                                          # (Embedding and EmbeddingBag,
                                                          # sparse=True) under SparseAdam,
                                                          # the next batch drawn before
                                                          # zero_grad (Note [A sparse
                                                          # gradient kept as made])
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class SparseDelta(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64)
        self.register_buffer("idx", torch.randint(0, 64, (2, 32)))
        self.vals = nn.Parameter(torch.zeros(32))

    def forward(self, x):
        w = self.lin.weight.clone()
        w += torch.sparse_coo_tensor(self.idx, self.vals * 2.0, (64, 64))
        return F.linear(x, w, self.lin.bias)


class Recommender(nn.Module):
    """A two-tower click model: user ids through an Embedding (int64, one id per row), item
    histories through an EmbeddingBag (int32 ids, offsets), both sparse."""

    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(5_000, 32, sparse=True)
        self.items = nn.EmbeddingBag(8_000, 32, mode="sum", sparse=True)
        self.head = nn.Linear(64, 1)

    def forward(self, user, items, offsets):
        return self.head(torch.cat([self.users(user).mean(1), self.items(items, offsets)], 1))


def train_embeddings(steps: int, g: torch.Generator) -> None:
    model = Recommender()
    sparse = torch.optim.SparseAdam([*model.users.parameters(), *model.items.parameters()])
    dense = torch.optim.Adam(model.head.parameters())

    def batch():
        user = torch.randint(0, 5_000, (64, 4), generator=g)
        items = torch.randint(0, 8_000, (64 * 6,), generator=g, dtype=torch.int32)
        return user, items, torch.arange(0, 64 * 6, 6, dtype=torch.int32)

    user, items, offsets = batch()
    for _ in range(steps):
        y = torch.rand(64, 1, generator=g)
        F.binary_cross_entropy_with_logits(model(user, items, offsets), y).backward()
        sparse.step()
        dense.step()
        user, items, offsets = batch()   # the next batch first: the gradients hold the ids
        sparse.zero_grad()
        dense.zero_grad()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["sparse", "nested", "jagged", "embeddings"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--eval-batch", type=int, default=8)   # nested: 64 makes it the peak
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if args.case == "embeddings":
        return train_embeddings(args.steps, g)
    if args.case == "jagged":
        model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    elif args.case == "sparse":
        model = nn.Sequential(SparseDelta(), nn.Tanh(), SparseDelta())
    else:
        model = nn.TransformerEncoder(nn.TransformerEncoderLayer(
            64, 4, 128, dropout=0.0, batch_first=True), 2, enable_nested_tensor=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        model.train()
        if args.case == "jagged":
            lengths = torch.randint(5, 40, (8,), generator=g).tolist()
            x = torch.nested.nested_tensor([torch.randn(n, 64, generator=g) for n in lengths],
                                           layout=torch.jagged)
            loss = model(x).values().square().mean()
        else:
            loss = model(torch.randn(4, 32, 64, generator=g)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.case == "nested":
            model.eval()
            with torch.inference_mode():
                pad = torch.zeros(args.eval_batch, 32, dtype=torch.bool)
                pad[:, 16:] = True
                model(torch.randn(args.eval_batch, 32, 64, generator=g),
                      src_key_padding_mask=pad)


if __name__ == "__main__":
    main()
