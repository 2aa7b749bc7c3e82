"""Planted bug (check 8): a gradient filter run after optimizer.step(), its change lost.

Grokfast's EMA filter (Lee et al. 2024) amplifies each gradient by an EMA of the past ones
and belongs between backward() and step(); here it runs after the step, and the
zero_grad() that follows clears what it wrote before any step reads it.

    --bug after    the filter after opt.step(), rebinding `p.grad.data` (as the paper's code)
    --inplace      the filter adds in place (`p.grad.add_`) instead of rebinding
    --fixed        the filter between backward() and opt.step()
    --clip-after   no filter; clip_grad_norm_ after opt.step() (check 8's clip_order alone)
    --set-none     zero_grad(set_to_none=True) (default: set_to_none=False)
    --clear HOW    no zero_grad(): each gradient cleared by hand, `none` (`p.grad = None`),
                   `zero` (`p.grad.zero_()`) or `detach` (`p.grad.detach_()` then
                   `p.grad.zero_()`): the same bug (Note [A gradient cleared by hand]; no
                   finding before), and no finding with --fixed; `mul` (`p.grad.mul_(0)`),
                   `fill` (`p.grad.fill_(0)`), `data` (`p.grad.data.zero_()`) or
                   `foreach` (`torch._foreach_zero_` of the gradients): the same (no
                   finding before; `data` said grad_leak, also with --fixed: Note [A
                   gradient written through .data]); `mul-tensor` (`p.grad.mul_(torch.zeros(
                   ()))`), `imul-tensor` (`p.grad *= torch.tensor(0.)`), `zeros-like`
                   (`p.grad = torch.zeros_like(p)`), `times-zero` (`p.grad = p.grad * 0`),
                   `data-set` (`p.grad.data = torch.zeros_like(p.grad)`): the same (no
                   finding before: Note [A clear by a zero tensor, a zero tensor set])
    --inplace-data the filter adds through `.data` in place (`p.grad.data.add_`): the
                   gradient's own version, id and pointer stay (no finding before: Note [A
                   write through a gradient's .data])
"""
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "after"
FIXED = "--fixed" in sys.argv
CLIP = "--clip-after" in sys.argv
CLEAR = sys.argv[sys.argv.index("--clear") + 1] if "--clear" in sys.argv else ""
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ema = {}


def grad_filter():
    for n, p in model.named_parameters():
        ema[n] = ema[n] * 0.9 + p.grad.detach() * 0.1 if n in ema else p.grad.detach().clone()
        if "--inplace" in sys.argv:
            p.grad.add_(ema[n], alpha=2.0)
        elif "--inplace-data" in sys.argv:
            p.grad.data.add_(ema[n], alpha=2.0)
        else:
            p.grad.data = p.grad.data + ema[n] * 2.0


for step in range(4):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    if FIXED and not CLIP:
        grad_filter()
    opt.step()
    if CLIP:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    elif not FIXED:
        grad_filter()
    if not CLEAR:
        opt.zero_grad(set_to_none="--set-none" in sys.argv)
    for p in model.parameters() if CLEAR and CLEAR != "foreach" else ():
        if CLEAR == "none":
            p.grad = None
        elif CLEAR == "mul":
            p.grad.mul_(0)
        elif CLEAR == "fill":
            p.grad.fill_(0)
        elif CLEAR == "data":
            p.grad.data.zero_()
        elif CLEAR == "mul-tensor":
            p.grad.mul_(torch.zeros(()))
        elif CLEAR == "imul-tensor":
            p.grad *= torch.tensor(0.)
        elif CLEAR == "zeros-like":
            p.grad = torch.zeros_like(p)
        elif CLEAR == "times-zero":
            p.grad = p.grad * 0
        elif CLEAR == "data-set":
            p.grad.data = torch.zeros_like(p.grad)
        else:
            if CLEAR == "detach":
                p.grad.detach_()
            p.grad.zero_()
    if CLEAR == "foreach":
        torch._foreach_zero_([p.grad for p in model.parameters()])
    print(f"step {step}  loss {loss.item():.4f}")
