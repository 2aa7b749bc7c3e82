"""The events that bound a ledger's steps, sorted once for the rules that read them
(ledger/held_roles.py `kept_across_a_step`, ledger/carried.py `carried_until`); no torch."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class StepMarks(NamedTuple):
    """Sorted event numbers (int64 arrays) of a ledger's phase and step records."""

    fwd: np.ndarray     # where a forward phase began, every forward of every step
    bwd: np.ndarray     # where a backward phase began
    ends: np.ndarray    # the `step` records' events: step k ended after ends[k - 1]
    first: np.ndarray   # each step's first forward: the first after the step before ended
                        # (a step of two forwards, an extragradient's or a micro-batched
                        # one's, begins at the first)


def step_marks(phases: list, steps: list) -> StepMarks:
    """The ledger's `phase` and `step` records (dicts with `ev`, `ph`) as StepMarks."""
    fwd = _sorted(r["ev"] for r in phases if r.get("ph") == "forward")
    bwd = _sorted(r["ev"] for r in phases if r.get("ph") == "backward")
    ends = _sorted(r["ev"] for r in steps)
    k = np.searchsorted(ends, fwd, side="left")          # the step each forward is in
    first = fwd[np.r_[True, k[1:] != k[:-1]]] if len(fwd) else fwd
    return StepMarks(fwd, bwd, ends, first)


def _sorted(evs) -> np.ndarray:
    return np.array(sorted(int(e) for e in evs), dtype=np.int64)
