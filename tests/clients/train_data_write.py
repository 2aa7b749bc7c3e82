"""A module that initialises its state from the first batch through `.data`, in plain torch:
routing-transformer's `Kmeans` cut down (tests/clients/train_routing.py). On its first call
`Routed.init` takes cluster means from the batch (an `mm` of its own) and writes them and
an `initted` flag through `.data`, which bumps no version counter; later calls (and a
checkpoint's re-run) find `initted` set and skip those ops. Each block routes its input to
the means (`mm`), mixes the means back by the softmax (`mm`) and adds a Linear of it.
`--ema`: every training call also moves the means toward the batch through `.data`
(`means.data.lerp_(...)`, vector-quantize-pytorch's EMA codebook), before the block
computes anything backward needs, so a checkpoint's re-run moves them again. Adam, random
data.

    memledger predict run.ledger -p 'selective:blocks.*'    # refused: the init's write
    memledger measure tests/clients/train_data_write.py -p 'selective:blocks.*'   # alike
"""

import argparse

import torch
from torch import nn


class Routed(nn.Module):
    def __init__(self, dim: int, clusters: int, ema: bool = False) -> None:
        super().__init__()
        self.ema = ema
        self.fc = nn.Linear(dim, dim)
        self.register_buffer("means", torch.zeros(clusters, dim))
        self.register_buffer("initted", torch.tensor(False))

    @torch.no_grad()
    def init(self, x: torch.Tensor) -> None:
        if self.initted:
            return
        k = self.means.shape[0]
        self.means.data.copy_(torch.nn.functional.normalize(x[:k] @ self.fc.weight.t(), dim=-1))
        self.initted.data.copy_(torch.tensor(True))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        k = self.means.shape[0]
        self.means.data.lerp_(torch.nn.functional.normalize(x[:k], dim=-1), 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.init(x)
        if self.ema and self.training:
            self.update(x)
        dists = x @ self.means.t()                     # (B, K)
        mixed = dists.softmax(-1) @ self.means         # (B, D)
        return x + self.fc(torch.tanh(mixed + x))


class Net(nn.Module):
    def __init__(self, dim: int, clusters: int, depth: int, ema: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Routed(dim, clusters, ema) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--ema", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, args.clusters, args.depth, args.ema)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
