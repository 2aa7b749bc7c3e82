"""Opacus DP-SGD: `PrivacyEngine().make_private(...)` wraps the model in a
`GradSampleModule` (the model is its `_module`), the optimizer in a `DPOptimizer`
(per-sample clipping and noise in `pre_step`) and the loader in a Poisson-sampling
`DPDataLoader` (variable batch size). With `--mode hooks|functorch|ew` module hooks store
per-sample gradients in `p.grad_sample` (batch x parameter-sized, the dominant memory of
a DP step); `--mode ghost` (ghost clipping) never materialises them: the loss is wrapped in
`DPLossFastGradientClipping` and backward runs twice. `--bmm` splits each logical batch
into physical batches of `--physical` rows (`BatchMemoryManager`): `optimizer.step()` is
called on every physical batch and skipped (`signal_skip_step`) on all but the last.
Models (`blocks.*` under `_module`): `mlp`, `conv` (Conv2d + GroupNorm), `lstm`
(Embedding + `DPLSTM`). Tiny, seeded, in memory, nothing downloaded.

    python tests/clients/train_opacus.py --steps 3 --mode hooks
    memledger trace tests/clients/train_opacus.py --steps 3 -o op.ledger -- --mode hooks

`--steps`: `optimizer.step()` calls (the script stops after that many; with `--bmm` each
physical batch is one call); `--batch`: expected logical batch size (Poisson: the real size
varies); `--no-poisson`: fixed batches.
"""

import argparse
import warnings

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.Linear(16, width), nn.ReLU()),
            nn.Sequential(nn.Linear(width, width), nn.ReLU())])
        self.out = nn.Linear(width, 3)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.out(x)


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([
            nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU()),
            nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU())])
        self.out = nn.Linear(8 * 8 * 8, 3)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.out(x.flatten(1))


class LSTMNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from opacus.layers import DPLSTM
        self.emb = nn.Embedding(50, 16)
        self.blocks = nn.ModuleList([DPLSTM(16, 16, batch_first=True)])
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        h, _ = self.blocks[0](self.emb(x))
        return self.out(h[:, -1])


def data(model: str, n: int):
    g = torch.Generator().manual_seed(1)
    if model == "mlp":
        x = torch.randn(n, 16, generator=g)
    elif model == "conv":
        x = torch.randn(n, 1, 8, 8, generator=g)
    else:
        x = torch.randint(0, 50, (n, 6), generator=g)
    return x, torch.randint(0, 3, (n,), generator=g)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="hooks", choices=["hooks", "functorch", "ew", "ghost"])
    p.add_argument("--model", default="mlp", choices=["mlp", "conv", "lstm"])
    p.add_argument("--bmm", action="store_true")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--physical", type=int, default=12)
    p.add_argument("--no-poisson", action="store_true")
    args = p.parse_args()
    warnings.filterwarnings("ignore")
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    torch.manual_seed(0)
    model = {"mlp": MLP, "conv": Conv, "lstm": LSTMNet}[args.model]()
    x, y = data(args.model, 256)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=args.batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    engine = PrivacyEngine(secure_mode=False)
    made = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                               criterion=criterion, noise_multiplier=1.0, max_grad_norm=1.0,
                               poisson_sampling=not args.no_poisson,
                               grad_sample_mode=args.mode)
    if args.mode == "ghost":
        model, optimizer, criterion, loader = made
    else:
        model, optimizer, loader = made
    model.train()
    calls = 0
    with contextlib_bmm(args, loader, optimizer) as batches:
        while calls < args.steps:
            for xb, yb in batches:
                optimizer.zero_grad(set_to_none=True)
                loss = criterion(model(xb), yb)
                loss.backward()
                optimizer.step()
                calls += 1
                if calls >= args.steps:
                    break
    print("loss", loss.item(), "epsilon", round(engine.get_epsilon(1e-5), 3))


def contextlib_bmm(args, loader, optimizer):
    """The loader itself, or BatchMemoryManager's physical-batch loader over it."""
    import contextlib
    if not args.bmm:
        return contextlib.nullcontext(loader)
    from opacus.utils.batch_memory_manager import BatchMemoryManager
    return BatchMemoryManager(data_loader=loader, max_physical_batch_size=args.physical,
                              optimizer=optimizer)


if __name__ == "__main__":
    main()
