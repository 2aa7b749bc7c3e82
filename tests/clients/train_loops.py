"""Training loops as other people write them, on one small residual MLP.

    python tests/clients/train_loops.py --loop accumulate
    memledger trace tests/clients/train_loops.py --steps 2 -o loops.ledger -- --loop twice

- `accumulate`: two micro-batches of one batch per optimizer step, with accelerate's
  `Accelerator(gradient_accumulation_steps=2)` when accelerate is installed (its optimizer
  skips the step and zero_grad on the first), else by hand; no op runs between one
  micro-batch's backward and the next one's forward.
- `eval`: an evaluation forward under `torch.no_grad()` (4x the batch) between backward
  and the optimizer's step.
- `twice`: the model called twice per step (two views of a batch, a contrastive loss).

`--shared` makes the last block's fc1 the block before's: one module with two parents,
named by its first (`blocks.1.fc1`) when the last block calls it. `--spectral` puts `spectral_norm` on each block's fc2: registering it calls the
parametrization while the model is built, the first module call the trace sees.

`--one-block` makes every layer one block called `--depth` times (ALBERT's sharing, a
universal transformer): under autocast its first call casts the weights and the later
ones take the casts from autocast's cache.

`--autocast` runs the eval and twice loops' forward under CPU bf16 autocast: oneDNN's bf16
matmuls take scratch inside the op that no tensor holds (`show` names it).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, spectral: bool = False) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        if spectral:   # registering it calls the parametrization: a module call before the
            self.fc2 = nn.utils.parametrizations.spectral_norm(self.fc2)   # model's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Net(nn.Module):
    def __init__(self, width: int, depth: int, spectral: bool = False,
                 one_block: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, spectral) for _ in range(1 if one_block
                                                                         else depth))
        self.calls = depth if one_block else 1   # calls of each block per forward
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            for _ in range(self.calls):
                x = block(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--loop", choices=["accumulate", "eval", "twice", "sgd"], required=True,
                   help="sgd: the plain loop with SGD and momentum, whose state is small "
                        "enough that the step's peak is at the end of backward")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--autocast", action="store_true",
                   help="the forward under CPU bf16 autocast (eval and twice loops)")
    p.add_argument("--shared", action="store_true",
                   help="the last block's fc1 is the block before's (one module, two parents)")
    p.add_argument("--spectral", action="store_true",
                   help="spectral_norm on each block's fc2 (its parametrization runs first)")
    p.add_argument("--one-block", action="store_true",
                   help="one block called --depth times (its weights shared by every layer)")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, args.depth, args.spectral, args.one_block)
    if args.shared:
        model.blocks[-1].fc1 = model.blocks[-2].fc1
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9) if args.loop == "sgd" \
        else torch.optim.AdamW(model.parameters(), lr=1e-3)
    accelerator = None
    if args.loop == "accumulate":
        try:
            from accelerate import Accelerator
            accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
            model, opt = accelerator.prepare(model, opt)
        except ImportError:
            pass
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.width, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        if args.loop == "accumulate":
            for _ in range(2):
                if accelerator is not None:
                    with accelerator.accumulate(model):
                        loss = F.cross_entropy(model(x), y)
                        accelerator.backward(loss)
                        opt.step()
                        opt.zero_grad()
                else:
                    (F.cross_entropy(model(x), y) / 2).backward()
            if accelerator is None:
                opt.step()
                opt.zero_grad()
            continue
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            if args.loop == "twice":
                a, b = model(x), model(x + 0.1 * torch.randn(x.shape, generator=gen))
                loss = F.cross_entropy((a @ b.T).float() / 0.1, torch.arange(args.batch_size))
            else:
                loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        if args.loop == "eval":
            with torch.no_grad():
                model(torch.randn(4 * args.batch_size, args.width, generator=gen))
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
