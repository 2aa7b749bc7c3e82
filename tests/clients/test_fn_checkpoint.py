"""Note [A policy checkpoint around a checkpointed function] (trace/script_checkpoint.py),
pinned in plain torch (tests/clients/train_fn_checkpoint.py): each `Mixer` checkpoints a
function that calls no module (`_scan`) in its own forward, as gateloop-transformer's
GateLoopedAttention checkpoints `gate_loop_operator` (tests/clients/test_gateloop_clients.py,
which skips without it).

Measured (`tests/clients/harness.py run_client`, the helper ckpt46, 2026-12-06, torch 2.13.0
CPU; 2 blocks, width 16, batch 8, 2 steps). Before, no side refused a policy checkpoint of
the Mixer or of the Block around it. Reentrant: `checkpoint:layers.0` predicted 36,468 B
against 35,956 B measured, `checkpoint:@Mixer` 40,820 against 39,796 B; non-reentrant
(30,900, 39,796 and `selective:layers.1.mix` 36,284 B) agreed by chance. Now both sides
refuse them in the same line; a checkpoint of a module inside the Mixer (its function runs
outside it) and offload are predicted as measured.

`--no-rng-state` (`preserve_rng_state=False`; the helper items47, 2026-12-06, 1 step): the
checkpoint asks for no generator state, where both sides met it, and neither refused.
Reentrant: `checkpoint:layers.0` predicted 21,300 B against 20,788 B measured,
`checkpoint:@Mixer` 25,652 against 24,628 B, `selective:layers.1.mix` 21,116 both;
non-reentrant: 20,788, 24,628 and 21,116 B, equal by chance, and `offload:layers.0.mix`
12,776 B predicted against 13,288 B measured (the Mixer's input to `_scan`, read back for
the re-run, held by the re-run's saves past its unpacking node). Now all three refused by
both sides in the same line, offload predicted as measured (Note [A checkpoint that keeps
no generator state], trace/script_checkpoint.py; Note [A re-run of a checkpointed function
holds the read-back copy], replay/engine.py).
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

_FIX = ("one checkpoint would run inside the other; turn the script's checkpointing off to "
        "compare policies, or offload that module instead")
_AT = "(torch.utils.checkpoint at train_fn_checkpoint.py:32)"
REFUSED = {
    "checkpoint:layers.0": "checkpoint:layers.0 would checkpoint layers.0, and "
    f"layers.0.mix's forward, which runs in it, checkpoints the function _scan itself {_AT}",
    "checkpoint:@Mixer": "checkpoint:@Mixer would checkpoint layers.0.mix, whose forward "
    f"checkpoints the function _scan itself {_AT}",
    "selective:layers.1.mix": "selective:layers.1.mix would checkpoint layers.1.mix, whose "
    f"forward checkpoints the function _scan itself {_AT}",
}


@pytest.mark.parametrize("kind, peak, allowed", [
    ("non-reentrant", (27_240, 27_252), {"checkpoint:layers.0.mix.proj": 32_308,
                                         "offload:layers.0.mix": 25_716}),
    ("reentrant", (30_420, 30_420), {"checkpoint:layers.0.mix.proj": 35_476,
                                     "offload:layers.0.mix": 28_884})])
def test_a_policy_checkpoint_around_a_checkpointed_function_is_refused_by_both(kind, peak,
                                                                               allowed):
    """The Mixer, or the Block around it, checkpointed or selective: one checkpoint runs
    inside the other (the reentrant kind's function runs three times, each with its own
    generator state), and both sides refuse in the same line, naming the function and the
    line that checkpoints it. The Mixer's `proj` (outside the function) and offload of the
    Mixer are predicted to the byte. The ledger: 12 B of kernel scratch under the
    allocator (non-reentrant)."""
    argv = ["--reentrant"] if kind == "reentrant" else []
    run = run_client("train_fn_checkpoint.py", argv, [*REFUSED, *allowed])
    assert (run.ledger_peak, run.allocator_peak) == peak
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, line in REFUSED.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (None, None), (text, p)
        assert p.predict_refusal == p.measure_refusal == f"memledger: {line}: {_FIX}"
    assert {t: (run.policies[t].predicted, run.policies[t].measured) for t in allowed} == \
        {t: (b, b) for t, b in allowed.items()}
    # `show` names them beside the modules the script checkpoints (none here)
    assert run.summary.script_checkpointed is None
    assert run.summary.script_checkpointed_functions == [
        "_scan (train_fn_checkpoint.py:32) in layers.0.mix",
        "_scan (train_fn_checkpoint.py:32) in layers.1.mix"]


@pytest.mark.parametrize("kind, peak, offloaded", [
    ("non-reentrant", 13_800, 13_288), ("reentrant", 14_824, 14_312)])
def test_a_checkpoint_that_keeps_no_generator_state_is_refused_by_both(kind, peak, offloaded):
    """`preserve_rng_state=False`: the first run asks for no generator state, and both sides
    meet it where it asks for the autocast state instead: the same three refusals. The
    non-reentrant re-run's saves hold the read-back copy of the function's input until the
    function's last backward op, as the script's checkpoint of a module does."""
    argv = ["--no-rng-state"] + (["--reentrant"] if kind == "reentrant" else [])
    run = run_client("train_fn_checkpoint.py", argv, [*REFUSED, "offload:layers.0.mix"],
                     steps=1)
    assert (run.ledger_peak, run.allocator_peak) == (peak, peak)
    for text, line in REFUSED.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (None, None), (text, p)
        assert p.predict_refusal == p.measure_refusal == f"memledger: {line}: {_FIX}"
    p = run.policies["offload:layers.0.mix"]
    assert (p.predicted, p.measured) == (offloaded, offloaded)
    assert run.summary.script_checkpointed_functions == [
        "_scan (train_fn_checkpoint.py:32) in layers.0.mix",
        "_scan (train_fn_checkpoint.py:32) in layers.1.mix"]
