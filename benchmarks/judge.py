"""Which predicted/measured ratios a noisy measurement can judge (benchmarks/accuracy.py).

The interleaved measure (memledger/measure/interleave.py) gives, per round, the timed steps'
thread CPU times of each policy and of the baseline; the added time is median(policy) -
median(baseline) per round, then the median over rounds. Its 90 % interval comes from
resampling those steps; a ratio is judged only when that interval is narrow enough to tell
a 15 % miss from a hit (docs/accuracy.md, "Which ratios the measurement can judge").
"""

from __future__ import annotations

import random
import statistics

GOAL = 0.15          # the goal: predicted/measured within 0.85-1.15
BOOTSTRAP = 2_000


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


def verdict(predicted: float, measured: float, lo: float, hi: float) -> str:
    """hit | miss | unresolved (the interval must lie within +-GOAL of the measured value)."""
    if measured <= 0 or lo < measured * (1 - GOAL) or hi > measured * (1 + GOAL):
        return "unresolved"
    return "hit" if abs(predicted / measured - 1) <= GOAL else "miss"


