"""benchmarks/judge.py: when the accuracy benchmark may call a ratio a hit or a miss."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "judge", Path(__file__).resolve().parents[2] / "benchmarks" / "judge.py")
judge = importlib.util.module_from_spec(spec)
spec.loader.exec_module(judge)


def test_verdict_needs_an_interval_within_15_percent():
    # measured 10 ms, interval 9-11 ms: within +-15 % (8.5-11.5), so the ratio is judged
    assert judge.verdict(0.0105, 0.010, 0.009, 0.011) == "hit"      # 1.05
    assert judge.verdict(0.0080, 0.010, 0.009, 0.011) == "miss"     # 0.80
    # the MLP's case: measured 0.21 ms with an interval of 0.10-0.40 ms: cannot tell
    assert judge.verdict(0.00019, 0.00021, 0.00010, 0.00040) == "unresolved"
    assert judge.verdict(0.001, -0.0001, -0.0002, 0.0001) == "unresolved"


def test_interval_of_steps_without_spread_is_exact():
    # every policy step 12 ms, every baseline step 10 ms: added 2 ms however resampled
    rounds = [([0.012] * 5, [0.010] * 5), ([0.012] * 4, [0.010] * 6)]
    lo, hi = judge.added_interval(rounds)
    assert abs(lo - 0.002) < 1e-15 and abs(hi - 0.002) < 1e-15


def test_interval_widens_with_the_spread():
    rounds = [([0.011, 0.012, 0.013, 0.020, 0.012], [0.010, 0.009, 0.011, 0.010, 0.015])]
    lo, hi = judge.added_interval(rounds)
    # medians 12 and 10 ms: 2 ms; resampled medians move between the neighbouring values
    assert lo < 0.002 < hi
