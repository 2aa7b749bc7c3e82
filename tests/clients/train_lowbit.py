"""Optimizer state kept in 8 bits, as torchao's `AdamW8bit` keeps it, written here so the
test needs no torchao: a residual MLP trained by SGD with momentum, the momentum an
`Int8State` (a traceable wrapper subclass: int8 codes and one fp32 absmax scale per block
of 64 values: `copy_` quantizes into it, `dequantize()` reads it, other ops raise).

    python tests/clients/train_lowbit.py --steps 3
    python tests/clients/train_lowbit.py --case fullgraph --steps 3
    memledger trace tests/clients/train_lowbit.py --steps 2 -o lowbit.ledger

Cases: int8 (the 8-bit momentum, eager), fullgraph (fp32 momentum updated by one function
compiled with `torch.compile(fullgraph=True)`, as torchao compiles its optimizers' step),
qlora (QLoRA as torchao's NF4 does it: each Linear's base weight a frozen Int8State
Parameter that a custom autograd function saves for backward, a rank-8 LoRA trained by
AdamW). Every tensor held as an Int8State has a multiple of 64 values.
"""

import argparse
import math

import torch
import torch.nn.functional as F


class Int8State(torch.Tensor):
    """An fp32 tensor held as int8 codes and one fp32 scale per BLOCK values."""

    BLOCK = 64

    @staticmethod
    def __new__(cls, codes, scale, shape):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32,
                                                   device=codes.device)

    def __init__(self, codes, scale, shape):
        self.codes, self.scale = codes, scale

    def __tensor_flatten__(self):
        return ["codes", "scale"], self.shape

    @classmethod
    def __tensor_unflatten__(cls, inner, shape, outer_size, outer_stride):
        return cls(inner["codes"], inner["scale"], shape)

    @classmethod
    def zeros(cls, shape):
        n = math.prod(shape)
        return cls(torch.zeros(n, dtype=torch.int8), torch.zeros(n // cls.BLOCK), shape)

    def dequantize(self):
        blocks = self.codes.view(-1, self.BLOCK).float() * (self.scale / 127).view(-1, 1)
        return blocks.view(self.shape)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.copy_.default and isinstance(args[0], cls):
            dst, src = args
            blocks = src.reshape(-1, cls.BLOCK)
            scale = blocks.abs().amax(dim=1).clamp_(min=1e-12)
            dst.scale.copy_(scale)
            dst.codes.copy_((blocks * (127 / scale).view(-1, 1)).round_().view(-1))
            return dst
        if func is torch.ops.aten.detach.default:    # a Parameter of it: the same codes
            return cls(args[0].codes, args[0].scale, args[0].shape)
        # nothing else, as torchao's subclasses implement what their workflow calls (NF4's
        # `.to` takes no `copy`): the optimizer and the linear dequantize first
        raise NotImplementedError(f"Int8State does not implement {func}")


class SGD8bit(torch.optim.Optimizer):
    """SGD with momentum kept as an Int8State."""

    def __init__(self, params, lr=0.05, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum" not in state:
                    state["momentum"] = Int8State.zeros(p.shape)
                buf = state["momentum"]
                # dequantized first, as torchao's optimizers do (an op on the wrapper with a
                # Python number holds that number, 8 B, while the subclass runs: not in
                # the ledger, Note [Wrapper subclasses])
                new = buf.dequantize() * group["momentum"] + p.grad
                buf.copy_(new)                               # quantized into the codes
                p.add_(new, alpha=-group["lr"])


def _momentum_update(params, grads, bufs, lr: float, momentum: float):
    for p, g, b in zip(params, grads, bufs):
        b.copy_(b * momentum + g)
        p.sub_(b * lr)


class SGDFullgraph(torch.optim.Optimizer):
    """SGD with momentum whose update is one function compiled with fullgraph=True."""

    def __init__(self, params, lr=0.05, momentum=0.9, backend="aot_eager"):
        super().__init__(params, dict(lr=lr, momentum=momentum))
        self._update = torch.compile(_momentum_update, fullgraph=True, backend=backend)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            ps = [p for p in group["params"] if p.grad is not None]
            bufs = [self.state[p].setdefault("momentum", torch.zeros_like(p)) for p in ps]
            self._update(ps, [p.grad for p in ps], bufs, group["lr"], group["momentum"])


class _Int8Linear(torch.autograd.Function):
    """x @ W.T for a frozen Int8State weight, saving the weight itself (as torchao's
    `linear_nf4` saves its NF4 weight) and dequantizing it again in backward."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight)
        return x @ weight.dequantize().t()

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return grad @ weight.dequantize(), None


class LoRALinear(torch.nn.Module):
    """A frozen 8-bit base weight (a Parameter that is an Int8State) and a rank-8 LoRA."""

    def __init__(self, d_in: int, d_out: int, r: int = 8) -> None:
        super().__init__()
        w = Int8State.zeros((d_out, d_in))
        w.copy_(torch.randn(d_out, d_in) / d_in ** 0.5)
        self.weight = torch.nn.Parameter(w, requires_grad=False)
        self.A = torch.nn.Parameter(torch.randn(r, d_in) * 0.01)
        self.B = torch.nn.Parameter(torch.zeros(d_out, r))

    def forward(self, x):
        return _Int8Linear.apply(x, self.weight) + F.linear(F.linear(x, self.A), self.B)


class Block(torch.nn.Module):
    def __init__(self, d: int, lora: bool = False) -> None:
        super().__init__()
        layer = LoRALinear if lora else torch.nn.Linear
        self.fc1, self.fc2 = layer(d, 4 * d), layer(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


class Net(torch.nn.Module):
    def __init__(self, d: int = 64, n: int = 2, lora: bool = False) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d, lora) for _ in range(n))
        self.head = torch.nn.Linear(d, 64)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--case", choices=["int8", "fullgraph", "qlora"], default="int8")
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    net = Net(lora=a.case == "qlora")
    trained = [p for p in net.parameters() if p.requires_grad]
    opt = SGDFullgraph(trained) if a.case == "fullgraph" else \
        torch.optim.AdamW(trained, lr=1e-3) if a.case == "qlora" else SGD8bit(trained)
    for step in range(a.steps):
        x, y = torch.randn(a.batch, 64), torch.randint(64, (a.batch,))
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
