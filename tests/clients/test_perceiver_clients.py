"""perceiver-pytorch (tests/clients/train_perceiver.py): lucidrains' `Perceiver`, latents
cross-attending to an image with Fourier position features (its `fourier_encode`), with
`weight_tie_layers=True`: the library's `cache_fn` hands every layer after the first one
`PerceiverBlock`, so `layers.1` and `layers.2` are one module, listed once by
`named_modules()` and called twice a forward; an input mask; a plain Adam loop.

Measured (`tests/clients/harness.py run_client`, 2 steps, hunt47d, 2026-12-06, torch
2.13.0 CPU), `--depth 3 --tie --mask`: ledger 403,768 B = allocator;
`checkpoint:layers.*` 322,376 B, `offload:layers.1` (the tied block, both its calls)
332,576 B, predicted and measured. Also exact, not kept as tests (docs/accuracy.md,
"perceiver-pytorch"): selective and offload on every block, inverted cross-attention,
`queries_contribute_kv`, the Enformer attention residual over the kept block outputs
(a checkpoint of it refused alike: the list it is handed grows after the call), Perceiver
IO with tied layers, its structured sequence dropout and decoder feed-forward, PerceiverLM
with accumulation and clipping, fake runs against real ones, `compare`'s gates; the doctor
finds nothing.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("perceiver_pytorch") is None:
    pytest.skip("perceiver-pytorch is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]

ARGV = ["--depth", "3", "--tie", "--mask"]


def test_tied_perceiver_layers_are_predicted_as_measured_and_named_by_their_second_path():
    """The tier: ledger = allocator, two policies predicted = measured, the doctor clean.

    And `checkpoint:layers.2` (the third layer as `print(model)` shows it, the tied block
    `named_modules()` calls `layers.1`) read "selector 'layers.2' matches no module; ...",
    in predict and measure alike, listing modules among which the block sat under its first
    name. Both now say it is the block's second path (Note [A module under a second path],
    trace/roots.py)."""
    ckpt, tied, second = "checkpoint:layers.*", "offload:layers.1", "checkpoint:layers.2"
    run = run_client("train_perceiver.py", ARGV, [ckpt, tied, second], steps=2)
    assert run.ledger_peak == run.allocator_peak == 403_768
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {ckpt: (322_376, 322_376), tied: (332_576, 332_576), second: (None, None)}
    said = run.policies[second]
    assert said.predict_refusal == said.measure_refusal
    assert said.measure_refusal == (
        "memledger: selector 'layers.2' matches layers.2, another path of layers.1: the model "
        "registers a PerceiverBlock under several paths (layers.1, layers.2), as tied layers "
        "are, and names it by its first, as `named_modules()` lists it; a policy acts on a "
        "module, so on every call of it: select layers.1 (all of its calls), or give each "
        "layer a module of its own")
    assert_one_doctor_error("train_perceiver.py", ARGV, 2, None, "")
