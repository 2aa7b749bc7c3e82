"""A tiny MLP-mixer-style classifier trained with heavyball's optimizers, as its README
writes them: `heavyball.SOAP(model.parameters(), lr=3e-3)`, `heavyball.PSGDKron(...)`,
`heavyball.Muon(...)` for the matrices with `heavyball.AdamW` for the vectors in one
`heavyball.SplitOpt`. The model: `inp` (Linear), `blocks.*` (LayerNorm, Linear, GELU,
Linear, residual), `head`; random features and labels, seeded; nothing downloaded.

    python tests/clients/train_heavyball.py --steps 3 --opt soap
    memledger trace tests/clients/train_heavyball.py --steps 2 -o soap.ledger -- --opt soap
    memledger compare tests/clients/train_heavyball.py --steps 2 -p 'checkpoint:blocks.*' \
        -- --opt psgd --eager

Flags:
- `--opt`: `soap` (SOAP: two Kronecker factors and their eigenbases per matrix, Adam moments
  in the rotated basis), `psgd` (PSGDKron: triangular Kronecker factors), `muon` (SplitOpt of
  Muon on the 2-D weights and AdamW on the rest), `adamw`.
- `--eager`: heavyball compiles each building block with `torch.compile` by default;
  `heavyball.utils.compile_mode = None` (its switch) runs them eagerly.
- `--caution`, `--ecc MODE` (e.g. `bf16+8`: state stored as bf16 plus an int8 correction),
  `--palm`, `--accum` (`precond_grad_accum=True`: SOAP/PSGD accumulate the gradients
  between preconditioner updates inside the optimizer), `--keep-grad` (`consume_grad=False`;
  heavyball's default frees each `p.grad` inside `step()`), `--storage bfloat16` (the state
  stored in bf16, written by stochastic rounding).
- `--opt sam`: `heavyball.SAMWrapper` around AdamW: `step(closure)` runs the closure
  (forward and backward) at the weights, perturbs them, and AdamW's step runs it again.
- `--opt psgd-hvp`: PSGDKron with `hessian_approx=True`: `step(closure)` runs the closure's
  backward with `create_graph=True` and takes Hessian-vector products by a second
  `autograd.grad` through the gradients.
- `--opt sfadamw`: schedule-free AdamW, `optimizer.train()` before each step and
  `optimizer.eval()` before an evaluation under `no_grad` after it. `--warmup N`:
  `warmup_steps=N`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import heavyball

IN, WIDTH, DEPTH, CLASSES, BATCH = 16, 32, 2, 4, 16


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, WIDTH)
        self.blocks = nn.ModuleList(Block(WIDTH) for _ in range(DEPTH))
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_optimizer(args, net: Net):
    extra = {}
    if args.caution:
        extra["caution"] = True
    if args.ecc:
        extra["ecc"] = args.ecc
    if args.palm:
        extra["palm"] = True
    if args.keep_grad:
        extra["consume_grad"] = False
    if args.storage:
        extra["storage_dtype"] = args.storage
    if args.opt == "soap":
        return heavyball.SOAP(net.parameters(), lr=3e-3, precondition_frequency=1,
                              precond_grad_accum=args.accum, **extra)
    if args.opt == "psgd":
        return heavyball.PSGDKron(net.parameters(), lr=1e-3,
                                  preconditioner_update_probability=1.0,
                                  precond_grad_accum=args.accum, **extra)
    if args.opt == "muon":
        matrices = [p for p in net.parameters() if p.ndim == 2]
        vectors = [p for p in net.parameters() if p.ndim != 2]
        return heavyball.SplitOpt([
            {"params": matrices, "optimizer": heavyball.Muon, "lr": 0.02, **extra},
            {"params": vectors, "optimizer": heavyball.AdamW, "lr": 1e-3, **extra},
        ])
    if args.warmup:
        extra["warmup_steps"] = args.warmup
    if args.param_ecc:
        extra["param_ecc"] = args.param_ecc
    if args.opt == "psgd-hvp":   # Hessian-vector products by double backward in step()
        return heavyball.PSGDKron(net.parameters(), lr=1e-3, hessian_approx=True, hvp_interval=2,
                                  preconditioner_update_probability=1.0, **extra)
    if args.opt == "sfadamw":
        return heavyball.SFAdamW(net.parameters(), lr=1e-3, **extra)
    if args.opt == "sam":
        params = list(net.parameters())
        return heavyball.SAMWrapper(params, wrapped_optimizer=heavyball.AdamW(params, lr=1e-3,
                                                                              **extra))
    return heavyball.AdamW(net.parameters(), lr=1e-3, **extra)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--opt", default="soap", choices=["soap", "psgd", "muon", "adamw", "sam", "sfadamw", "psgd-hvp"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--eager", action="store_true")
    p.add_argument("--caution", action="store_true")
    p.add_argument("--ecc", default="")
    p.add_argument("--palm", action="store_true")
    p.add_argument("--accum", action="store_true")
    p.add_argument("--keep-grad", action="store_true")
    p.add_argument("--param-ecc", default="", help="param_ecc, e.g. bf16+8")
    p.add_argument("--warmup", type=int, default=0, help="warmup_steps")
    p.add_argument("--storage", default="", help="storage_dtype of the state, e.g. bfloat16")
    args = p.parse_args()
    if args.eager:
        heavyball.utils.compile_mode = None
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = Net()
    optimizer = make_optimizer(args, net)
    for step in range(args.steps):
        if args.opt == "sfadamw":   # schedule-free: train() before training, eval() before
            optimizer.train()       # evaluating (they swap the parameters in place)
        # param_ecc stores the parameters as bf16 (+ an int8 correction) from the first step
        x = torch.randn(args.batch, IN, generator=gen).to(net.inp.weight.dtype)
        y = torch.randint(0, CLASSES, (args.batch,), generator=gen)
        if args.opt in ("sam", "psgd-hvp"):   # step(closure): forward and backward inside
            def closure():
                loss = F.cross_entropy(net(x), y)
                loss.backward()
                return loss
            loss = optimizer.step(closure)
        else:
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()
        if args.opt == "sfadamw":
            optimizer.eval()
            with torch.no_grad():
                val = F.cross_entropy(net(x), y)
            print(f"step {step}  eval loss {val.item():.4f}")
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
