"""Tensors that only Python's garbage collector frees (check `cyclic_garbage`).

    python garbage.py --cycle ctx      # a custom autograd.Function keeps its output as
                                       # `ctx.out`: each step's 64x256 float32 output stays
    python garbage.py --cycle frame    # a helper keeps the exception it caught in a local:
                                       # its traceback holds the frame, the frame the features
    python garbage.py --cycle module   # a copy of the model kept as the best so far, whose
                                       # forward hook is a bound method of its own, replaced
                                       # each step
    python garbage.py --cycle snapshot # an evaluation copy of that model, run under no_grad
                                       # and dropped each step (the probe, which keeps every
                                       # parameter it met, must not hide it)
    python garbage.py --cycle held     # a helper puts its features in a dict that refers to
                                       # itself, and a collection runs while the helper still
                                       # holds them: the cycle is found first, its tensor at
                                       # the boundary
    python garbage.py --cycle ... --collect # and gc.collect() right after: the script's own
                                       # collection frees the cycle mid-step
    python garbage.py --cycle ... --fixed   # save_for_backward / str(e) / a plain hook
    python garbage.py --cycle ... --no-gc   # Python's automatic collection off: what the
                                       # cycles hold stays to the end, whatever the tracer
                                       # allocates (the collector's thresholds count objects)
"""
import argparse
import copy
import gc

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--cycle", choices=["ctx", "frame", "module", "snapshot", "held"],
               default="ctx")
p.add_argument("--fixed", action="store_true")
p.add_argument("--collect", action="store_true")
p.add_argument("--no-gc", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()
FIXED = ARGS.fixed
if ARGS.no_gc:
    gc.disable()


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x * 2.0
        if FIXED:
            ctx.save_for_backward(out)
        else:
            ctx.out = out
        return out

    @staticmethod
    def backward(ctx, g):
        out = ctx.saved_tensors[0] if FIXED else ctx.out
        return g * 2.0 + 0.0 * out


def _count_calls(module, inputs, output):
    module.calls += 1


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(256, 256)
        self.b = nn.Linear(256, 256)
        self.calls = 0
        self.register_forward_hook(_count_calls if FIXED else self._count)

    def _count(self, module, inputs, output):
        self.calls += 1

    def forward(self, x):
        h = torch.relu(self.a(x))
        if ARGS.cycle == "ctx":
            h = Double.apply(h)
        return self.b(h)


def log_features(h):
    feats = h.detach().clone()
    try:
        raise RuntimeError("the logger is offline")
    except RuntimeError as e:
        error = str(e) if FIXED else e
    return float(feats.mean()), error


def keep_features(h):
    feats = h.detach().clone()
    box = {"feats": feats}
    if not FIXED:
        box["self"] = box
    del box
    # stands for one of Python's own collections in the middle of a step, at a moment of
    # its choosing: the dict is garbage already, `feats` still a local here
    gc.collect()
    return float(feats.mean())


def evaluate(model, x):
    snapshot = copy.deepcopy(model)
    with torch.no_grad():
        return float(snapshot(x).mean())


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(ARGS.steps):
    x = torch.randn(64, 256)
    out = model(x)
    if ARGS.cycle == "held":
        keep_features(out)
    if ARGS.cycle == "frame":
        log_features(out)
        if ARGS.collect:
            gc.collect()
    loss = out.square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if ARGS.cycle == "module":
        best = copy.deepcopy(model)
    if ARGS.cycle == "snapshot":
        evaluate(model, x)
