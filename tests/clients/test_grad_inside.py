"""A module whose forward takes a gradient of its own work (tests/clients/train_grad_inside.py:
`torch.autograd.grad(logZ, s, create_graph=True)` as its last op, as torch-struct's
marginals are taken), the loss read from that gradient.

Measured (`tests/clients/harness.py run_client`, the helper hunt49d, 2026-12-07, torch 2.13.0
CPU, AMD EPYC; 2 steps): ledger = allocator 75,424 B, at the loss's `mul` (step 2);
`checkpoint:blocks.*` 81,440 B and `offload:marg.proj` 73,380 B predicted = measured.
"""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_gradient_taken_in_a_forward_ends_its_backward_where_the_module_returns():
    """Note [A backward that ends its module's forward] (trace/collector.py): the grad was
    marg's last op, so its backward's end was seen at the script's loss, after marg and the
    model had returned: both calls were written in phase "backward", the peak read "other",
    and predict refused `checkpoint:marg` and `offload:marg` as "never called as a module"
    while measure ran them (75,236 and 67,108 B). The calls are forward calls now, the
    peak is the loss's. Priced, the two policies were wrong (`offload:marg` 71,264 B
    against 67,108 B measured; torch-struct's CRF under `checkpoint:` 17,284 B over): a
    backward that reads a call's saves before the call returns is refused in one line
    (Note [A save read before its call returns], replay/engine.py), measure runs it."""
    pols = ["checkpoint:marg", "offload:marg", "checkpoint:blocks.*", "offload:marg.proj"]
    run = run_client("train_grad_inside.py", [], pols, steps=2)
    assert run.ledger_peak == run.allocator_peak == 75_424
    peak = run.ledger.peak()
    assert (peak.phase, peak.op, peak.step) == ("loss", "mul.Tensor", 2)
    scopes = run.ledger.scopes
    assert set(scopes[scopes["mod"].isin(["marg", ""])]["ph"]) == {"forward"}
    for policy, peak in {"checkpoint:blocks.*": 81_440, "offload:marg.proj": 73_380}.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    for policy, measured in {"checkpoint:marg": 75_236, "offload:marg": 67_108}.items():
        p = run.policies[policy]
        assert p.predicted is None and p.measured == measured
        assert "takes a gradient of its own work before it returns" in p.predict_refusal
