"""The doctor's watch on what a loss function was given (checks `double_activation`,
`broadcast_target`, `not_log_probs`, `kl_div_mean`) and the reduction it really used.

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
logits, and probabilities that no softmax node made (`softmax(z).clamp(1e-7)`), are read
from their values instead: Note [Values that are no log-probabilities].

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

# Note [Values that are no log-probabilities]
`F.nll_loss` and `F.kl_div` (`nn.NLLLoss`, `nn.KLDivLoss`) take log-probabilities as their
input. nll_loss returns minus the input's value at the target class: on raw logits (the
`log_softmax` forgotten: `F.nll_loss(model(x), y)`) that is minus the picked logit,
unbounded below, and training drives it to -inf (the targets' logits grow, nothing pushes
the others down). `kl_div(x, t)` is sum t * (log t - x), linear in x: given probabilities
(`F.kl_div(student_probs, teacher_probs)`) it computes sum t log t - t * p, which is no
divergence (it is negative) and trains on silently; given logits it runs away as nll does.

Nothing in the graph tells logits from log-probabilities that a CRF, a custom normaliser,
a mixture's logsumexp or log_softmax made; the values do. Log-probabilities are <= 0, and
a row's logsumexp along the class dimension is 0 (a distribution) or below (some classes
of one). At each nll_loss / kl_div call whose output has a graph, the probe reads the
first rows of the input (at most 2**18 elements: a language model's 50,257-way logits
read 5 rows), for nll_loss only the rows whose target is not `ignore_index` (padding may
hold anything): one max over them, and the rest only when a value exceeds the tolerance
(1e-3; 2e-2 in 16-bit floats. log_softmax's largest value is exactly 0; `torch.log(p +
1e-8)` reaches 1e-8). Then the input is no log-probabilities, and the record says what it
saw: the rows' logsumexp range, the largest value, the loss's value (below 0: no loss on
log-probabilities is), and what the values look like: probabilities (in [0, 1], each row
summing to 1: the `log` is missing) or logits. For kl_div the class dimension is the one
along which the TARGET's rows are distributions (the last, else dimension 1 of an (N, C,
H, W) map); probabilities are named whatever the target, logits only against a target of
distributions. The fix said: `log_softmax` for the input (or the logits to
`F.cross_entropy`); a kl_div target of log-probabilities read as probabilities is named
(arguments swapped?) with `log_target=True`.

Not a finding, each a legitimate input that is no log-softmax, or one that cannot run away:
- log-probabilities of some classes only (a log_softmax over the vocabulary, then a set of
  candidates picked): every value <= 0, the rows' logsumexp below 0;
- every value <= 0, rows summing above 1 (a per-class `logsigmoid`, multi-label
  log-probabilities): nll_loss is then bounded below by 0;
- `nll_loss(..., reduction='none')` on anything: a gather (DQN's Q(s, a) as
  `-F.nll_loss(q, a, reduction='none')`, PPO's chosen action's probability) whose values
  go on into a loss of the script's own;
- the cross-entropy written by hand, `torch.logsumexp(logits, 1).mean() +
  F.nll_loss(logits, y)`: the logits' own logsumexp normalises them. At each `logsumexp`
  of a tensor with a graph, the probe marks the node that made it (through the
  value-preserving ops of the softmax walk) in the node's metadata; an nll_loss / kl_div
  record on the same node, made before or after, is marked `normalised` and not reported
  (`logits.exp().sum(1).log()` written out is not recognised);
- `weight=`: it scales each class's term; the input must be log-probabilities all the same;
- the output of a softmax or sigmoid node: `double_activation`'s finding, not named twice.
Named though perhaps meant: a class-conditional log-density given to nll_loss (a flow per
class, whose log p(x | y) can exceed 0): its -log p(x | y) is unbounded below as well.

`F.ctc_loss` (`nn.CTCLoss`) takes log-probabilities too, (T, N, C) or (T, C) with the
classes last: a speech recognizer's head is `logits.log_softmax(-1)`, and with it
forgotten (`F.ctc_loss(logits.transpose(0, 1), ...)`) or a `softmax` in its place nothing
fails: the loss is -log of a sum over alignments of exp(sum of the values), which on raw
logits reads below 0 (-3.47 at the first step of a Linear(8, 6) over 16 frames) and on
probabilities trains on another quantity (-4.66 there); torch's backward then returns the
gradient it would for log-softmaxed input (exp(input) - the alignments' posterior), no
gradient of the loss it printed. Its values are read as nll_loss's are, over every class
row (no target per row to skip), and whatever made them: a softmax's output is
`probabilities` here, not `double_activation` (whose row check reads dimension 1), and
`reduction='none'` is read too (per-utterance CTC losses are the same wrong quantity).

# Note [kl_div's reduction='mean']
`F.kl_div(..., reduction='mean')`, `nn.KLDivLoss`'s default, divides the summed KL by
every element, N * C, not by the N rows: the value is the KL / C, and its gradient is C
times smaller against any other term (distillation's `kd * T * T + ce` gives the KL 1/C
of the weight the recipe means). torch warns once, from its own file ("'mean' divides the
total loss by both the batch size and the support size"); the doctor names the line and
both values. A `kl_div_mean` warning, not an error: Adam does not see the scale of a loss
trained alone. Only when the target's rows are distributions (probabilities along a
dimension; log-probabilities with `log_target=True`): kl_div used as a pointwise term on
the script's own quantities may mean the mean. Not: `'batchmean'`, `'sum'`, `'none'`
(however passed: Note [A reduction however it was passed]), a 1-D input (mean and
batchmean divide by the same count).

# Note [A reduction however it was passed]
The checks read the reduction a loss call used: `loss_not_divided` spares `'sum'` (K sums
add up to the step's sum), `token_denominator` weighs `'mean'` only, `broadcast_target`
spares `'none'` on operands of one rank, `not_log_probs` spares nll_loss's `'none'`,
`kl_div_mean` reads `'mean'`. torch takes it three ways: `reduction` by keyword or by
position (`F.mse_loss(a, b, None, None, 'sum')`); the deprecated `size_average` / `reduce`,
which decide instead of `reduction` whenever either is not None
(`_Reduction.legacy_get_string`: `size_average=False` is a sum, `reduce=False` none); and a
loss module's own (`nn.MSELoss(reduction='sum')`, `nn.NLLLoss(size_average=False)`: the
module folds the legacy pair into `self.reduction` when built and passes it by keyword).
The torch function mode gets what the functional's `handle_torch_function` hands it
(torch 2.x names everything after input and target, but `gaussian_nll_loss` passes `var`
by position). The probe read `kwargs['reduction']` alone: `F.cross_entropy(logits, labels,
size_average=False)` per micro-batch read as a mean and drew `loss_not_divided` and
`token_denominator` warnings on a loop that sums as it should, and a pairwise
`F.mse_loss(a[:, None], b[None], reduce=False)` read 'mean' and drew `broadcast_target`.
Now the call's arguments are bound to the function's own parameter names (read once per
function with `inspect.signature`) and the legacy pair decides as torch decides
(`legacy_get_string(..., emit_warning=False)`: torch has warned already).
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import sys
from typing import Any

import torch
from torch.nn import _reduction

_Tensor = torch.Tensor

# losses that take logits / log-probabilities, and the position of their input
_LOGIT_LOSSES = frozenset({"cross_entropy", "binary_cross_entropy_with_logits", "nll_loss",
                           "kl_div", "ctc_loss"})
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
    node = _source(t)
    made = _MADE_BY.get(type(node).__name__.rstrip("0123456789")) if node is not None else None
    return (made, node) if made is not None else None


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


def activation_twice(fn: str, args: tuple, kwargs: dict, out: Any,
                     made: tuple[str, Any] | None) -> dict[str, Any] | None:
    """The `double_activation` record's fields for a loss call whose input `_made_by`
    found `made`, or None."""
    if made is None:
        return None
    inp, target = _operands(fn, args, kwargs)
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


# ---- Note [A reduction however it was passed] -------------------------------------------
_PARAMS: dict[Any, tuple[str, ...]] = {}


def _bound(func, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by the function's own parameter names."""
    names = _PARAMS.get(func)
    if names is None:
        try:
            names = tuple(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            names = ()
        _PARAMS[func] = names
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def call_args(fn: str, func, args: tuple, kwargs: dict) -> tuple[Any, int, str]:
    """(target, ignore_index, reduction) of a loss call, however they were passed; the
    target and ignore_index of cross_entropy / nll_loss only (class indices)."""
    b = _bound(func, args, kwargs)
    size_average, reduce = b.get("size_average"), b.get("reduce")
    if size_average is not None or reduce is not None:   # torch's own rule
        reduction = _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    else:
        reduction = b.get("reduction", "mean")
    if fn not in ("cross_entropy", "nll_loss"):
        return None, -100, str(reduction)
    ignore = b.get("ignore_index", -100)
    return b.get("target"), int(ignore if ignore is not None else -100), str(reduction)


# ---- Note [Values that are no log-probabilities], Note [kl_div's reduction='mean'] --------
_ROWS = 1 << 18   # the most input elements read per call (at least one row)
# the graph node's metadata keys: a logsumexp of what this node made was taken (the
# script normalises it itself), and the not_log_probs records waiting on that
_NORMALISED = "memledger.doctor.logsumexp"
_PENDING = "memledger.doctor.not_log_probs"


def _tol(t: _Tensor) -> float:
    return 2e-2 if t.dtype in (torch.float16, torch.bfloat16) else 1e-3


def _head(t: _Tensor) -> _Tensor:
    """`t`'s first rows (dimension 0), at most _ROWS elements but at least one row."""
    if t.dim() < 2 or t.numel() <= _ROWS:
        return t
    per = max(1, t.numel() // max(1, t.shape[0]))
    return t[:max(1, _ROWS // per)]


def _source(t: _Tensor):
    """The graph node that made `t`'s values, through value-preserving ops; or None."""
    node = t.grad_fn
    for _ in range(12):
        if node is None:
            return None
        if type(node).__name__.rstrip("0123456789") not in _PASS:
            return node
        nxt = node.next_functions
        node = nxt[0][0] if nxt else None
    return None


# the graph node's metadata key under which the probe notes the call of a training module
# that returned the tensor this node made: (id(module), the call's number) (Note [Segments
# are no heads] in memledger/doctor/accumulation.py)
MADE_BY_CALL = "memledger.doctor.made_by_call"


def made_by_call(t: Any) -> list[int] | None:
    """[id(module), call number] of the training module call that returned `t`'s values,
    through value-preserving ops (`model(x).transpose(1, 2)`); None where none is known
    (Note [Segments are no heads] in memledger/doctor/accumulation.py)."""
    node = t.grad_fn if isinstance(t, _Tensor) else None
    for _ in range(12):
        if node is None:
            return None
        meta = _metadata(node)
        made = meta.get(MADE_BY_CALL) if meta is not None else None
        if made is not None:
            return list(made)
        if type(node).__name__.rstrip("0123456789") not in _PASS:
            return None
        nxt = node.next_functions
        node = nxt[0][0] if nxt else None
    return None


def _metadata(node) -> dict | None:
    with contextlib.suppress(AttributeError, RuntimeError):
        return node.metadata if node is not None else None
    return None


def logsumexp_taken(t: Any) -> None:
    """`torch.logsumexp(t, ...)` under grad: the node that made `t` is normalised by the
    script itself (the cross-entropy written by hand); records waiting on it are marked."""
    if not isinstance(t, _Tensor) or t.grad_fn is None:
        return
    meta = _metadata(_source(t))
    if meta is None:
        return
    meta[_NORMALISED] = True
    for rec in meta.pop(_PENDING, ()):
        rec["normalised"] = "logsumexp"


def _dims(x: _Tensor) -> list[int]:
    """Where a distribution's classes may lie: the last dimension, or 1 of (N, C, H, W)."""
    return [x.dim() - 1] + ([1] if x.dim() > 2 else [])


def _distributed(x: _Tensor, log: bool, dims: list[int]) -> tuple[int, float] | None:
    """(the first of `dims` along which every row of `x` is a distribution: probabilities,
    or log-probabilities when `log`; the largest error of a row's sum), or None."""
    tol = _tol(x)
    xf = x.float()
    if log:
        if not float(xf.amax()) <= tol:
            return None
    else:
        lo, hi = torch.aminmax(xf)
        if not (float(lo) >= -tol and float(hi) <= 1 + tol):
            return None
    for d in dims:
        if x.shape[d] < 2:
            continue
        err = float((torch.logsumexp(xf, d) if log else xf.sum(d) - 1).abs().max())
        if err <= tol:
            return d, err
    return None


def _value(out: Any) -> dict[str, float]:
    if isinstance(out, _Tensor) and out.numel() == 1:
        return {"value": round(float(out.detach().float()), 4)}
    return {}


def _rows_seen(inp: _Tensor, dim: int, rows: _Tensor, kind: str, fn: str,
               out: Any) -> dict[str, Any]:
    """The `not_log_probs` record: what the rows (N', C) of the input looked like."""
    lse = torch.logsumexp(rows, -1)
    lo, hi = torch.aminmax(lse)
    vlo, vhi = torch.aminmax(rows)
    rec: dict[str, Any] = {
        "k": "not_log_probs", "fn": fn, "kind": kind, "shape": list(inp.shape),
        "classes": int(inp.shape[dim]), "dim": dim, "rows": int(rows.shape[0]),
        "lse_min": round(float(lo), 4), "lse_max": round(float(hi), 4),
        "min": round(float(vlo), 4), "max": round(float(vhi), 4),
        "module": _module_of(), **_value(out)}
    if kind == "probabilities":   # their logsumexp says nothing
        del rec["lse_min"], rec["lse_max"]
        rec["row_sum_error"] = round(float((rows.sum(-1) - 1).abs().max()), 6)
    return rec


def _pending(inp: _Tensor, rec: dict[str, Any]) -> dict[str, Any] | None:
    """None when the script took the logsumexp of these logits already; else `rec`, which
    a logsumexp taken later marks `normalised` (Note [Values that are no
    log-probabilities])."""
    meta = _metadata(_source(inp))
    if meta is None:
        return rec
    if meta.get(_NORMALISED):
        return None
    meta.setdefault(_PENDING, []).append(rec)
    return rec


def _nll_input(inp: _Tensor, target: Any, ignore: int, reduction: str,
               out: Any) -> dict[str, Any] | None:
    if reduction == "none":
        return None   # a gather: the script's own loss follows
    dim = 1 if inp.dim() > 1 else 0
    classes = int(inp.shape[dim])
    if classes < 2:
        return None
    tol = _tol(inp)
    x = _head(inp).detach()
    xf = x.float()
    if not float(xf.amax()) > tol:
        return None   # every value <= 0: log-probabilities (of all the classes or some)
    labels = isinstance(target, _Tensor) and not target.is_floating_point()
    if inp.dim() == 2 and labels and tuple(target.shape) == (inp.shape[0],):
        # (N, C), a language model's flattened tokens: the first rows the loss reads (a
        # prompt labelled ignore_index may fill the first ones)
        keep = (target != ignore).nonzero().flatten()[:max(1, _ROWS // classes)]
        rows = inp.detach()[keep].float()
    else:
        rows = xf.movedim(dim, -1)
        if labels:
            t = target[:x.shape[0]] if x.dim() > 1 else target
            if tuple(t.shape) == tuple(rows.shape[:-1]):
                rows = rows[t != ignore]   # only the rows the loss reads
    rows = rows.reshape(-1, classes)
    if rows.shape[0] == 0 or not float(rows.amax()) > tol:
        return None
    lo, hi = torch.aminmax(rows)
    kind = "probabilities" if float(lo) >= -tol and float(hi) <= 1 + tol else "logits"
    rec = _rows_seen(inp, dim, rows, kind, "nll_loss", out)
    return _pending(inp, rec) if kind == "logits" else rec


def _ctc_input(inp: _Tensor, out: Any) -> dict[str, Any] | None:
    """`ctc_loss`'s log_probs, (T, N, C) or (T, C): the classes last (Note [Values that
    are no log-probabilities])."""
    dim = inp.dim() - 1
    classes = int(inp.shape[dim])
    tol = _tol(inp)
    if classes < 2 or not float(_head(inp).detach().float().amax()) > tol:
        return None   # every value <= 0: log-probabilities
    rows = _head(inp).detach().float().reshape(-1, classes)
    lo, hi = torch.aminmax(rows)
    kind = "probabilities" if float(lo) >= -tol and float(hi) <= 1 + tol else "logits"
    rec = _rows_seen(inp, dim, rows, kind, "ctc_loss", out)
    return _pending(inp, rec) if kind == "logits" else rec


def _kl_inputs(func, args: tuple, kwargs: dict, reduction: str,
               out: Any) -> list[dict[str, Any]]:
    b = _bound(func, args, kwargs)
    inp, target = b.get("input"), b.get("target")
    if not isinstance(inp, _Tensor) or not isinstance(target, _Tensor) or \
            not inp.is_floating_point() or not target.is_floating_point():
        return []
    log_target = bool(b.get("log_target", False))
    x = _head(inp).detach()
    dims = _dims(x)
    tdim, tkind = None, ""
    if tuple(target.shape) == tuple(inp.shape):
        th = _head(target).detach()
        got = _distributed(th, log_target, dims)
        if got is not None:
            tdim, tkind = got[0], "log-probabilities" if log_target else "probabilities"
        elif not log_target:
            got = _distributed(th, True, dims)
            if got is not None:   # log-probabilities where probabilities are read
                tdim, tkind = got[0], "log-probabilities read as probabilities"
    found: list[dict[str, Any]] = []
    probs = _distributed(x, False, [tdim] if tdim is not None else dims)
    rec = None
    if probs is not None:
        dim = probs[0]
        rec = _rows_seen(inp, dim, x.float().movedim(dim, -1).reshape(-1, x.shape[dim]),
                         "probabilities", "kl_div", out)
    elif tdim is not None and reduction != "none" and x.shape[tdim] > 1 and \
            float(x.float().amax()) > _tol(inp):
        rows = x.float().movedim(tdim, -1).reshape(-1, x.shape[tdim])
        rec = _pending(inp, _rows_seen(inp, tdim, rows, "logits", "kl_div", out))
    if rec is not None:
        rec.update(target=tkind, log_target=log_target)
        found.append(rec)
    if reduction == "mean" and tkind in ("probabilities", "log-probabilities") and \
            inp.dim() >= 2 and inp.numel() > inp.shape[0]:
        mean = {"k": "kl_div_mean", "fn": "kl_div", "module": _module_of(),
                "shape": list(inp.shape), "classes": int(inp.shape[tdim]),
                "elements": int(inp.numel()), "batch": int(inp.shape[0]),
                "target": tkind}
        if isinstance(out, _Tensor) and out.numel() == 1:   # 4 digits: a KL / C is small
            v = float(out.detach().float())
            mean["value"] = float(f"{v:.4g}")
            mean["batchmean"] = float(f"{v * inp.numel() / inp.shape[0]:.4g}")
        found.append(mean)
    return found


def loss_inputs(fn: str, func, args: tuple, kwargs: dict, target: Any, ignore: int,
                reduction: str, out: Any) -> list[dict[str, Any]]:
    """The records of what a loss call was given (Notes above), each with its kind `k`;
    the probe adds step, file and line to each in place."""
    found: list[dict[str, Any]] = []
    made = None
    if fn in _LOGIT_LOSSES:
        inp = _operands(fn, args, kwargs)[0]
        if isinstance(inp, _Tensor) and inp.grad_fn is not None:
            made = _made_by(inp)
        twice = activation_twice(fn, args, kwargs, out, made) if fn != "ctc_loss" else None
        if twice is not None:
            found.append({"k": "double_activation", **twice})
        if fn == "ctc_loss":   # its values whatever made them: a softmax's included
            if isinstance(inp, _Tensor) and inp.is_floating_point() and inp.dim() > 0 \
                    and inp.numel() > 0 and (rec := _ctc_input(inp, out)) is not None:
                found.append(rec)
        elif made is None and fn == "nll_loss" and isinstance(inp, _Tensor) and \
                inp.is_floating_point() and inp.dim() > 0 and inp.numel() > 0:
            rec = _nll_input(inp, target, ignore, reduction, out)
            if rec is not None:
                found.append(rec)
        elif made is None and fn == "kl_div":
            found.extend(_kl_inputs(func, args, kwargs, reduction, out))
        elif fn == "kl_div" and made[0] == "softmax":   # type: ignore[index]
            # probabilities: double_activation's; the mean is still judged
            found.extend(r for r in _kl_inputs(func, args, kwargs, reduction, out)
                         if r["k"] == "kl_div_mean")
    wide = broadcast_target(fn, func, args, kwargs, reduction, out)
    if wide is not None:
        found.append({"k": "broadcast_target", **wide})
    return found
