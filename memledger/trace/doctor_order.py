"""Where gradient clipping and `optimizer.step()` fall against backward, for the doctor.

Kept by the doctor's probe (memledger/trace/doctor_probe.py), which feeds it from the hooks
it has anyway: the tensor hook before a backward adds into a parameter's `.grad`, the
optimizer step pre/post hooks, and its `TorchFunctionMode` (the `.grad` reads of
`torch.nn.utils.clip_grad_norm_` / `clip_grad_value_`, the multiply in
`GradScaler.scale()`, the unscale op of `GradScaler.unscale_()`). It writes `clip` records
and adds fields to the probe's `step` records; memledger/doctor/order.py judges them.

# Note [Where a clip and a step fall]
A clip call reads `p.grad` of every parameter it was given. For each, at that moment:

1. the gradient is exactly as an optimizer step left it (same tensor, same version, no
   backward since): the clip comes *after* the step that used it (`used`, with that step);
2. otherwise (None, zeroed, or holding this step's gradient) the clip waits: if a backward
   then adds into that parameter before a step uses it, the clip came *before* backward
   (`_early`); if the step comes first, the step's gradient was clipped (`clipped`);
3. the gradient holds a GradScaler-scaled backward's contribution that no
   `scaler.unscale_()` has divided back: the clip sees scaled values (`scaled`).

Example: K=2 micro-batches, then clip, then step: backward 1 and 2 fill `fc.weight.grad`,
the clip finds it unused (rule 2), the step finds it clipped: nothing to report. `clip;
backward; step`: the backward arrives after the clip (rule 2): the step uses an unclipped
gradient (`clip_early` in its record). `backward; step; clip; zero_grad`: rule 1, `used`
names step N, whose record has no `clipped`. A clip that only reads the norm for logging
(`max_norm=inf`) changes nothing and is not recorded.

A step is a repeat (`double_step`) when no backward reached any of its optimizer's
parameters since that optimizer's previous step and at least one still holds the gradient
exactly as that step left it: the same backward's gradient applied again. A step whose
closure runs backward (LBFGS) is read after the closure (Note [A step that runs its
closure]), so its gradients are fresh; a GradScaler step skipped on inf calls no
`optimizer.step()` at all; another optimizer's step is another optimizer's.

# Note [A gradient written after the step]
A gradient changed after the step that used it and cleared by a `zero_grad()` before any
step read it changed nothing: the change is lost. Grokfast's filters (Lee et al. 2024)
amplify each gradient by an EMA of the past ones, `p.grad.data = p.grad.data + ema * lamb`,
and must run between backward and step; run after `opt.step()` (tests/clients/
train_grokfast.py `--opt adamw --filter ema --bug filter-after-step`, or tests/doctor/
late_grad_write.py) every step used the raw gradient, and the doctor said nothing: check
8 knew this order for torch's clip functions alone. Each step leaves, per parameter, its
gradient's identity, version and data pointer (`p.grad.data = x` keeps the tensor and its
version, and moves the pointer); a `zero_grad` that reads a gradient no backward reached
since (`grad_arrives` forgets the step's entry) and finds any of the three changed writes a
`late_write` record at the zero_grad's line, by the step that used it. A clip after the step
is check 8's finding already and is left out here, and so is a norm read for logging
(`clip_grad_norm_(ps, inf)` multiplies by 1 in place); a backward's own accumulation is
no write (it forgets the entry first); a sparse gradient, or a DTensor's (a wrapper with no
storage of its own), has no one pointer (its version still moves). Example: backward;
step 1 (leaves `fc.weight.grad` at version 0, pointer A); the filter rebinds it (pointer
B); `zero_grad()`: pointer B != A: `late_write` for step 1 at the zero_grad line.

# Note [A gradient cleared by hand]
The same change is lost when the script clears the gradient itself instead of calling
`zero_grad()`: `p.grad = None`, `p.grad.zero_()`, or `p.grad.detach_(); p.grad.zero_()`
(what `zero_grad(set_to_none=False)` does, written out) for each parameter. No zero_grad
read those gradients, so the check saw nothing (hunt53c's "Seen, left alone";
tests/doctor/late_grad_write.py `--clear none|zero|detach`: "no findings in 3 steps").
The probe now reads both: a set of `p.grad` to None by the script (the `grad` descriptor's
`__set__`, which its TorchFunctionMode sees already) is compared as a zero_grad's read is,
before it runs; a `Tensor.zero_` on a tensor the script got by reading `p.grad` of a
parameter whose step entry is still open (`read_by_script` keeps those reads, by the
tensor's id, until the next step; the parameter's `.grad` must still be that tensor) is
compared before it zeroes. The record names how it was cleared (`how`), the line is the
clearing line. A correct loop that clears by hand (the gradient as the step left it) gives
nothing (`--fixed --clear ...`). A clear is any in-place op that sets every element to 0
(a non-finite one times 0 aside): `zero_`
(`torch.zero_` too), `mul_` or `*=` by the number 0, `fill_(0)`, and `torch._foreach_zero_`
or `_foreach_mul_(grads, 0)` of a list of them (fifty-fourth session: fix53d had read
`zero_` alone, and `mul_(0)`, `fill_(0)` after a late write gave no finding); a factor that
is a tensor of zeros too (Note [A clear by a zero tensor, a zero tensor set]). A clear
through `p.grad.data` (an alias with a version counter of its own) is the same clear: Note
[A gradient written through .data] in doctor_probe.py. The per-op cost is now a truth test
of `reads` per op outside a step, and a dict lookup of the op only while reads are kept.

# Note [A clear by a zero tensor, a zero tensor set]
A clear need not name the number 0. `p.grad.mul_(torch.zeros(()))` and `p.grad *=
torch.tensor(0.)` (torch sees both as `mul_` with a tensor factor), and `p.grad =
torch.zeros_like(p)` or `p.grad = p.grad * 0` (a fresh tensor of zeros set: the values the
step used are gone all the same) threw away a late write unseen: tests/doctor/
late_grad_write.py `--clear mul-tensor|imul-tensor|zeros-like|times-zero` said "no
findings in 3 steps" (fifty-fifth session). A factor or fill value that is a tensor is
now read (its values, with no mode watching: one read per such op on a gradient the
script read after its step, nothing on any other op), and a tensor set as `.grad` (or as
`.grad.data`: Note [A gradient's .data set] in doctor_probe.py) while the parameter's
step entry is open is read the same way: all zeros is a clear, compared as a
zero_grad's read is, before it runs. A set of anything else is a write, which the next
clear sees (the tensor's id or pointer moved). Only plain strided tensors are read (a
DTensor's values would take a collective; a sparse factor is left alone). A correct loop
that clears so gives nothing; the next backward reads these gradients' values (their id
or version moved), so none ever gave a false `grad_leak`.

# Note [A write through a gradient's .data]
`p.grad.data.add_(x)` after the step writes the gradient through an alias with a version
counter of its own: the gradient's version, id and pointer stay as the step left them,
and the zero_grad after it found nothing changed (tests/doctor/late_grad_write.py
`--inplace-data`: "no findings", fix54b's "left alone"). The alias is kept with the
script's reads (Note [A gradient written through .data] in doctor_probe.py), so an
in-place op on it other than a clear (any op whose name ends in one `_`, `__iadd__` and
kin) marks its parameter written (`_through`); the next clear of that gradient, by any
means, compares as if its version had moved. Cost: while reads are kept, an id lookup of
the op's first argument among the live aliases.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
import torch.nn.utils.clip_grad
from torch.utils._python_dispatch import _disable_current_modes

_CLIP_FILE = torch.nn.utils.clip_grad.__file__
# the clip functions of torch.nn.utils and the argument that says how hard they clip
CLIP_LIMITS = {"clip_grad_norm_": "max_norm", "clip_grad_norm": "max_norm",
               "_clip_grads_with_norm_": "max_norm", "clip_grad_value_": "clip_value"}
_PUBLIC = {"_clip_grads_with_norm_": "clip_grads_with_norm_"}
_PLAIN = (torch.Tensor, torch.nn.Parameter)   # tensors whose values `_all_zero` reads


def clip_frame(frame) -> tuple[Any, str, str]:
    """(frame, function name, limit argument) of the outermost torch clip function on the
    stack from `frame` up while frames stay in torch's clip_grad.py; (None, "", "")."""
    found: tuple[Any, str, str] = (None, "", "")
    f = frame
    while f is not None and f.f_code.co_filename == _CLIP_FILE:
        arg = CLIP_LIMITS.get(f.f_code.co_name)
        if arg:
            found = (f, _PUBLIC.get(f.f_code.co_name, f.f_code.co_name), arg)
        f = f.f_back
    return found


