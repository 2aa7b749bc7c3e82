"""A low-rank update of a frozen weight, put on through torch's parametrizations, in plain
torch: the way peft's `ParamWrapper` (LoRA on a bare `nn.Parameter`: a mixture of experts'
router weight, its 3-D expert stacks) runs its adapter, and what peft 0.22 changed in it.
Blocks (`blocks.*`) of a frozen projection read by `F.linear(x, self.proj.weight)` and a
GELU MLP; each projection's weight gets `scale * B @ A` (rank 4, A and B trained), AdamW.

- `--how call` (peft's): every call registers a parametrization on the projection's
  weight (`W + delta`), runs under `parametrize.cached()`, and removes it on the way out
  (`remove_parametrizations(..., leave_parametrized=False)`); `--how fixed`: registered
  once when the model is built, as torch's own examples do.
- `--scale inplace` (peft 0.22's `Linear.get_delta_weight`: `delta = B @ A;
  delta.mul_(scale)`) or `--scale out` (0.21's `(B @ A) * scale`). In place, the `mm`
  that selective checkpointing keeps is changed after it is made, and torch's selective
  checkpoint refuses to hand it to the re-run ("Tensor cached during selective activation
  checkpoint has been mutated"): predict and measure refuse `selective:blocks.*` alike
  (Note [Written in place in forward], memledger/trace/collector.py). Out of place, it is
  priced, as checkpoint and offload are either way.

    memledger compare tests/clients/train_param_delta.py --steps 2 \
        -p 'selective:blocks.*' -p 'checkpoint:blocks.*' -- --scale inplace
"""

import argparse
import contextlib

import torch
from torch import nn
from torch.nn.utils import parametrize


class Delta(nn.Module):
    """The parametrization: the weight it is given plus `scale * B @ A`."""

    def __init__(self, adapter: "LowRank") -> None:
        super().__init__()
        self.adapter = [adapter]   # a list: not a submodule, so its parameters stay its own

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w + self.adapter[0].delta()


class LowRank(nn.Module):
    """A and B of rank `r` over an (out, in) weight; B starts at zero, as LoRA's does."""

    def __init__(self, out: int, inp: int, r: int, scale: float, in_place: bool) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.randn(r, inp) / inp ** 0.5)
        self.B = nn.Parameter(torch.zeros(out, r))
        self.scale, self.in_place = scale, in_place

    def delta(self) -> torch.Tensor:
        d = self.B @ self.A                          # (out, in): an `mm`
        if self.in_place:
            d.mul_(self.scale)                       # peft 0.22
            return d
        return d * self.scale                        # peft 0.21


class Router(nn.Module):
    """A bare frozen weight, read by `F.linear`, as transformers' MoE routers keep it."""

    def __init__(self, dim: int, out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out, dim) / dim ** 0.5, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight)


class Wrapped(nn.Module):
    """The router with its update: registered for each call (`call`) or once (`fixed`)."""

    def __init__(self, dim: int, out: int, how: str, in_place: bool) -> None:
        super().__init__()
        self.base = Router(dim, out)
        self.lora = LowRank(out, dim, 4, 2.0, in_place)
        self.how = how
        if how == "fixed":
            parametrize.register_parametrization(self.base, "weight", Delta(self.lora))

    @contextlib.contextmanager
    def _active(self):
        if self.how == "fixed":
            yield
            return
        parametrize.register_parametrization(self.base, "weight", Delta(self.lora))
        try:
            with parametrize.cached():
                yield
        finally:
            parametrize.remove_parametrizations(self.base, "weight", leave_parametrized=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self._active():
            return self.base(x)


class Block(nn.Module):
    def __init__(self, dim: int, how: str, in_place: bool) -> None:
        super().__init__()
        self.proj = Wrapped(dim, dim, how, in_place)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.proj(x)
        return h + self.down(nn.functional.gelu(self.up(h)))


class Net(nn.Module):
    def __init__(self, dim: int, depth: int, how: str, in_place: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, how, in_place) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--how", choices=("call", "fixed"), default="call")
    p.add_argument("--scale", choices=("inplace", "out"), default="inplace")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=128)
    a = p.parse_args()
    torch.manual_seed(0)
    model = Net(a.dim, 2, a.how, a.scale == "inplace")
    for name, prm in model.named_parameters():   # the base frozen, as peft leaves it
        prm.requires_grad_(".lora." in name or name.startswith("head."))
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(a.steps):
        x = torch.randn(a.batch, a.dim, generator=gen)
        y = torch.randn(a.batch, 1, generator=gen)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
