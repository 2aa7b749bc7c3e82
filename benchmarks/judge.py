"""Which predicted/measured ratios a noisy measurement can judge (benchmarks/accuracy.py).

The interleaved measure (memledger/measure/interleave.py) gives, per round, the timed steps'
thread CPU times of each policy and of the baseline; the added time is median(policy) -
median(baseline) per round, then the median over rounds. Its 90 % interval comes from
resampling those steps; a ratio is judged only when that interval is narrow enough to tell
a 15 % miss from a hit (docs/accuracy.md, "Which ratios the measurement can judge"). The
interval itself lives in memledger/measure/interval.py, which `compare` uses too.
"""

from __future__ import annotations

from memledger.measure.interval import GOAL, added_interval, resolved

__all__ = ["GOAL", "added_interval", "verdict"]


def verdict(predicted: float, measured: float, lo: float, hi: float) -> str:
    """hit | miss | unresolved (the interval must lie within +-GOAL of the measured value)."""
    if not resolved(measured, lo, hi):
        return "unresolved"
    return "hit" if abs(predicted / measured - 1) <= GOAL else "miss"
