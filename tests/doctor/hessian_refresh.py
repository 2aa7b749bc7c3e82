"""An optimizer that refreshes a diagonal Hessian estimate with a backward of its own, as
SophiaG (sophia-opt) does: after each step and zero_grad, a forward, labels sampled from
the model's own logits, their cross-entropy's backward, `update_hessian()` (each gradient
squared into the optimizer's state), and zero_grad again. No step() uses that backward;
`update_hessian` does.

    python hessian_refresh.py              # no finding (once dropped_update: "2 of 5
                                           # backward passes made gradients that no
                                           # optimizer.step() used")
    python hessian_refresh.py --bug skip   # the bug: the refresh's backward runs, its
                                           # update_hessian() is forgotten (dropped_update)
    python hessian_refresh.py --bug norm   # the bug: the gradients are only logged (their
                                           # norm) and the state written from something
                                           # else (dropped_update: Note [Gradients an
                                           # optimizer takes outside its step])
    python hessian_refresh.py --bug leak   # the bug: no zero_grad after update_hessian(),
                                           # so the next step's gradient is summed onto the
                                           # refresh's (grad_leak; once no finding)
    python hessian_refresh.py --bug keep   # the bug (SophiaG's README): the distribution
                                           # kept in a variable, so its normalised logits
                                           # and their softmax, a branch no backward ran,
                                           # keep their saves through the next step
                                           # (cross_step_retention, a warning; once none)
    python hessian_refresh.py --bug keep --no-grad   # the same, sampled under no_grad
                                           # (no finding)
    python hessian_refresh.py --bug keep --every 2 --iters 8   # the refresh every 2nd
                                           # step: `dist` kept through every step between
                                           # (once reported at every 2nd step end only)
    python hessian_refresh.py --bug keep-probs --every 2 --iters 8   # the softmax kept in
                                           # a variable: the same (once, at 5 steps, an
                                           # error saying its graph grows)
    python hessian_refresh.py --bug hist --every 2 --iters 8   # every refresh's softmax
                                           # appended to a list: it grows (an error)
    python hessian_refresh.py --bug keep --save-on-cpu   # the same as --bug keep, every
                                           # save through torch's save_on_cpu hooks (once
                                           # no finding: Note [A branch saved through hooks])
"""
import contextlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""
EVERY = int(sys.argv[sys.argv.index("--every") + 1]) if "--every" in sys.argv else 1
ITERS = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 4
torch.manual_seed(0)


class HessianSGD(torch.optim.Optimizer):
    """SGD scaled by a running estimate of the diagonal Hessian (squared gradients of
    sampled labels), refreshed outside step() by `update_hessian()`."""

    def __init__(self, params, lr=0.1, beta=0.99):
        super().__init__(params, dict(lr=lr, beta=beta))

    @torch.no_grad()
    def update_hessian(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "hessian" not in state:
                    state["hessian"] = torch.zeros_like(p)
                if BUG == "norm":   # logged, and the state written from something else
                    print(f"grad norm {p.grad.norm():.4f}")
                    state["hessian"].mul_(group["beta"]).add_(torch.ones_like(p))
                else:
                    state["hessian"].mul_(group["beta"]).addcmul_(p.grad, p.grad,
                                                                  value=1 - group["beta"])

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                h = self.state[p].get("hessian")
                scale = 1.0 if h is None else 1.0 / (h.sqrt() + 1e-3).clamp(max=1e3)
                p.add_(p.grad * scale, alpha=-group["lr"])


model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = HessianSGD(model.parameters())
# every forward's saves through torch's offload hooks (left at the loop's end)
hooks = torch.autograd.graph.save_on_cpu() if "--save-on-cpu" in sys.argv else \
    contextlib.nullcontext()
with hooks:
    history = []
    for step in range(ITERS):
        x, y = torch.randn(8, 8), torch.randint(0, 4, (8,))
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % EVERY:
            continue
        # the refresh: labels sampled from the model, their loss's gradients into the state
        logits = model(x)
        if BUG == "keep":
            with torch.set_grad_enabled("--no-grad" not in sys.argv):
                dist = torch.distributions.Categorical(logits=logits)
                sampled = dist.sample()
        elif BUG == "keep-probs":
            probs = torch.softmax(logits, -1)
            sampled = torch.multinomial(probs.detach(), 1).squeeze(1)
        elif BUG == "hist":
            history.append(torch.softmax(logits, -1))
            sampled = torch.multinomial(history[-1].detach(), 1).squeeze(1)
        else:
            sampled = torch.distributions.Categorical(logits=logits).sample()
        F.cross_entropy(logits, sampled).backward()
        if BUG != "skip":
            opt.update_hessian()
        if BUG != "leak":
            opt.zero_grad(set_to_none=True)
