"""The Pareto front `plan` prints (memledger/replay/plan.py, Note [Pareto front]): complete
from the exhaustive search on small tables; on large ones sampled at evenly spaced budgets,
thinned to `points` with both endpoints and the knee kept, every point exact."""

from __future__ import annotations

import numpy as np
import pytest

from memledger.replay.engine import CPU_RNG_STATE_BYTES
from memledger.replay.plan import _knee, block_table, pareto_front_info, plan, repeated_blocks
from memledger.replay.predict import cost_model
from memledger.replay.prepared import Prepared

from plan_ledgers import H8, T8, blocks_ledger


def _brute(led):
    prep = Prepared.from_ledger(led)
    model, _ = cost_model(led, prep)
    table = block_table(prep, model, repeated_blocks(led), CPU_RNG_STATE_BYTES)
    nb, no = table.cost.shape
    combos = np.indices((no,) * nb).reshape(nb, -1).T
    sums = np.zeros((len(combos), table.delta.shape[2]), dtype=np.int64)
    for b in range(nb):
        sums += table.delta[b][combos[:, b]]
    peaks = (table.floor[None, :] + sums).max(axis=1) + table.workspace
    costs = table.cost[np.arange(nb), combos].sum(axis=1)
    return table, peaks, costs


def _true_front(peaks, costs) -> list[tuple[int, float]]:
    out, best = [], np.inf
    for i in np.lexsort((costs, peaks)):
        if costs[i] < best:
            out.append((int(peaks[i]), float(costs[i])))
            best = costs[i]
    return out


@pytest.fixture(scope="module")
def eight():
    return _brute(blocks_ledger(H8, T8))       # 4 options ** 8 blocks: the DP path


def test_small_table_front_is_complete_and_exact():
    table, peaks, costs = _brute(blocks_ledger(H8[:4], T8[:4]))    # 4 ** 4 = 256
    front, complete = pareto_front_info(table, points=1000)
    assert complete
    true = _true_front(peaks, costs)
    assert [p.peak_bytes for p in front] == [p for p, _ in true]
    assert [p.added_time_s for p in front] == pytest.approx([t for _, t in true], rel=1e-12)


def test_large_table_front_is_thinned_with_endpoints_and_knee(eight):
    table, peaks, costs = eight
    true = _true_front(peaks, costs)
    front, complete = pareto_front_info(table, points=5)
    assert not complete and len(front) <= 5
    # endpoints: the lowest peak any assignment reaches, and the baseline at no cost
    assert front[0].peak_bytes == int(peaks.min()) and front[-1].policy == "none"
    # every point is on the true front
    on = {(p, round(t, 15)) for p, t in true}
    assert all((p.peak_bytes, round(p.added_time_s, 15)) in on for p in front)
    # exactly one knee, inside the front
    assert sum(p.knee for p in front) == 1 and not (front[0].knee or front[-1].knee)


def test_thinning_keeps_the_endpoints_and_the_knee_of_the_full_front():
    table, peaks, costs = _brute(blocks_ledger(H8[:4], T8[:4]))
    full, _ = pareto_front_info(table, points=1000)
    thin, complete = pareto_front_info(table, points=4)
    assert len(full) > 4 and not complete
    knee = next(p.policy for p in full if p.knee)
    assert [p.policy for p in thin][0] == full[0].policy
    assert [p.policy for p in thin][-1] == full[-1].policy == "none"
    assert [p.policy for p in thin if p.knee] == [knee]
    assert len(thin) == 4


def test_knee_is_the_point_farthest_below_the_chord():
    from memledger.replay.plan import FrontPoint

    def pt(peak, t):
        return FrontPoint(policy=str(peak), peak_bytes=peak, added_time_s=t,
                          added_time_lo_s=t, added_time_hi_s=t)
    # peaks 0..100 scaled to x = 0, .1, .5, 1; times 10..0 scaled to y = 1, .3, .1, 0;
    # below the chord y = 1 - x: 0, .6, .4, 0 -> the second point
    front = [pt(0, 10.0), pt(10, 3.0), pt(50, 1.0), pt(100, 0.0)]
    assert _knee(front) == 1
    assert _knee(front[:2]) == -1                 # fewer than 3 points: no knee


def test_plan_report_says_when_the_front_is_thinned(eight):
    table, peaks, costs = eight
    rep = plan(blocks_ledger(H8, T8), int(peaks.max()), front_points=4)
    assert rep.front_complete is False and len(rep.front) <= 4
    small = plan(blocks_ledger(H8[:2], T8[:2]), 10**9)
    assert small.front_complete is True


def test_front_points_carry_the_full_replays_figures():
    """Where blocks do not add up (Note [Blocks add up]) the summed table and the full replay
    differ; the front shows the full replay's figures, those `predict` prints for the same
    policy, so one policy never shows two peaks."""
    from types import SimpleNamespace

    from memledger.replay.plan import FrontPoint, _replayed

    front = [FrontPoint(policy="checkpoint:blocks.0", peak_bytes=1000, added_time_s=0.001,
                        added_time_lo_s=0.0009, added_time_hi_s=0.0011, knee=True),
             FrontPoint(policy="none", peak_bytes=2000, added_time_s=0.0,
                        added_time_lo_s=0.0, added_time_hi_s=0.0)]
    full = [SimpleNamespace(policy="checkpoint:blocks.0", peak_bytes=1256, added_time_s=0.002,
                            added_time_lo_s=0.0018, added_time_hi_s=0.0022)]
    out = _replayed(front, full)
    assert (out[0].peak_bytes, out[0].added_time_s, out[0].knee) == (1256, 0.002, True)
    assert out[1] == front[1]
