"""Copies kept across a step, in plain torch (tests/clients/test_held_roles.py): what the
ledger calls them (Notes [A copy the optimizer keeps, then the parameter] and [Kept by
the script across a step] in memledger/ledger/held_roles.py).

A residual MLP (two Linear(16, 16) blocks and a Linear(16, 1) head: 2,244 B of fp32
parameters), batch 8, random data.

`--extragradient`: an extragradient SGD written as Cooper's `ExtraSGD` (after Gidel et
al.) is: `extrapolation()` keeps a copy of every parameter (`self.params_copy.append(
p.data.clone())`) and moves the parameter along its gradient through `p.data`; the second
forward and backward run at the moved point; `step()` makes the copy, moved along the new
gradient, the parameter (`p.data = self.params_copy[i].add_(u)`), and drops the list.
`--keep`: plain SGD; after each step the script keeps a clone of every parameter
(`kept = {n: p.detach().clone() ...}`, loralib's `lora_state_dict` saved each step) until
the next step's replaces it. `--ema`: plain SGD behind the grokfast paper's
`gradfilter_ema` between backward and step: an EMA of each gradient kept by the script in a
dict, each step's made from the step before's (which it reads) and replacing it.
`--ma W`: `gradfilter_ma` instead: a deque of each parameter's last W gradient storages
(`p.grad.data.detach()`), the gradient rebound to their mean added to it once W are held;
`--model-zero`: the gradients cleared by `model.zero_grad()`, not the optimizer's.
`--ema-in-place`: the EMA made as a fresh product of the gradient with the old one added
into it in place (`new = g * 0.1; new.add_(old, alpha=0.9)`, then `p.grad.add_(new)`): the
old one's last read makes no storage, it writes one.
`--put-back`: after backward the script keeps each `.grad` (`saved = {n: p.grad ...}`),
takes their norm, clears them (`opt.zero_grad()`), runs a check forward under no_grad with a batch of 32,
puts the same tensors back (`p.grad = saved[n]`), steps, and clears them again: each
gradient storage is dropped, a `.grad` again, and dropped again.
`--loss-avg`: the loss is the MSE plus an L2 penalty (`mse + 1e-4 * l2`, an `add` in the
script), and the script keeps a running average of it (`avg = avg * 0.9 + loss.detach() *
0.1`, an `add` in the script too, of the same 4 B) after each backward.
`--history list|deque`: the script keeps every loss (`losses.append(loss.detach())` after
each backward; `deque(maxlen=5)` as for a plateau check) and reads them after the loop.

    memledger trace tests/clients/train_held_roles.py -o run.ledger --steps 2 -- --extragradient
    memledger show run.ledger     # the copies are optimizer_state until each becomes its parameter
"""

import argparse
from collections import deque

import torch
from torch import nn


class ExtraSGD(torch.optim.Optimizer):
    def __init__(self, params, lr: float) -> None:
        super().__init__(params, {"lr": lr})
        self.params_copy: list[torch.Tensor] = []

    def _update(self, p: torch.Tensor, group: dict) -> torch.Tensor | None:
        return None if p.grad is None else -group["lr"] * p.grad

    @torch.no_grad()
    def extrapolation(self) -> None:
        first = not self.params_copy
        for group in self.param_groups:
            for p in group["params"]:
                u = self._update(p, group)
                if first:
                    self.params_copy.append(p.data.clone())
                if u is not None:
                    p.data.add_(u)

    @torch.no_grad()
    def step(self, closure=None):
        i = -1
        for group in self.param_groups:
            for p in group["params"]:
                i += 1
                u = self._update(p, group)
                if u is not None:
                    p.data = self.params_copy[i].add_(u)
        self.params_copy = []


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Block(dim) for _ in range(depth)))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--extragradient", action="store_true")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--ema", action="store_true")
    ap.add_argument("--ema-in-place", action="store_true")
    ap.add_argument("--ma", type=int, default=0)
    ap.add_argument("--model-zero", action="store_true")
    ap.add_argument("--loss-avg", action="store_true")
    ap.add_argument("--put-back", action="store_true")
    ap.add_argument("--history", choices=["", "list", "deque"], default="")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, args.depth)
    opt = ExtraSGD(model.parameters(), lr=1e-2) if args.extragradient else \
        torch.optim.SGD(model.parameters(), lr=1e-2)
    kept = ema = past = None
    avg = torch.zeros(()) if args.loss_avg else None
    losses = deque(maxlen=5) if args.history == "deque" else []
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)
        if args.extragradient:
            nn.functional.mse_loss(model(x), y).backward()
            opt.extrapolation()
            opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        if args.loss_avg:   # a penalised loss, and a running average of it the script keeps
            loss = loss + 1e-4 * sum(p.pow(2).sum() for p in model.parameters())
        loss.backward()
        if args.history:   # a loss history the script keeps
            losses.append(loss.detach())
        if args.loss_avg:
            avg = avg * 0.9 + loss.detach() * 0.1
        if args.ema:   # grokfast's gradfilter_ema: the dict replaced in each step
            ema = {n: p.grad.detach() for n, p in model.named_parameters()} \
                if ema is None else ema
            for n, p in model.named_parameters():
                ema[n] = ema[n] * 0.9 + p.grad.detach() * 0.1
                p.grad.data = p.grad.data + ema[n]
        if args.ema_in_place:   # the new EMA a fresh product, the old added into it
            ema = {} if ema is None else ema
            for n, p in model.named_parameters():
                new = p.grad.detach() * 0.1
                if n in ema:
                    new.add_(ema[n], alpha=0.9)
                ema[n] = new
                p.grad.add_(new)
        if args.ma:    # grokfast's gradfilter_ma: a deque of each parameter's last gradients
            past = {n: deque(maxlen=args.ma) for n, _ in model.named_parameters()} \
                if past is None else past
            for n, p in model.named_parameters():
                past[n].append(p.grad.data.detach())
                if len(past[n]) == args.ma:
                    p.grad.data = p.grad.data + sum(past[n]) / args.ma
        if args.put_back:   # kept, cleared, a check forward, put back
            saved = {n: p.grad for n, p in model.named_parameters()}
            norm = torch.stack([g.norm() for g in saved.values()]).norm()   # logged
            opt.zero_grad()
            with torch.no_grad():
                model(torch.randn(4 * args.batch, args.dim))
            for n, p in model.named_parameters():
                p.grad = saved[n]
        opt.step()
        if args.model_zero:
            model.zero_grad()
        else:
            opt.zero_grad()
        if args.keep:
            kept = {n: p.detach().clone() for n, p in model.named_parameters()}
    if kept is not None:
        print("kept", len(kept), "tensors")
    if args.history:
        print(f"mean loss {torch.stack(list(losses)).mean().item():.4f}")
    if args.loss_avg:
        print(f"loss {loss.item():.4f}, average {avg.item():.4f}")


if __name__ == "__main__":
    main()
