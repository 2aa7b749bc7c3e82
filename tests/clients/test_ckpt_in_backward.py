"""A checkpoint whose first run is in backward (helper hunt48c), pinned in plain torch
(tests/clients/train_ckpt_in_backward.py): each block runs under no_grad inside a Function
whose backward calls it again with a graph, and the block checkpoints a function of no
module (reentrant) only when its input requires grad, as memory-efficient-attention-
pytorch's chunked attention inside its reversible `Transformer` does
(tests/clients/test_memeff_clients.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt48c, 2026-12-07, torch
2.13.0 CPU; 2 steps, batch 12 in 3 chunks, dim 16, depth 2): ledger = allocator 29,648 B.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_the_state_a_checkpoint_first_run_in_backward_keeps_is_in_the_ledger():
    """Each chunk's checkpoint keeps the CPU generator's state (5,056 B) from its first run,
    inside the Function's backward, to its own backward. The collector dropped a
    checkpoint state taken in backward (Note [A checkpoint whose first run is in
    backward], trace/collector.py): the ledger read 22,216 B against the allocator's
    29,648 B. Recorded now: equal, and a policy on the layer before is predicted as
    measured."""
    run = run_client("train_ckpt_in_backward.py", [], ["checkpoint:inp"])
    assert run.ledger_peak == run.allocator_peak == 29_648
    p = run.policies["checkpoint:inp"]
    assert p.predicted == p.measured == 34_704


def test_a_kept_loss_below_a_scaled_root_is_asked_for_ctx_tensors():
    """`--keep-input`: each Recompute keeps its input on ctx as an attribute (768 B each,
    12 x 16 floats; two blocks), which `loss`, kept past the step, holds to the next
    forward. With `(loss * 0.5).backward()` the root was a temporary and `loss` an inner
    node of its spent graph, which the doctor never asked (no finding; `loss.backward()`
    got the warning). Now the nearest held tensor under a root no longer held is asked
    (Note [A spent graph held below its root], trace/doctor_retention.py): the same
    warning either way."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    for argv in (["--keep-input"], ["--keep-input", "--scale", "0.5"]):
        report, outcome = diagnose_in_process(HERE / "train_ckpt_in_backward.py", argv, 2)
        assert outcome.code == 0, outcome.reason
        (f,) = report.findings
        assert (f.check, f.severity) == ("cross_step_retention", "warning")
        assert f.evidence["ctx_bytes_per_step"] == [1_536, 1_536]
        assert "`loss` keeps its graph" in f.message and "`Recompute`" in f.message
