"""nflows (tests/clients/train_nflows.py): a neural spline flow as nflows' README trains it,
`-flow.log_prob(inputs=x).mean()` through a `Flow` whose `CompositeTransform` holds ActNorm
(initialised from the first batch), rational-quadratic couplings over a `ResidualNet` and
LULinear. Skipped without nflows.

Measured (`run_client`, `--mode nsf`, 2 layers, hidden 16, batch 64, two steps, forty-sixth
session): the ledger with its kernel scratch 167,966 B = the allocator (167,934 B before);
`checkpoint:` on every transform 145,030 B and `selective:@ActNorm` 177,534 B (both
refused by predict alone before) and `offload:` 80,566 B, predicted = measured; the doctor
silent. The other modes (`maf`, `maf --bn`, `armqs`, `cond`) read exact at two steps, or
refused alike (BatchNorm's running statistics under checkpoint and selective).
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("nflows") is None:
    pytest.skip("nflows is not installed", allow_module_level=True)

from tests.clients.harness import assert_one_doctor_error, run_client  # noqa: E402

pytestmark = pytest.mark.clients

NSF = ["--mode", "nsf", "--layers", "2"]


def test_spline_flow_exact_its_actnorm_checkpointed_and_the_doctor_silent():
    """Two bugs this tier found, pinned by one run. The couplings scale their spline
    parameters in place on slices of the net's output (`unnormalized_widths /=
    np.sqrt(...)`), and each `div_` saves its divisor inside the CopySlices autograd made:
    the ledger read 32 B under the allocator (Note [A number saved inside CopySlices],
    trace/scalars.py: 167,934 B against 167,966 B). ActNorm tests its `initialized` flag and sets it once: predict
    refused `checkpoint:_transform._transforms.*` ("replaces ..initialized by a tensor made
    from the one before") while measure ran it (Note [A flag read to Python],
    trace/collector.py), and `selective:@ActNorm` as a cache's first fill ("the re-run
    would run other ops than its forward"), which measure ran too."""
    run = run_client("train_nflows.py", NSF, ["checkpoint:_transform._transforms.*",
                                              "offload:_transform._transforms.*",
                                              "selective:@ActNorm"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 167_966, run.allocator_peak
    p = run.policies["checkpoint:_transform._transforms.*"]
    assert p.predicted == p.measured == 145_030, p
    p = run.policies["offload:_transform._transforms.*"]
    assert p.predicted == p.measured == 80_566, p
    # the flag's first fill (step 1; step 2's call reuses it): the re-run skips the set-up,
    # which made no op torch's selective checkpoint saves (Note [A first fill behind a
    # flag], replay/engine.py)
    p = run.policies["selective:@ActNorm"]
    assert p.predicted == p.measured == 177_534, p
    assert_one_doctor_error("train_nflows.py", NSF, 2, None, "")


def test_flow_sampled_for_reverse_kl_refused_alike_in_the_same_words():
    """`flow.sample_and_log_prob(n)` runs every transform through its `inverse`, none a
    module call. predict listed the matched modules with those holding parameters first
    ("matches _transform._transforms.1, _transform._transforms.0, never called ...")
    where measure lists them as the model holds them (Note [Modules listed as the model
    holds them], replay/prepared.py), and `@ReversePermutation` (a module holding one
    buffer) read "matches no module" in predict alone (Note [Modules run through another
    method], trace/collector.py `classes`). Both lines now equal measure's."""
    run = run_client("train_nflows.py", ["--mode", "reverse", "--layers", "1", "--hidden", "8",
                                         "--batch", "16"],
                     ["checkpoint:_transform._transforms.*", "offload:@ReversePermutation"],
                     steps=1)
    for p in run.policies.values():
        assert p.predicted is None and p.measured is None, p
        assert p.predict_refusal == p.measure_refusal, p
        assert "never called as a module" in p.predict_refusal, p
    assert "matches _transform._transforms.0, _transform._transforms.1, never" in \
        run.policies["checkpoint:_transform._transforms.*"].predict_refusal