def clips_nothing(limit: Any) -> bool:
    """`clip_grad_norm_(params, inf)`: the norm read for logging, no gradient changed."""
    try:
        return math.isinf(float(limit))
    except (TypeError, ValueError, RuntimeError):
        return False


def _pointer(g: torch.Tensor) -> int:
    """Where a gradient's data lives; 0 for a sparse one and for a wrapper subclass with no
    storage of its own (a DTensor under FSDP2): no single pointer, their in-place writes
    move the version."""
    if g.layout != torch.strided:
        return 0
    try:
        return g.data_ptr()
    except RuntimeError:   # "Cannot access data pointer of Tensor that doesn't have storage"
        return 0


def _all_zero(t: Any) -> bool:
    """Every value of `t`, a plain strided tensor, is 0 (read with no mode watching); False
    for anything else (a wrapper subclass, a sparse tensor: not read)."""
    if not isinstance(t, torch.Tensor) or type(t) not in _PLAIN or t.layout != torch.strided:
        return False
    try:
        with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad():
            return not bool(t.any())
    except RuntimeError:
        return False


def zero_factor(v: Any) -> str | None:
    """How a factor or value of 0 was given: "" for the number 0, "_t" for a tensor of
    zeros (`mul_(torch.zeros(()))`, `*= torch.tensor(0.)`); None when it is no 0."""
    if isinstance(v, torch.Tensor):
        return "_t" if _all_zero(v) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != 0:
        return None
    return ""


