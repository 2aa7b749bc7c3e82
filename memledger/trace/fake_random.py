"""Random draws in a fake run (Rule 21 of Note [Fake runs], trace/fake.py).

# Note [Draws a fake run makes for real]
Rule 3 computes small integer results for real when their inputs are known, and a random
op with known inputs is one: `torch.randint(0, 50, (4, 32), generator=gen)` draws from the
script's own generator, for real, the token ids the real run draws. That holds while the
generator has given the fake run every draw it gave the real run, in the same order. A
draw the fake run does not make (FakeTensorMode runs no kernel: `uniform_` initialising a
fake parameter, a dropout mask, `torch.rand` of a float result Rule 3 leaves unknown) does
not move the real generator, and every later draw from it is another number than the real
run's. Worked example: `torch.manual_seed(0); nn.Linear(4, 4);
torch.multinomial(torch.ones(4), 2)` is [1, 2] in a real run, [2, 1] in a fake one (the
Linear's init drew nothing). kornia's RandAugment picks its operations by `randperm` so,
and its fake ledger read 25,224 B over the real one with no word of it.

Rules:
1. A generator is *behind* from its first draw the fake run did not make for real (no
   shadow on the result), for the rest of the run: a generator's identity is the
   `generator=` argument, else the device's default generator.
2. A draw computed for real from a generator that is behind, or one the real run makes
   on another device (a CUDA generator object; the default generator of a CUDA target:
   Rule 5's remap, or fake CUDA tensors), keeps its values (a plausible run's: sizes that depend on them stay
   possible) and is a stand-in record naming the line, once per line, so that `show`
   says the fake run made it up.
3. `manual_seed` is not watched: a generator reseeded after falling behind is still
   behind (a stand-in too many, never one too few).
4. A draw from a CPU generator object of the script's own (`generator=g`) whose values the
   fake run does not keep (`torch.rand(n, generator=g)`, a float draw) is still made for
   real, on zeros of its inputs' shapes, and its values dropped, so that the generator
   moves as the real run's does, while its results are at most `ADVANCE_NUMEL` elements
   (larger ones, and the default generator's draws, behind as before: a parameter's
   init on the default generator is a model's size). A graph's edges drawn by `randint`
   each step beside their weights by `rand`, coalesced into a sparse adjacency: from step
   2 on the fake run's own draw, another count of duplicate edges, and its ledger 160 B
   under the real one in `temporary` (tests/clients/train_sparse_saves.py --case
   adjacency, with two stand-ins said); the real run's edges now.
5. The device's default generator is followed as Rule 4 follows a script's own: a draw
   from the CPU default generator of a CPU target whose values the fake run does not keep
   (a parameter's `normal_` / `uniform_` init, a dropout mask, `torch.randn`) is made for
   real on scratch inputs, its values dropped. Before, the first such draw left the
   default generator behind for the whole run: tests/doctor/sparse_embedding.py (an
   `nn.Embedding(10_000, 64, sparse=True)` and a Linear, then the batch's ids by
   `torch.randint` on the default generator) drew other ids than the real run, other
   duplicates, so SparseAdam's coalesced gradient kept another count of rows: its fake
   ledger 7,680 B under the real one in `temporary`, with a stand-in said. A CUDA target
   (Rule 5's remap, or fake CUDA tensors) draws from the CUDA generator in the real run:
   left behind, as before (Rule 2). The cost is bounded: one draw's results and inputs at
   most `ADVANCE_NUMEL` elements, and at most `ADVANCE_TOTAL` elements in all per
   generator (a model's init larger than that, the first draw over it: behind from there
   on, as before, its draws said as stand-ins).
6. A draw whose count depends on its inputs' values (`poisson`, `_standard_gamma`:
   rejection sampling; `rrelu_with_noise`: one draw per negative element) cannot be made
   on scratch inputs: its generator is behind (Rule 1). An op with a `dropout_p` argument
   of 0 (the CPU attention kernels, tagged as drawing) draws nothing: no draw made, its
   generator not behind (before, every attention call left the default generator behind).
   Scratch inputs are ones for floating-point tensors (`multinomial` refuses all-zero
   weights; what is drawn does not depend on them), zeros for the others.
7. A draw is *in step* when it takes from a CPU generator that is not behind: the
   script's own CPU generator, or the default one of a CPU target (not Rule 5's remap,
   not a fake CUDA tensor). Made for real, such a draw gives the real run's values, so
   a float one keeps them (Rule 36 of Note [Fake runs]): it is computed on its inputs'
   known values by Rule 3, drawing from the process's generator itself, and Rules 4 and
   5 do not run for it. Worked example: `torch.manual_seed(0); nn.Linear(64, 64);
   keep = torch.rand(32, 64) < 0.25`: the Linear's init moves the default generator by
   Rule 5, the `rand` is then in step and made for real, and `keep.nonzero()` has the
   real run's 511 rows, not its bound of 2,048.
8. `binomial` (inversion below a count times probability of 10, BTRS rejection above)
   and `_sample_dirichlet` (a gamma per element, rejection sampled) draw as many numbers
   as their inputs' values need: they are Rule 6's. Made on scratch ones they moved the
   generator by another count than the real run's, silently: `torch.binomial(full(30.),
   p)` then `randperm(6)` gave [2, 5, 1, 0, 4, 3] against the real [0, 2, 5, 4, 1, 3],
   nothing said. (fix56c wrote that they carry no `nondeterministic_seeded` tag in torch
   2.13; they do, on every overload: `dir(torch.ops.aten)` lists only the packets loaded
   so far, which is where they were missed.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

DRAW = "a draw of its own, not the real run's"
# Rule 4: the most elements a draw from the script's own generator is made for real with,
# only to move the generator (8 MiB of float64 at most, dropped at once)
ADVANCE_NUMEL = 1 << 20
# Rule 5: the most elements made for real so, in all, per generator (~0.7 s of `uniform_`
# on one core of this box at 10 ms per 2^20)
ADVANCE_TOTAL = 1 << 26
# Rule 6: draws whose count depends on their inputs' values (Rule 8: `binomial` and
# `_sample_dirichlet` too)
_VALUE_COUNTED = frozenset({"poisson", "_standard_gamma", "rrelu_with_noise",
                            "rrelu_with_noise_", "rrelu_with_noise_functional",
                            "binomial", "_sample_dirichlet"})

_SEEDED: dict[Any, bool] = {}


def seeded(func) -> bool:
    """Does this op draw from a generator (torch's `nondeterministic_seeded` tag)?"""
    known = _SEEDED.get(func)
    if known is None:
        known = _SEEDED[func] = torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())
    return known


