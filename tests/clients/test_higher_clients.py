"""higher (tests/clients/train_higher.py): MAML as facebookresearch/higher's README and
examples/maml-omniglot.py write it. Each task's `innerloop_ctx(net, inner_opt,
copy_initial_weights=False)` builds a functional copy of the net (`fnet`: new module
objects of classes `InnerFunctionalConv2d`..., their `_parameters` holding fast weights
that are plain tensors, first `p.clone()` of the net's parameters, then each
differentiable step's `w - lr * g`), whose inner steps are `autograd.grad(create_graph=
True)`; the query loss's backward runs through the unrolled loop into the net.

Measured (`tests/clients/harness.py run_client`, the helper hunt49c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; every policy predicted = measured):
- the test's `--bn --inner-opt adam --tasks 1` (1 step): 398,976 B, no kernel scratch;
  `offload:1` 403,648 B, `offload:3` 400,000 B, `offload:1+offload:3` 404,672 B.
- `--bn --inner-opt adam` (2 tasks, 1 step): 402,292 B; `offload:1` 406,964 B,
  `offload:3` 403,316 B, `offload:1+offload:3` 407,988 B.
- the defaults (2 steps): 192,004 B + 5,760 B of conv scratch = 197,764 B; `offload:1`
  202,372 B, `offload:3` 198,788 B; the first layer (the helper fix51b, Note [Rounds of
  a read-back, replayed], memledger/replay/engine.py) `offload:0` 206,532 B and
  `offload:*` 212,164 B (202,436 and 208,068 predicted before).
- `--model mlp --learned-lr --inner-opt momentum` (1 step): 150,100 B + 4 B of kernel
  scratch; `offload:1` 158,296 B (154,200 predicted before the helper fix51b).
`trace --fake --device cpu` equals the real ledger on the first two. Selectors name the
functional copy's modules (`0.0`, `1`: the paths of the net's), its classes are higher's
(`@InnerFunctionalConv2d`; `@Conv2d` matches no module, on both sides alike).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("higher") is None:
    pytest.skip("higher is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_maml_through_higher_is_predicted_as_measured_and_its_clones_are_no_parameters():
    """Two conv blocks with BatchNorm (higher copies its running statistics into `fnet`),
    DifferentiableAdam as the inner optimizer (its moments are tensors of the graph), one
    task of two inner steps: offload on the second block, on the head, and both, each
    predicted and measured to the byte; the doctor finds nothing.

    The functional copy's first call named the fast weights its `_parameters` held then,
    `p.clone()` of the net's, as parameters: `parameter` read 6,624 B at the peak, twice
    the net's 3,312 B (Note [A computed tensor in a module's parameters],
    trace/collector.py); measure's offloader kept them on the device as model state, as
    the replay did. They are activations now, offloaded on both sides. The copy's
    BatchNorm statistics (`buffer_sync`: clones, 144 B) are its buffers; the net's own,
    never called, read `other`, and so does another clone of them the script holds over
    the step."""
    argv = ["--bn", "--inner-opt", "adam", "--tasks", "1"]
    pols = {"offload:1": 403_648, "offload:3": 400_000, "offload:1+offload:3": 404_672}
    run = run_client("train_higher.py", argv, list(pols), steps=1)
    assert run.ledger_peak == 398_976
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=398_976)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predicted == p.measured
        assert_pinned(p.measured, avx2=peak)
    at = run.ledger.at_peak()
    # conv 8x1x3x3 + 8, BatchNorm 8 + 8, conv 8x8x3x3 + 8, BatchNorm 8 + 8, Linear 4x32 + 4
    assert at["parameter"] == (80 + 16 + 584 + 16 + 132) * 4 == 3_312
    assert at["buffer"] == 2 * (8 + 8) * 4 + 2 * 8 == 144
    # the net's own statistics, never called, and a second clone of them `innerloop_ctx`
    # makes before the task's forward and the script's `fnet` holds over the step (Note
    # [Kept by the script across a step], memledger/ledger/held_roles.py: `temporary`
    # before the fix53b helper)
    assert at["other"] == 2 * 144
    assert_one_doctor_error("train_higher.py", argv, 2, None, "")