class OrderWatch:
    """The state of Note [Where a clip and a step fall]. `params` and `index` are the
    probe's own maps (id(param) -> parameter while it lives, id(param) -> record index), read
    only."""

    def __init__(self, records: list[dict[str, Any]], params: dict[int, Any],
                 index: dict[int, int]) -> None:
        self.records, self._params, self._index = records, params, index
        self._used: dict[int, tuple[int, int, int, int]] = {}   # pid -> (opt, step, id, ver)
        self._after: dict[int, dict[str, Any]] = {}   # pid -> clip not yet followed by backward
        self._early: dict[int, dict[str, Any]] = {}   # pid -> clip a backward then added to
        self._scaled: set[int] = set()                # pids holding scaled, not unscaled, grads
        self._scale = 0.0                             # the last GradScaler factor seen
        self._scaled_outs: list[tuple[weakref.ref, float]] = []
        self._repeat: dict[int, int] = {}             # opt -> step() calls on one gradient
        self._clip: dict[str, Any] | None = None      # the clip call being read
        self._clip_key: tuple = ()
        self._clip_seen: set[int] = set()             # pids the current clip call read
        self._clips = 0
        # Note [A gradient written after the step]: pid -> the gradient's data pointer as
        # the step left it; pids a clip read after their step (check 8's); the records
        self._ptr: dict[int, int] = {}
        self._late_clip: set[int] = set()
        self._late_writes: dict[tuple, dict[str, Any]] = {}
        # Note [A gradient cleared by hand]: id(gradient) -> pid, for the script's reads of
        # gradients a step left (until the next step)
        self.reads: dict[int, int] = {}
        # ... and of the `.data` aliases of such gradients (Note [A gradient written through
        # .data], doctor_probe.py): id -> weakref, to tell a live alias from a reused id
        self._aliases: dict[int, weakref.ref] = {}
        # pids whose gradient an in-place op wrote through such an alias since their step
        # (Note [A write through a gradient's .data])
        self._through: set[int] = set()

    def forget(self, pids: list[int]) -> None:
        """Parameters gone (Note [Parameters held weakly] in doctor_probe.py): their ids may
        come back as other parameters'."""
        for pid in pids:
            for d in (self._used, self._after, self._early, self._ptr):
                d.pop(pid, None)
            self._through.discard(pid)
            self._scaled.discard(pid)
            self._clip_seen.discard(pid)
            self._late_clip.discard(pid)

    # ---- GradScaler ----------------------------------------------------------------------
    def scaled_output(self, out: Any, factor: float) -> None:
        """`GradScaler.scale()` returned `out` (the loss times `factor`)."""
        if isinstance(out, torch.Tensor):
            self._scaled_outs = [(r, f) for r, f in self._scaled_outs if r() is not None]
            self._scaled_outs.append((weakref.ref(out), factor))

    def is_scaled(self, t: Any) -> bool:
        """Does this backward start from a GradScaler-scaled loss?"""
        for r, factor in self._scaled_outs:
            if r() is t:
                self._scale = factor
                return True
        return False

    def scaled_backward(self, pids) -> None:
        self._scaled.update(pids)

    def unscaled(self, grads) -> None:
        """`scaler.unscale_(opt)` divided these gradients by the scale."""
        ids = {id(g) for g in grads}
        self._scaled = {pid for pid in self._scaled
                        if id(getattr(self._params.get(pid), "grad", None)) not in ids}

    # ---- backward ------------------------------------------------------------------------
    def grad_arrives(self, pid: int, fresh: bool) -> None:
        """A backward is about to add into this parameter's `.grad` (None or zero: fresh)."""
        self._used.pop(pid, None)
        self._through.discard(pid)
        if fresh:
            self._scaled.discard(pid)
        clip = self._after.pop(pid, None)
        if clip is not None:      # rule 2: the clip came before this backward
            self._early[pid] = clip

    # ---- clipping ------------------------------------------------------------------------
    def clip_reads(self, p: Any, key: tuple, new_clip) -> None:
        """A clip function read `p.grad`; `key` tells one call from the next, `new_clip()`
        gives (fn, limit, file, line, window) for a new call, or None when it clips
        nothing (`max_norm=inf`)."""
        pid = id(p)
        used = self._used.get(pid)
        if used is not None and p.grad is not None and used[2:] == (id(p.grad), p.grad._version):
            # after its step: check 8's, or a norm read for logging that multiplies by 1 in
            # place (Note [A gradient written after the step])
            self._late_clip.add(pid)
        if key != self._clip_key:
            self._clip_key, self._clip, self._clip_seen = key, None, set()
            made = new_clip()
            if made is None:   # a call that clips nothing: its later reads are skipped
                return
            fn, limit, file, line, window = made
            self._clips += 1
            self._clip = {"k": "clip", "n": self._clips, "fn": fn, "limit": limit,
                          "file": file, "line": line, "window": window, "params": [],
                          "used": [], "used_by": [], "scaled": [], "scale": 0.0}
            self.records.append(self._clip)
        clip = self._clip
        if clip is None or pid in self._clip_seen:   # clip_grad_norm_ reads each .grad twice
            return
        self._clip_seen.add(pid)
        i = self._index[pid]
        clip["params"].append(i)
        g = p.grad
        used = self._used.get(pid)
        if g is not None and used is not None and used[2:] == (id(g), g._version):
            clip["used"].append(i)                               # rule 1
            if used[1] not in clip["used_by"]:
                clip["used_by"].append(used[1])
            return
        if pid in self._scaled and g is not None:                # rule 3
            clip["scaled"].append(i)
            clip["scale"] = self._scale
        self._after[pid] = clip                                  # rule 2
        self._early.pop(pid, None)

    # ---- optimizer steps -----------------------------------------------------------------
    def at_step(self, opt: int, pids: list[int], fresh: set[int]) -> dict[str, Any]:
        """Fields for the step record: `clipped` (parameters whose gradient a clip after
        their last backward saw), `clip_early` (clip number -> parameters whose backward
        came after that clip), `again` (parameters holding the gradient the optimizer's
        previous step used, no backward since) and `repeat` (step() calls on it so far)."""
        clipped, early, again = [], {}, []
        for pid in pids:
            i = self._index[pid]
            if self._after.pop(pid, None) is not None and pid in fresh:
                clipped.append(i)
                self._early.pop(pid, None)
            clip = self._early.pop(pid, None)
            if clip is not None and pid in fresh:
                early.setdefault(clip["n"], []).append(i)
            g = getattr(self._params.get(pid), "grad", None)
            used = self._used.get(pid)
            if not fresh and g is not None and used is not None and \
                    used[0] == opt and used[2:] == (id(g), g._version):
                again.append(i)
            self._scaled.discard(pid)   # scaler.step() unscales; a bare step() is its own bug
        repeat = self._repeat.get(opt, 1) + 1 if again else 1
        self._repeat[opt] = repeat
        return {"clipped": clipped, "clip_early": {str(n): v for n, v in early.items()},
                "again": again, "repeat": repeat}

    def after_step(self, opt: int, step: int, pids: list[int]) -> None:
        """The gradients as step `step` left them: what a repeat or a late clip would find."""
        for pid in pids:
            g = getattr(self._params.get(pid), "grad", None)
            self._late_clip.discard(pid)
            self._through.discard(pid)
            if g is None:
                self._used.pop(pid, None)
                self._ptr.pop(pid, None)
            else:
                self._used[pid] = (opt, step, id(g), g._version)
                self._ptr[pid] = _pointer(g)
        self.reads.clear()
        self._aliases.clear()

    # ---- zero_grad -----------------------------------------------------------------------
    def read_by_script(self, p: Any, g: Any) -> None:
        """The script read `p.grad` (`g`): kept while the step's entry is open, so that a
        `zero_` of it is known for a clear by hand (Note [A gradient cleared by hand])."""
        if id(p) in self._used and isinstance(g, torch.Tensor):
            self.reads[id(g)] = id(p)

    def alias_of(self, alias: Any, g: Any, pid: int) -> None:
        """The script took `g.data` (`alias`) of parameter `pid`'s gradient `g`: a clear of
        it clears the gradient (Note [A gradient written through .data], doctor_probe.py)."""
        if pid in self._used:
            self.reads[id(alias)] = pid
            self._aliases[id(alias)] = weakref.ref(alias)

    def cleared(self, how: str, args: tuple, where) -> None:
        """An in-place op that may clear tensors is about to run (`how`: "zero_", "mul_",
        "fill_"; `args` its arguments): for each a gradient that the script read of a
        parameter whose step entry is open, the zero_grad's comparison (Note [A gradient
        cleared by hand]). A factor or value must be 0: the number, or a tensor whose
        values are all 0 (Note [A clear by a zero tensor, a zero tensor set]); an op by
        any other factor writes through an alias (`written`)."""
        first = args[0]
        targets = first if isinstance(first, (list, tuple)) else (first,)
        if not any(id(g) in self.reads for g in targets):
            return
        if how not in ("zero_", "_foreach_zero_"):
            zero = zero_factor(args[1] if len(args) > 1 else None)
            if zero is None:
                self.written(first)
                return
            how += zero
        for g in targets:
            pid = self.reads.get(id(g))
            p = self._params.get(pid) if pid is not None else None
            if p is None or p.grad is None:
                continue
            alias = self._aliases.get(id(g))
            through = alias is not None and alias() is g
            if p.grad is not g and not (through and _pointer(g) == _pointer(p.grad) != 0):
                continue
            del self.reads[id(g)]
            self.zeroed(p, where, ("data." if through else "") + how)

    def aliased(self, first: Any) -> bool:
        """Is `first` (a tensor, or a list of them) a `.data` alias kept with the reads?"""
        if isinstance(first, (list, tuple)):
            return any(id(g) in self._aliases for g in first)
        return id(first) in self._aliases

    def written(self, first: Any) -> None:
        """An in-place op other than a clear writes `first` (a tensor, or a list of them):
        where it is a `.data` alias of a gradient a step left, the gradient changed with no
        version of its own moving (Note [A write through a gradient's .data])."""
        for g in first if isinstance(first, (list, tuple)) else (first,):
            alias = self._aliases.get(id(g))
            if alias is not None and alias() is g:
                pid = self.reads.get(id(g))
                if pid is not None and pid in self._used:
                    self._through.add(pid)

    def set_to(self, p: Any, value: Any, where, how: str) -> None:
        """The script sets `p.grad = value` (`how` "set") or `p.grad.data = value` ("data.
        set"), a tensor: a clear where its values are all 0 (Note [A clear by a zero
        tensor, a zero tensor set])."""
        if id(p) in self._used and _all_zero(value):
            self.zeroed(p, where, how + "_zeros")

    def zeroed(self, p: Any, where, how: str = "zero_grad") -> None:
        """A `zero_grad` read `p.grad` (Note [A gradient written after the step]), or the
        script is about to clear it by hand (`how`: "none", "zero_"; Note [A gradient
        cleared by hand]): a gradient a step used and something changed since is lost
        here. `where()`: the (file, line) of the call, asked only for such a gradient."""
        pid = id(p)
        used, ptr = self._used.pop(pid, None), self._ptr.pop(pid, None)
        through = pid in self._through   # Note [A write through a gradient's .data]
        self._through.discard(pid)
        g = p.grad
        if used is None or g is None or pid in self._late_clip or \
                (id(g), g._version, _pointer(g)) == (used[2], used[3], ptr) and not through:
            return
        file, line = where()
        rec = self._late_writes.get((file, line, used[1]))
        if rec is None:
            rec = {"k": "late_write", "step": used[1], "file": file, "line": line,
                   "params": []}
            if how != "zero_grad":
                rec["how"] = how
            self._late_writes[(file, line, used[1])] = rec
            self.records.append(rec)
        rec["params"].append(self._index[pid])
