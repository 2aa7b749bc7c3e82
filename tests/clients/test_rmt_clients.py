"""recurrent-memory-transformer-pytorch (tests/clients/train_rmt.py): a long sequence in
segments, memory tokens carried across them, and the wrapper's memory replay backprop,
which calls `backward` itself, twice per segment, inside its forward.

Measured (`memledger measure --steps 1`, hunt38d, 2026-12-05, torch 2.13.0 CPU) on
`--mode mrbp --dim 16 --depth 1 --seq-len 8 --segments 3 --memory 2 --streams 1`:
`offload:transformer.layers.0.1` 117,068 B.
"""

import pytest

from tests.clients.harness import ledger_pass, predicted_peak

pytest.importorskip("recurrent_memory_transformer_pytorch")
pytestmark = pytest.mark.clients

TINY = ["--dim", "16", "--depth", "1", "--seq-len", "8", "--segments", "3", "--memory", "2",
        "--streams", "1"]


def test_segments_re_run_after_a_backward_inside_the_forward_are_forward_calls():
    """`memory_replay_backprop=True`: the wrapper's forward runs the 3 segments under
    no_grad, then re-runs each with grad and calls `backward` on it, all inside its own
    call. After the first backward the phase read "other", so the second and third re-runs
    were no forward calls and predict's offload acted on one segment of three: 122,036 B
    (the baseline) predicted against 117,068 B measured. Now 117,068 B (Note [A backward
    called inside a forward], trace/collector.py)."""
    led = ledger_pass("train_rmt.py", ["--mode", "mrbp", *TINY], steps=1)
    sc = led.scopes[led.scopes["mod"] == "transformer"]
    assert sc["nograd"].tolist() == [True] * 3 + [False] * 3
    assert sc["ph"].tolist() == ["forward"] * 6
    assert predicted_peak(led, "offload:transformer.layers.0.1") == 117_068
