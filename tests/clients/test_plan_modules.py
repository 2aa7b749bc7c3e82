"""Modules `plan` searches beside the repeated blocks, pinned in plain torch
(tests/clients/train_plan_modules.py; Note [Modules that are not blocks],
memledger/replay/lone_modules.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt49j, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; 2 steps, batch 64; no kernel scratch).
"Before" is f24f398d (main before the change) on the same ledgers.
"""

from __future__ import annotations

import numpy as np
import pytest

from memledger.replay.plan import plan, repeated_blocks
from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_plan_searches_a_stem_beside_the_blocks():
    """A wide stem (four tanh, each saving its (64, 256) fp32 output) ahead of two narrow
    MLP blocks (`blocks.{i}`): the stem saves 92 % of the model's activations and is no
    block. Plan searched the blocks alone, whose options cannot move the peak (the stem's
    backward, its four saves live), and said no candidate fits 300,000 B, the lowest
    430,348 B (the baseline). The stem is searched beside the blocks now (Note [Modules
    that are not blocks], memledger/replay/lone_modules.py): `offload:stem`, 233,740 B
    predicted and measured. Plan is the brute force of full replays at every budget: the
    summed table equals the full replay of each of the 64 assignments (4 options on 2
    blocks and the stem), peak and time."""
    run = run_client("train_plan_modules.py", ["--case", "stem"],
                     ["offload:stem", "checkpoint:stem+offload:blocks.*"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    rep = plan(run.ledger, 300_000, front_points=0)
    assert (rep.fits, rep.policy, rep.predicted_peak_bytes, rep.choice) == \
        (True, "offload:stem", 233_740, ["none", "none", "offload"])
    assert (rep.blocks, rep.modules, rep.baseline_peak_bytes) == \
        (["blocks.0", "blocks.1"], ["stem"], 430_348)
    for text in ("offload:stem", "checkpoint:stem+offload:blocks.*"):
        p = run.policies[text]
        assert p.predicted == p.measured, text
    assert run.policies["offload:stem"].measured == 233_740

    from memledger.commands.common import console
    from memledger.commands.plan import _render
    with console.capture() as cap:
        _render(rep, "300,000 B", front=False, shared=False)
    said = " ".join(cap.get().split())
    assert "searched 64 assignments (4 options on 2 blocks and 1 module beside them (stem), " \
        "exhaustive, exact)" in said and "per block, then module: blocks.0 none, blocks.1 none, stem offload" in said

    import itertools

    from memledger.replay.engine import CPU_RNG_STATE_BYTES, replay
    from memledger.replay.plan import block_table, searched
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import cost_model
    from memledger.replay.prepared import Prepared

    led, rng = run.ledger, CPU_RNG_STATE_BYTES
    prep = Prepared.from_ledger(led)
    model, _ = cost_model(led, prep)
    blocks, left_out, modules = searched(led, prep)
    table = block_table(prep, model, blocks, rng, left_out, modules)
    peaks, costs = [], []
    for c in itertools.product(range(len(table.options)), repeat=len(table.blocks)):
        r = replay(prep, parse_policy(table.policy(c)), rng_bytes=rng)
        assert table.peak(c) == r.peak_bytes, table.policy(c)
        assert table.total(c) == pytest.approx(model.price(r).seconds, rel=1e-9, abs=1e-12)
        peaks.append(r.peak_bytes)
        costs.append(model.price(r).seconds)
    peaks_a, costs_a = np.array(peaks), np.array(costs)
    for budget in np.linspace(peaks_a.min(), peaks_a.max(), 5).astype(int).tolist():
        got = plan(led, budget, front_points=0)
        assert got.fits and got.predicted_peak_bytes <= budget
        assert got.predicted_added_time_s == pytest.approx(
            costs_a[peaks_a <= budget].min(), rel=1e-9, abs=1e-12)


def test_plan_searches_a_model_with_no_module_list():
    """The same stem, one MLP block (`body`) and a head, no module list: plan refused
    ("plan found no repeated blocks ...", exit 2). It searches the stem now (the body saves
    3.7 % of the model's activations, under the tenth a module needs, and is left out):
    `offload:stem`, predicted and measured 229,324 B of 425,932."""
    run = run_client("train_plan_modules.py", ["--case", "nolist"], ["offload:stem"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert repeated_blocks(run.ledger) == []
    rep = plan(run.ledger, 300_000, front_points=0)
    assert (rep.policy, rep.predicted_peak_bytes, rep.baseline_peak_bytes) == \
        ("offload:stem", 229_324, 425_932)
    assert (rep.blocks, rep.modules, rep.assignments) == ([], ["stem"], 4)
    p = run.policies["offload:stem"]
    assert p.predicted == p.measured == 229_324
