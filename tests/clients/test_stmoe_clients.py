"""st-moe-pytorch (tests/clients/train_stmoe.py): lucidrains' ST-MoE, a top-2 router with a
capacity factor whose dispatch and combine tensors depend on the routing. Here the two
defects it found: the router's losses left out of the loss under a checkpointed gate, and
a fake run whose capacity one-hot took a stand-in width. Every other mode and policy run
(experts that get no token, `SparseMoEBlock`, a MoE transformer, gumbel and
coordinate-descent routing, autocast) was exact before and is listed in docs/accuracy.md,
"st-moe-pytorch"; the file stays small for the suite's time. Skipped without
st-moe-pytorch."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from tests.clients.harness import HERE, _call, imported_first, ledger_pass, predicted_peak, \
    run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("st_moe_pytorch")
_imported = imported_first("st_moe_pytorch")

SMALL = ["--dim", "16", "--batch", "2", "--seq", "8"]


def test_router_losses_left_out_a_checkpointed_gate_is_exact():
    """Trained on the task loss alone (`--no-aux`): the router's balance and z-losses are
    returned and kept by the script's variables until the next step's forward rebinds
    them, never backpropagated, and their nodes hold the gate's saves. Under
    `checkpoint:gate` torch's re-run in backward packs those saves again and the frame
    keeps each copy for its node, into the next step's forward where the peak is (Note [A
    re-made save no backward reads], replay/engine.py). Predicted 192,768 B before,
    measured 193,120 (the (2, 8, 4) fp32 logits 256 B, the (2, 8) logsumexp 64 B, the
    (2, 4) mean 32 B); `selective:gate` predicted 193,280 before, 193,376 now, as
    measured (not measured here, for the time: its save list hands the logits back).
    With 16 experts (some get no token in a step), with the aux losses in the loss, and
    on the script's MoE transformer every policy was exact already (docs/accuracy.md,
    "st-moe-pytorch")."""
    run = run_client("train_stmoe.py", ["--mode", "moe", "--no-aux", *SMALL],
                     ["checkpoint:gate"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 186_048
    p = run.policies["checkpoint:gate"]
    assert p.predicted == p.measured == 193_120, p
    assert predicted_peak(run.ledger, "selective:gate") == 193_376


def test_fake_run_of_the_router_stops_at_its_one_hot():
    """`safe_one_hot` sizes `F.one_hot(positions, max(positions.max() + 2, capacity))` by
    the routing. Before, Rule 3's stand-ins made it 0 wide, every expert got 0 tokens, and
    the fake run ended with a peak of 593.2 KiB against the real 766.9 KiB (default
    sizes), silently. Now the run stops with the line, exit 2 (Rule 24 of Note [Fake
    runs], trace/fake_literals.py)."""
    from memledger.trace import worker as trace_worker

    with tempfile.TemporaryDirectory(prefix="memledger-stmoe-") as tmp:
        status = Path(tmp) / "status.json"
        code = _call(trace_worker.main, ["ledger", "--fake", "--device", "cpu", "--out",
                                         str(Path(tmp) / "x.ledger"), "--status", str(status),
                                         "--steps", "1", str(HERE / "train_stmoe.py"), "--",
                                         "--mode", "moe", *SMALL])
        reason = json.loads(status.read_text())["reason"]
    assert code == 2, reason
    # the script's line, then the library's (as a library's value reads are said)
    assert reason.startswith("memledger: cannot run fake at tests/clients/train_stmoe.py:") \
        and "`out, aux, balance, z = model(x, noise_gates=args.mode == \"noise\")`: " \
        "`st_moe_pytorch` (called by the script) at st_moe_pytorch/st_moe_pytorch.py:" in \
        reason and "`return F.one_hot(indexes, one_hot_classes)[..., :max_length]`: one_hot's" \
        " width (num_classes) is read from a tensor's values" in reason, reason


def test_router_losses_by_a_second_backward_are_priced_as_measured():
    """`loss.backward(retain_graph=True)`, then `aux.backward()` (`--aux-backward`): the
    gate's softmax is read by both passes, and a checkpoint re-runs the gate in each; what
    its dispatch and combine tensors are built from (its `topk`, `zeros`, `sum` and `clamp`
    outputs) is read by the task loss's backward alone. predict refused it as "would re-run
    gate in each of two backward passes" (Note [A re-run in each backward pass]), which
    `memledger measure` ran (195,208 B at these sizes, one step; 229,480 B over 2 steps).
    Now those tensors place no segment and the first pass's copies are priced (Note [A
    dropped storage a later call reads in the second pass], replay/engine.py): 195,208 B
    predicted, as measured (and 229,480 B over 2 steps). Offload stays predicted (one
    step: 186,440 B, as `memledger measure` gives; 215,656 B over 2 steps)."""
    led = ledger_pass("train_stmoe.py", ["--mode", "moe", "--aux-backward", *SMALL], steps=1)
    assert predicted_peak(led, "checkpoint:gate") == 195_208
    assert predicted_peak(led, "offload:gate") == 186_440
