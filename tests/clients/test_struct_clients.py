"""torch-struct and torchbearer (tests/clients/train_struct.py): a tagger or parser whose
loss is a structured distribution over a semiring (`LinearChainCRF`, `SemiMarkovCRF`,
`DependencyCRF`, `TreeCRF`), the dynamic program run in `crf`, a module of no parameters
the model holds and the loop calls after `model(tokens)`; trained by hand or in a
torchbearer `Trial` (its criterion calls `model.crf`; it steps the optimizer with a
closure).

Measured (`tests/clients/harness.py run_client`, the helper hunt49d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2); ledger = allocator with its kernel scratch, every policy that
both sides ran predicted = measured; docs/accuracy.md, "torch-struct and torchbearer"):
- the test's run (`--model chain --loss marginals --lengths`, 1 step): 83,884 B;
  `checkpoint:blocks.*` 73,004 B, `offload:scorer` 81,836 B, `selective:@Block` 85,292 B;
  `checkpoint:crf` refused by predict (the marginals are a gradient the CRF's forward
  takes of its own work: Note [A save read before its call returns], replay/engine.py),
  measured 91,476 B. 2 steps: 115,068 B; `offload:crf` 96,700 B measured.
- torchbearer `--loop trial --model dep --clip 1 --sched --valid` (1 step): 79,220 B +
  128 B of kernel scratch; `checkpoint:crf` 90,796 B, `offload:scorer` 73,140 B,
  `selective:@Block` 80,756 B.
The doctor finds nothing on either loop. torchbearer 0.5.5 runs on torch 2.13, but its
wheel installs a top-level `tests` package (`tests/__init__.py` in site-packages) that
hides this repository's `tests` (a regular package wins over a namespace one): it is in no
extra, and its test skips where it is not importable.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torch_struct") is None:
    pytest.skip("torch-struct is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_crf_tagger_trained_on_its_marginals_is_predicted_as_measured():
    """A linear-chain CRF over an MLP encoder, sentences of different lengths, the loss
    read from the CRF's marginals (the gradient of its log-partition, taken in the forward
    with `create_graph=True`, so the backward runs through a backward): the ledger equals
    the allocator, a policy on the blocks and offload of the scorer predicted and measured
    to the byte; `checkpoint:crf`, which torch re-runs inside the CRF's own forward for
    that gradient and again for the loss's backward, is refused by predict in one line and
    measured. The doctor finds nothing."""
    argv = ["--model", "chain", "--loss", "marginals", "--lengths"]
    pols = {"checkpoint:blocks.*": 73_004, "offload:scorer": 81_836}
    run = run_client("train_struct.py", argv, [*pols, "checkpoint:crf"], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.ledger_peak == 83_884
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    crf = run.policies["checkpoint:crf"]
    assert crf.predicted is None and crf.measured == 91_476
    assert "takes a gradient of its own work before it returns" in crf.predict_refusal
    assert_one_doctor_error("train_struct.py", argv, 2, None, "")


@pytest.mark.skipif(importlib.util.find_spec("torchbearer") is None,
                    reason="torchbearer is not installed")
def test_a_torchbearer_trial_of_a_dependency_parser_is_predicted_as_measured():
    """torchbearer's Trial (forward and backward in the optimizer's closure, gradient
    clipping and StepLR callbacks, a validation generator) training a biaffine
    DependencyCRF parser: the policies, `crf` (called by the Trial's criterion) among
    them, predicted and measured to the byte."""
    argv = ["--loop", "trial", "--model", "dep", "--clip", "1", "--sched", "--valid"]
    pols = {"checkpoint:crf": 90_796, "offload:scorer": 73_140, "selective:@Block": 80_756}
    run = run_client("train_struct.py", argv, list(pols), steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.ledger_peak == 79_220
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_struct.py", argv, 2, None, "")
