"""torch-lr-finder (`torch_lr_finder.LRFinder`, davidtvs) as its README writes it: a learning
rate range test before training, then training at the rate it suggests. A tiny MLP
classifier (`stem`, `blocks.*` of a residual Linear-GELU-Linear with a LayerNorm, `head`) on
a seeded random `TensorDataset` through a `DataLoader`; nothing downloaded.

    python tests/clients/train_lr_finder.py --steps 5 --num-iter 3
    memledger trace tests/clients/train_lr_finder.py --steps 5 -o lrf.ledger -- --num-iter 3
    memledger compare tests/clients/train_lr_finder.py --steps 5 -p 'checkpoint:blocks.*' \
        -- --num-iter 3

The loop: `LRFinder(model, optimizer, criterion)` stores the model's and the optimizer's
`state_dict` (a deep copy in memory, or with `--cache-dir` a `torch.save` to a file);
`range_test(loader, end_lr=1, num_iter=N)` runs N optimizer steps of its own (zero_grad,
forward, the criterion, backward, `optimizer.step()`, an exponential (`--step-mode linear`:
linear) rate schedule of its own); the script takes the rate at the steepest fall of the
loss from its history, `reset()` loads the stored states back (the optimizer's state
emptied again), and the script trains with the found rate (`--steps` counts the range
test's steps too: memledger counts optimizer steps). `--val` hands the range test a
validation loader (evaluated under `no_grad` after each step), `--accum K` its
`accumulation_steps`, `--no-reset` trains on from where the test left the model,
`--amp` its `amp_backend="torch"` (bf16 autocast, a CPU `GradScaler`),
`--opt sgd|adam|adamw` (SGD with momentum by default), `--fresh-opt` builds a new optimizer
after the reset (as some tutorials do). The training loop calls `zero_grad` first; `--bug
no-zero-grad` drops it, `--bug zero-grad-after` calls it after `step()` instead: then the
first training step's backward adds onto the gradient of the range test's last batch,
which `reset()` leaves on the parameters (it loads the states, not `.grad`). `--dropout P`
puts a Dropout in each block; the range test's validation leaves the model in eval mode,
which the script undoes with `model.train()` (`--bug eval-left` does not).
"""

import argparse
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch_lr_finder import LRFinder


class Block(nn.Module):
    def __init__(self, dim: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class Net(nn.Module):
    def __init__(self, inp: int, dim: int, depth: int, classes: int, dropout: float) -> None:
        super().__init__()
        self.stem = nn.Linear(inp, dim)
        self.blocks = nn.ModuleList(Block(dim, dropout) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_optimizer(name: str, params, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--num-iter", type=int, default=3)
    p.add_argument("--step-mode", default="exp", choices=["exp", "linear"])
    p.add_argument("--opt", default="sgd", choices=["sgd", "adam", "adamw"])
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--val", action="store_true")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--cache-dir", action="store_true", help="memory_cache=False")
    p.add_argument("--no-reset", action="store_true")
    p.add_argument("--fresh-opt", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--bug", default="",
                   choices=["", "no-zero-grad", "zero-grad-after", "eval-left"])
    args = p.parse_args()

    torch.manual_seed(0)
    inp, classes = 16, 4
    x = torch.randn(64, inp)
    y = torch.randint(0, classes, (64,))
    train = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True)
    val = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=args.batch)
    model = Net(inp, args.dim, args.depth, classes, args.dropout)
    criterion = nn.CrossEntropyLoss()
    opt = make_optimizer(args.opt, model.parameters(), 1e-4)

    with tempfile.TemporaryDirectory() as cache:
        amp = {"amp_backend": "torch", "grad_scaler": torch.amp.GradScaler("cpu"),
               "amp_config": {"device_type": "cpu", "dtype": torch.bfloat16}} \
            if args.amp else {}
        finder = LRFinder(model, opt, criterion, device="cpu",
                          memory_cache=not args.cache_dir, cache_dir=cache, **amp)
        finder.range_test(train, val_loader=val if args.val else None, end_lr=1,
                          num_iter=args.num_iter, step_mode=args.step_mode,
                          accumulation_steps=args.accum)
        lrs, losses = finder.history["lr"], finder.history["loss"]
        # the README's `plot()` suggests the rate at the steepest fall; without the figure
        steepest = min(range(len(losses) - 1), key=lambda i: losses[i + 1] - losses[i]) \
            if len(losses) > 1 else 0
        lr = lrs[steepest]
        if not args.no_reset:
            finder.reset()
    print(f"range test: {len(lrs)} steps, lr {lr:.3g}")
    if args.fresh_opt:
        opt = make_optimizer(args.opt, model.parameters(), lr)
    else:
        for group in opt.param_groups:
            group["lr"] = lr

    if args.bug != "eval-left":
        model.train()   # the range test's validation left it in eval mode
    loader = iter(train)
    for step in range(args.steps):
        try:
            xb, yb = next(loader)
        except StopIteration:
            loader = iter(train)
            xb, yb = next(loader)
        if args.bug not in ("no-zero-grad", "zero-grad-after"):
            opt.zero_grad()
        loss = criterion(model(xb), yb)
        loss.backward()
        opt.step()
        if args.bug == "zero-grad-after":
            opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