def _generator(args: tuple, kwargs: dict) -> torch.Generator | None:
    """The `generator=` argument, if any."""
    gen = kwargs.get("generator")
    if gen is None:
        gen = next((a for a in args if isinstance(a, torch.Generator)), None)
    return gen


class RandomDraws:
    """Which generators a fake run has fallen behind on (Rule 1), and the stand-in records
    of the draws made from them (Rule 2)."""

    def __init__(self, values_of) -> None:
        self._values_of = values_of   # a fake tensor's known values, or None (Rule 3)
        self._behind: set[Any] = set()
        self._advanced: dict[Any, int] = {}   # Rule 5: elements made for real, by generator

    def _made_for_real(self, out) -> bool:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        return bool(tensors) and all(self._values_of(o) is not None for o in tensors)

    def _key(self, args: tuple, kwargs: dict, out):
        """The generator a draw takes from (Rule 1), and the device its result is on."""
        gen = _generator(args, kwargs)
        first = out[0] if isinstance(out, (list, tuple)) and out else out
        device = getattr(getattr(first, "device", None), "type", "cpu")
        return gen, device, id(gen) if gen is not None else ("default", device)

    def in_step(self, collector, args: tuple, kwargs: dict, out) -> bool:
        """Rule 7: does this draw take from a CPU generator that has given the fake run every
        draw it gave the real run (the script's own, or the default one of a CPU target),
        so that made for real it draws the real run's values?"""
        gen, device, key = self._key(args, kwargs, out)
        on_host = gen.device.type == "cpu" if gen is not None else \
            device == "cpu" and not collector.target.remap
        return on_host and key not in self._behind

    def drew(self, collector, func, args: tuple, kwargs: dict, out) -> None:
        gen, device, key = self._key(args, kwargs, out)
        if _draws_nothing(func, args, kwargs):   # Rule 6: `dropout_p=0`
            return
        if not self._made_for_real(out):   # Rules 4 and 5: in step, moved as the real one
            if not (self.in_step(collector, args, kwargs, out) and
                    self._advance(key, func, args, kwargs, out)):
                self._behind.add(key)          # Rule 1
            return
        # Rule 2: a generator object says its device; a default one's is the target's
        other_device = gen.device.type != "cpu" if gen is not None else \
            collector.target.remap or device != "cpu"
        if key in self._behind or other_device:
            collector._note_standin(str(func), DRAW)

    def _advance(self, key, func, args: tuple, kwargs: dict, out) -> bool:
        """Rules 4-6: move the generator as the real run's draw does, within the budget."""
        if func._overloadpacket.__name__ in _VALUE_COUNTED:   # Rule 6
            return False
        n = _numel(out) + sum(a.numel() for a in tree_flatten((args, kwargs))[0]
                              if isinstance(a, torch.Tensor))
        done = self._advanced.get(key, 0) + n
        if done > ADVANCE_TOTAL or not _advanced(func, args, kwargs, out):   # Rule 5
            return False
        self._advanced[key] = done
        return True


def _numel(out) -> int:
    outs = out if isinstance(out, (list, tuple)) else (out,)
    return sum(o.numel() for o in outs if isinstance(o, torch.Tensor))


def _draws_nothing(func, args: tuple, kwargs: dict) -> bool:
    """Rule 6: an op whose `dropout_p` argument is 0 (attention kernels) draws nothing."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == "dropout_p":
            p = kwargs.get("dropout_p", args[i] if i < len(args) and not arg.kwarg_only
                           else arg.default_value)
            return isinstance(p, (int, float)) and p == 0
    return False


def _advanced(func, args: tuple, kwargs: dict, out) -> bool:
    """Rules 4 and 5: run a draw from a CPU generator (the script's own, or the default one)
    for real, on scratch tensors of its inputs' shapes and strides (Rule 6's values), its
    values dropped; whether it ran."""
    from torch.utils._python_dispatch import _disable_current_modes
    from torch.utils._pytree import tree_unflatten

    if _numel(out) > ADVANCE_NUMEL:
        return False
    flat, spec = tree_flatten((args, kwargs))
    if any(isinstance(a, torch.Tensor) and (a.layout is not torch.strided or
                                            a.numel() > ADVANCE_NUMEL) for a in flat):
        return False
    try:
        with _disable_current_modes():
            real = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype).fill_(
                        1 if a.is_floating_point() or a.is_complex() else 0)   # Rule 6
                    if isinstance(a, torch.Tensor)
                    else torch.device("cpu") if isinstance(a, torch.device) else a
                    for a in flat]
            r_args, r_kwargs = tree_unflatten(real, spec)
            func(*r_args, **r_kwargs)
    except Exception:   # no CPU kernel for it: behind, as before
        return False
    return True
