"""How far a measured added step time can be trusted: its bootstrap interval. No torch here.

A measured added time is median(policy's timed steps) - median(baseline's timed steps), and
on a shared machine either median can move by more than a small policy adds. Resampling the
steps says by how much: the 90 % interval of BOOTSTRAP resamples (seed 0, so the same steps
give the same interval). A measurement *resolves* a time only when that interval lies
within +-GOAL of it; `compare` marks the others, and benchmarks/accuracy.py judges a
predicted/measured ratio only on resolved measurements (docs/accuracy.md, "Which ratios
the measurement can judge").
"""

from __future__ import annotations

import random
import statistics

GOAL = 0.15          # predictions are held to 0.85-1.15 of measured (issue 14)
BOOTSTRAP = 2_000
MIN_STEPS = 3        # resampling 2 steps says nothing: two bootstrap medians can agree by chance


def added_interval(rounds: list[tuple[list[float], list[float]]]) -> tuple[float, float]:
    """90 % bootstrap interval of the added time: each round's (policy, baseline) timed
    steps resampled with replacement, median(policy) - median(baseline) per round, the
    median over rounds; 5th and 95th percentiles of BOOTSTRAP such resamples (seed 0)."""
    rng = random.Random(0)
    out = []
    for _ in range(BOOTSTRAP):
        per = []
        for pol, base in rounds:
            pr = [rng.choice(pol) for _ in pol]
            br = [rng.choice(base) for _ in base]
            per.append(statistics.median(pr) - statistics.median(br))
        out.append(statistics.median(per))
    out.sort()
    return out[int(0.05 * BOOTSTRAP)], out[int(0.95 * BOOTSTRAP) - 1]


def resolved(measured: float, lo: float, hi: float, goal: float = GOAL) -> bool:
    """Whether the interval [lo, hi] lies within +-goal of a positive measured time."""
    return measured > 0 and lo >= measured * (1 - goal) and hi <= measured * (1 + goal)


def judged(added: float, policy_steps: list[float],
           baseline_steps: list[float]) -> tuple[list[float] | None, bool]:
    """([lo, hi], resolved) for an added time measured as median(policy_steps) -
    median(baseline_steps); (None, False) when either side has fewer than MIN_STEPS timed
    steps: too few to resolve anything."""
    if len(policy_steps) < MIN_STEPS or len(baseline_steps) < MIN_STEPS:
        return None, False
    lo, hi = added_interval([(policy_steps, baseline_steps)])
    return [lo, hi], resolved(added, lo, hi)
