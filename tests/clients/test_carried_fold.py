"""A state carried between steps and selective's cache, in one replay
(tests/clients/train_carried_fold.py; Note [A storage's two categories, split last],
memledger/replay/engine.py). Plain torch: the shape of a log-space minGRU trained with
truncated BPTT (train_scan.py `--model log --tbptt`, whose tier skips without the
libraries).

Measured (the helper hunt56c, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX-512 bf16), one
intra-op thread; 2 steps, batch 2, 16 steps of time, dim 8, 2 blocks): `--carry` ledger =
allocator 36,140 B, no kernel scratch; `selective:blocks.0:save=mm` 35,692 B measured,
predicted 34,888 B before; `selective:blocks.*` 43,240 B, `checkpoint:blocks.0` 32,840,
`offload:blocks.0` 26,540, `selective:blocks.0:save=exp` 32,620, each predicted =
measured before and after; `--carry --contig` and no `--carry` were exact before.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

MM = 2 * 16 * 8 * 4   # the `out` Linear's mm output, (32, 8) fp32: 1,024 B


@pytest.mark.slow
def test_the_cache_holds_its_mm_past_a_carried_state():
    """`--carry`: each block's carried state (its `exp` output, 1,088 B) is `activation`
    to its step's end and `other` from there, two rows of the replay's curve. Under
    `selective:blocks.0:save=mm` SAC's cache keeps the `out` Linear's `mm` (its input a
    slice, so `clone`, `mm`, bias add), made after the region's last save: the re-run
    stops before it and the cache holds it to blocks.0's backward (Rule 7). The stage that
    holds it set the end of the storage three rows on, past the split storages (the
    states of step 1 and a step-2 one): 34,888 B predicted, 804 B under. Now 35,692 =
    35,692, the peak in blocks.1's backward with the mm held; the other policies as
    before."""
    pols = {"selective:blocks.0:save=mm": 35_692, "selective:blocks.*": 43_240,
            "checkpoint:blocks.0": 32_840, "offload:blocks.0": 26_540}
    run = run_client("train_carried_fold.py", ["--carry"], list(pols))
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 36_140
    for policy, peak in pols.items():
        got = run.policies[policy]
        assert (got.predicted, got.measured) == (peak, peak), policy
    assert pols["selective:blocks.0:save=mm"] - 34_888 == 804 < MM


def test_the_same_without_a_carried_state_was_exact_before():
    """No state carried: nothing is split, every row of the first chunk was its storage's,
    and the cached mm was held as it is now."""
    run = run_client("train_carried_fold.py", [], ["selective:blocks.0:save=mm"])
    assert run.ledger_peak == run.allocator_peak == 34_156
    got = run.policies["selective:blocks.0:save=mm"]
    assert got.predicted == got.measured == 32_812


def test_a_script_that_ends_before_the_steps_asked_is_measured():
    """`--steps 1` under two steps asked (Note [A model gone with the script],
    measure/apply.py): the trace records the one step the script took and predict prices
    it; measure asked after the script's end whether a model had run, and the model, made
    in `main()` and held weakly, was gone: "the policy never applied: no model ran in the
    1 step taken (--steps 1): the script called no module", a refusal of measure's alone.
    Now the policy that was applied says a model ran: measured as predicted."""
    run = run_client("train_carried_fold.py", ["--steps", "1"], ["checkpoint:blocks.0"],
                     steps=2)
    got = run.policies["checkpoint:blocks.0"]
    assert got.measure_refusal == ""
    assert got.predicted == got.measured
