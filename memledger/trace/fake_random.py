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
"""

from __future__ import annotations

from typing import Any

import torch

DRAW = "a draw of its own, not the real run's"

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

    def _made_for_real(self, out) -> bool:
        outs = out if isinstance(out, (list, tuple)) else (out,)
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        return bool(tensors) and all(self._values_of(o) is not None for o in tensors)

    def drew(self, collector, func, args: tuple, kwargs: dict, out) -> None:
        gen = _generator(args, kwargs)
        first = out[0] if isinstance(out, (list, tuple)) and out else out
        device = getattr(getattr(first, "device", None), "type", "cpu")
        key = id(gen) if gen is not None else ("default", device)
        if not self._made_for_real(out):
            self._behind.add(key)          # Rule 1
            return
        # Rule 2: a generator object says its device; a default one's is the target's
        other_device = gen.device.type != "cpu" if gen is not None else \
            collector.target.remap or device != "cpu"
        if key in self._behind or other_device:
            collector._note_standin(str(func), DRAW)
