"""A residual MLP trained by optimizers from outside torch.optim, as their READMEs use them.

`--opt`: lion (lion-pytorch), lamb, adabelief, adafactor_to, shampoo (torch-optimizer),
sf_adamw, sf_sgd (schedulefree: `optimizer.train()` / `eval()` swap the parameters' values
in place; the loop evaluates under `eval()` after every step), prodigy (prodigyopt),
adam_mini (adam-mini: one param group per named parameter), came (came-pytorch), muon
(torch.optim.Muon for the matrices, AdamW for the rest: two optimizers, one step),
hf_adafactor (transformers' Adafactor, relative step), homegrown (momenta in an attribute,
a tensor learning rate in the param group; homegrown_data: the same writing through
`p.data`), adam_tensor_lr (torch's Adam with a tensor learning rate). `--closure`: forward and backward
inside `optimizer.step(closure)`. `--wrong`: a loop that never zeroes its gradients (the
doctor's finding).

    python tests/clients/train_optimizers.py --opt lion --steps 3
    memledger trace tests/clients/train_optimizers.py --steps 3 -o x.ledger -- --opt lion
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

D_IN, W, H, N_OUT, BATCH = 16, 32, 64, 4, 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(W, H)
        self.down = nn.Linear(H, W)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(D_IN, W)
        self.blocks = nn.Sequential(*(Block() for _ in range(3)))
        self.head = nn.Linear(W, N_OUT)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


class HomegrownMomentum(torch.optim.Optimizer):
    """SGD with momentum as people write their own: the momenta in an attribute of the
    optimizer (not `self.state`), made at the second step (the first is plain SGD), and the
    learning rate a tensor in each param group."""

    def __init__(self, params, lr: float = 1e-2, momentum: float = 0.9,
                 through_data: bool = False) -> None:
        super().__init__(params, dict(lr=torch.tensor(lr), momentum=momentum))
        self.momenta: dict[int, torch.Tensor] = {}
        self.calls = 0
        self.through_data = through_data   # `p.data.sub_`: no version bump on p

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.calls += 1
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                target = p.data if self.through_data else p
                if self.calls == 1:
                    target.sub_(group["lr"] * p.grad)
                    continue
                m = self.momenta.get(id(p))
                if m is None:
                    m = self.momenta[id(p)] = p.grad.clone()
                else:
                    m.mul_(group["momentum"]).add_(p.grad)
                target.sub_(group["lr"] * m)
        return loss


def optimizers(name: str, model: nn.Module) -> list[torch.optim.Optimizer]:
    ps = list(model.parameters())
    if name == "lion":
        from lion_pytorch import Lion
        return [Lion(ps, lr=1e-4, weight_decay=1e-2)]
    if name in ("lamb", "adabelief", "adafactor_to", "shampoo"):
        import torch_optimizer as topt
        cls = {"lamb": topt.Lamb, "adabelief": topt.AdaBelief, "adafactor_to": topt.Adafactor,
               "shampoo": topt.Shampoo}[name]
        return [cls(ps, lr=1e-3)]
    if name == "sf_adamw":
        import schedulefree
        return [schedulefree.AdamWScheduleFree(ps, lr=1e-3, warmup_steps=2)]
    if name == "sf_sgd":
        import schedulefree
        return [schedulefree.SGDScheduleFree(ps, lr=1e-2)]
    if name == "prodigy":
        from prodigyopt import Prodigy
        return [Prodigy(ps, lr=1.0, weight_decay=1e-2)]
    if name == "adam_mini":
        from adam_mini import Adam_mini
        return [Adam_mini(model.named_parameters(), lr=1e-3, dim=W, n_heads=1, verbose=False)]
    if name == "came":
        from came_pytorch import CAME
        return [CAME(ps, lr=1e-4, weight_decay=1e-2)]
    if name == "muon":
        mats = [p for p in ps if p.ndim == 2]
        rest = [p for p in ps if p.ndim != 2]
        return [torch.optim.Muon(mats, lr=1e-2), torch.optim.AdamW(rest, lr=1e-3)]
    if name == "hf_adafactor":
        from transformers.optimization import Adafactor
        return [Adafactor(ps, lr=None, relative_step=True, scale_parameter=True,
                          warmup_init=True)]
    if name in ("homegrown", "homegrown_data"):
        return [HomegrownMomentum(ps, through_data=name == "homegrown_data")]
    if name == "adam_tensor_lr":
        return [torch.optim.Adam(ps, lr=torch.tensor(1e-3))]
    raise SystemExit(f"unknown --opt {name}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--opt", default="lion")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--closure", action="store_true")
    p.add_argument("--wrong", action="store_true", help="never zero the gradients")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net()
    opts = optimizers(args.opt, model)
    swaps = hasattr(opts[0], "eval") and hasattr(opts[0], "train")   # schedulefree
    gen = torch.Generator().manual_seed(1234)
    x_val = torch.randn(BATCH, D_IN, generator=gen)
    for step in range(args.steps):
        x = torch.randn(BATCH, D_IN, generator=gen)
        y = torch.randint(0, N_OUT, (BATCH,), generator=gen)
        model.train()
        if swaps:
            opts[0].train()

        def closure():
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss
        if args.closure:
            loss = opts[0].step(closure)
            for o in opts[1:]:
                o.step()
        else:
            loss = closure()
            for o in opts:
                o.step()
        if not args.wrong:
            for o in opts:
                o.zero_grad(set_to_none=True)
        model.eval()
        if swaps:
            opts[0].eval()
        with torch.no_grad():
            val = model(x_val).square().mean()
        print(f"step {step}  loss {loss.item():.4f}  val {val.item():.4f}")


if __name__ == "__main__":
    main()
