"""The doctor's watch on what a loss function was given (checks `double_activation` and
`broadcast_target`).

# Note [An activation the loss applies again]
`F.cross_entropy` (and `nn.CrossEntropyLoss`) applies `log_softmax` to its input, and
`F.binary_cross_entropy_with_logits` (`nn.BCEWithLogitsLoss`) a sigmoid: they take logits.
Given probabilities (`F.cross_entropy(torch.softmax(logits, -1), y)`, a model ending in
`nn.Softmax` trained with `nn.CrossEntropyLoss`, `nn.BCEWithLogitsLoss()(torch.sigmoid(z),
t)`), the activation runs twice. Nothing fails: the loss falls a little and stops, since
its input lies in [0, 1] (with C classes cross-entropy on probabilities cannot go below
log(e + C - 1) - 1: 1.46 for 10 classes), and the gradient through the second squashing is
small. `F.nll_loss` and `F.kl_div` take log-probabilities: given `softmax`'s probabilities
they compute -p_y, not -log p_y.

What the script ran decides, not its text: at the loss call the probe walks the input's
graph from its `grad_fn` through ops that move values without changing them (view,
reshape, transpose, permute, squeeze, unsqueeze, slice, select, index, alias, clone, a
dtype cast: the shift of a language model's logits, `view(-1, V)`, autocast's cast) and
looks at the op that made them: `SoftmaxBackward0` or `SigmoidBackward0` (torch.softmax,
F.softmax, Tensor.softmax, nn.Softmax; torch.sigmoid, nn.Sigmoid). A softmax passed to
cross_entropy or nll_loss is confirmed by its values: every row along the loss's class
dimension sums to 1 (so a softmax over another dimension, whose rows are no distribution
over the classes, is not named). Only a loss whose output carries a graph is looked at
(Note [A loss no backward can run from] in doctor_probe.py); the walk is a few attribute
reads, and the values are read only when a softmax or sigmoid is found. A model that ends
in an `nn.Softmax` / `nn.Sigmoid` module is named by it: at each call of one, the probe's
module pre-hook notes the module's path in the metadata of the graph node that made its
input (`ACTIVATION_MODULE`; one type test per module call), and the finding reads it from
the activation node's input ("the model's nn.Softmax `3`"; fix: drop it from the forward
that trains).

Not a finding: the target made by a softmax (knowledge distillation's soft targets given
to cross_entropy as probabilities, `F.kl_div(F.log_softmax(s / T), F.softmax(t / T))`),
`log_softmax` + `nll_loss`, `log_softmax` then `cross_entropy` (log_softmax is idempotent:
the loss is the same), `torch.log(probs)` + `nll_loss`, label smoothing, `F.binary_cross_entropy` on a
sigmoid (the pair it is meant for), and an input that reaches the softmax through an op
that changes values (`torch.log(p + eps)`, a mixture's weighted sum). `F.nll_loss` on raw
logits is the same mistake but nothing at the call tells logits from log-probabilities
made another way (a CRF's, a custom normaliser's): not looked for.

# Note [A loss that broadcasts its target]
The elementwise losses (`F.mse_loss`, `F.l1_loss`, `F.smooth_l1_loss`, `F.huber_loss` and
their modules) broadcast input against target. A regression head's `(N, 1)` against a
target of `(N,)` broadcasts to `(N, N)`: every prediction is compared with every target,
torch warns once ("Using a target size ... that is different to the input size"), and the
model learns the batch's mean. At the call the probe compares the two shapes: a finding
when the broadcast shape holds more elements than either operand (each was expanded: an
outer product), with the two shapes, the broadcast one and the loss the script meant
(the same call on the operands reshaped alike, when they hold as many elements). Not a
finding: a target expanded against a larger input (a constant target vector `(D,)` or
`(1, D)` against `(N, D)`, a scalar target: the broadcast has the input's elements), equal
shapes, and `reduction='none'` on operands of the same number of dimensions (a pairwise
`a[:, None] - b[None]` the script wrote on purpose: its size-1 dimensions are its own).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Any

import torch

_Tensor = torch.Tensor

# losses that take logits / log-probabilities, and the position of their input
_LOGIT_LOSSES = frozenset({"cross_entropy", "binary_cross_entropy_with_logits", "nll_loss",
                           "kl_div"})
_ELEMENTWISE = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"})
# graph nodes that move values without changing them (names without the trailing number)
_PASS = frozenset({"ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward",
                   "TransposeBackward", "TBackward", "PermuteBackward", "SqueezeBackward",
                   "UnsqueezeBackward", "SliceBackward", "SelectBackward", "IndexBackward",
                   "AliasBackward", "CloneBackward", "ToCopyBackward", "AsStridedBackward"})
_MADE_BY = {"SoftmaxBackward": "softmax", "SigmoidBackward": "sigmoid"}


# the graph node's metadata key under which the probe notes the nn.Softmax / nn.Sigmoid
# module that a tensor made by this node went into (doctor_probe.py's `_module_pre`)
ACTIVATION_MODULE = "memledger.doctor.activation_module"
ACTIVATION_MODULES = (torch.nn.Softmax, torch.nn.Sigmoid)


def _made_by(t: _Tensor) -> tuple[str, Any] | None:
    """('softmax' or 'sigmoid', its graph node) when the op that made `t` was one, through
    value-preserving ops only (Note [An activation the loss applies again])."""
    node = t.grad_fn
    for _ in range(12):
        if node is None:
            return None
        name = type(node).__name__.rstrip("0123456789")
        made = _MADE_BY.get(name)
        if made is not None:
            return made, node
        if name not in _PASS:
            return None
        nxt = node.next_functions
        node = nxt[0][0] if nxt else None
    return None


def _activation_module(node) -> str:
    """The nn.Softmax / nn.Sigmoid module whose input the activation's node took, as the
    probe noted it (`3 (Softmax)`), or ''."""
    with contextlib.suppress(AttributeError, RuntimeError, IndexError):
        src = node.next_functions[0][0]
        if src is not None:
            return str(src.metadata.get(ACTIVATION_MODULE, ""))
    return ""


_LOSS_FILE = os.path.join("nn", "modules", "loss.py")


def _module_of() -> str:
    """The loss module (`CrossEntropyLoss`) whose forward called the loss function, or ''
    for a functional call: a few frames up, read only when there is a finding."""
    f = sys._getframe(2)
    for _ in range(10):
        if f is None:
            return ""
        if f.f_code.co_filename.endswith(_LOSS_FILE) and f.f_code.co_name == "forward":
            return f"nn.{type(f.f_locals.get('self')).__name__}"
        f = f.f_back
    return ""


def _operands(fn: str, args: tuple, kwargs: dict) -> tuple[Any, Any]:
    inp = args[0] if args else kwargs.get("input")
    target = args[1] if len(args) > 1 else kwargs.get("target")
    return inp, target


def activation_twice(fn: str, args: tuple, kwargs: dict, out: Any) -> dict[str, Any] | None:
    """The `double_activation` record's fields for a loss call, or None."""
    if fn not in _LOGIT_LOSSES:
        return None
    inp, target = _operands(fn, args, kwargs)
    if not isinstance(inp, _Tensor) or inp.grad_fn is None:
        return None
    made = _made_by(inp)
    if made is None:
        return None
    op, node = made
    rec: dict[str, Any] = {"fn": fn, "op": op, "shape": list(inp.shape),
                           "module": _module_of(), "activation": _activation_module(node)}
    with torch.no_grad(), contextlib.suppress(RuntimeError, TypeError, ValueError):
        lo, hi = torch.aminmax(inp.detach().float())
        rec["min"], rec["max"] = round(float(lo), 4), round(float(hi), 4)
        if isinstance(out, _Tensor) and out.numel() == 1:
            rec["value"] = round(float(out.detach().float()), 4)
    if op == "softmax" and fn in ("cross_entropy", "nll_loss"):
        # a distribution over the loss's classes (dimension 1, or 0 of a 1-D input)?
        dim = 1 if inp.dim() > 1 else 0
        with torch.no_grad(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            sums = inp.detach().float().sum(dim)
            rec["row_sum_error"] = round(float((sums - 1).abs().max()), 6) \
                if sums.numel() else 0.0
        if rec.get("row_sum_error", 1.0) > 1e-3:
            return None   # a softmax over another dimension: no probabilities of the classes
        classes = int(inp.shape[dim])
        rec["classes"] = classes
        if fn == "cross_entropy" and classes > 1:
            # the least cross_entropy can be on probabilities: p_y = 1, the others 0
            rec["floor"] = round(math.log(math.e + classes - 1) - 1, 4)
    return rec


def broadcast_target(fn: str, func, args: tuple, kwargs: dict, reduction: str,
                     out: Any) -> dict[str, Any] | None:
    """The `broadcast_target` record's fields for an elementwise loss call, or None
    (Note [A loss that broadcasts its target])."""
    if fn not in _ELEMENTWISE:
        return None
    inp, target = _operands(fn, args, kwargs)
    if not isinstance(inp, _Tensor) or not isinstance(target, _Tensor) or \
            inp.shape == target.shape:
        return None
    try:
        shape = torch.broadcast_shapes(inp.shape, target.shape)
    except RuntimeError:
        return None
    n = math.prod(shape)
    if n <= max(inp.numel(), target.numel()):
        return None   # one operand expanded against the other: a target per feature
    if reduction == "none" and inp.dim() == target.dim():
        return None   # a pairwise difference written on purpose
    rec: dict[str, Any] = {"fn": fn, "input": list(inp.shape), "target": list(target.shape),
                           "broadcast": list(shape), "module": _module_of()}
    if isinstance(out, _Tensor) and out.numel() == 1:
        with torch.no_grad(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            rec["value"] = round(float(out.detach().float()), 4)
    if inp.numel() == target.numel() and reduction in ("mean", "sum"):
        rest = {k: v for k, v in kwargs.items() if k not in ("input", "target")}
        with torch.no_grad(), contextlib.suppress(RuntimeError, TypeError, ValueError):
            meant = func(inp.detach().reshape(target.shape), target.detach(), *args[2:],
                         **rest)
            rec["meant"] = round(float(meant.float()), 4)
    return rec
