"""A DataLoader with worker processes, as nearly every training script has one: each batch
is made in a worker and handed over in shared memory, and the loader fetches ahead
(`prefetch_factor` batches per worker), so batches wait in the main process before the
step uses them (Note [Batches from other processes] in memledger/trace/collector.py).

    python tests/clients/train_loader.py --steps 4 --workers 2
    memledger trace tests/clients/train_loader.py --steps 3 -- --workers 4
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH, SHAPE = 64, (3, 32, 32)


class Images(Dataset):
    """Synthetic 32 x 32 RGB images and their labels, made on the fly by the worker."""

    def __len__(self) -> int:
        return 64 * BATCH

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        return torch.randn(SHAPE, generator=g), i % 10


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2, help="batches each worker fetches ahead")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Images(), batch_size=BATCH, shuffle=True, num_workers=args.workers,
                        prefetch_factor=args.prefetch if args.workers else None)
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
