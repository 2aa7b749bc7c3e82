"""sophia-opt (tests/clients/train_muon_sophia.py --opt sophia): the paper's SophiaG as its
README trains with it, on a tiny nanoGPT (`lm_head` tied to the token embedding): each
step `optimizer.step(bs=tokens)`, then `zero_grad(set_to_none=True)`; every `--hess-every
K` steps the Hessian refresh: a forward without targets, labels sampled from the logits by
`torch.distributions.Categorical`, their cross-entropy's backward, `update_hessian()`
(each gradient squared into `state['hessian']`), zero_grad again. A step whose shape
changes every K steps.

Measured (`tests/clients/harness.py run_client`, the helper hunt53b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy
predicted = measured):
- `--hess-every 1` (2 steps, the test): 735,260 B at step 2's backward (the refresh of
  step 1 before it); `checkpoint:blocks.*` 658,396, `offload:blocks.*` 586,268,
  `selective:@Block` 702,748 B; `checkpoint:*` 754,972, `offload:blocks.*.attn` 652,316,
  `offload:wte` 735,260 (the tied embedding saves nothing of its own).
- `--hess-every 1 --free-refresh` (the refresh's tensors deleted after `update_hessian()`,
  which the README does not): 718,876 B, 16,384 B less.
- `--hess-every 2 --scaler --clip 1.0` (3 steps), `--accum 2 --untied --validate`, `--amp`:
  docs/accuracy.md.
- 1 step: 515,732 + 12 B of kernel scratch = 515,744 B in the step (the state made), each
  policy 515,744 B.
The doctor said `dropped_update` ("2 of 5 backward passes made gradients that no
optimizer.step() used") of the refreshes' backward passes, which `update_hessian()` uses:
Note [Gradients an optimizer takes outside its step] (trace/doctor_probe.py). `trace
--fake --device cpu` stopped at `Categorical(logits=logits)` (its argument validation read
as a stand-in False); both fixed, the fake ledgers now equal the real ones. The refresh's
`samp_dist` and `logits`, kept to the next refresh, hold a branch no backward ran (the
normalised logits and their softmax): 33,024 B of saves through step 2, which `show` called
unread and the doctor did not name; now a `cross_step_retention` warning (the helper
fix53d: Note [A branch no backward ran, kept past a later backward]).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io

import pytest

from tests.clients.harness import HERE, assert_one_doctor_error, run_client

if importlib.util.find_spec("sophia_opt") is None:
    pytest.skip("sophia-opt is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

# every parameter (the tied lm_head / wte counted once): two blocks of 12,704, lm_head
# 64 x 32, wpe 16 x 32, ln_f 2 x 32; 28 parameter tensors
ELEMENTS = 2 * (96 * 32 + 96 + 32 * 32 + 32 + 128 * 32 + 128 + 32 * 128 + 32 + 4 * 32) \
    + 64 * 32 + 16 * 32 + 2 * 32
TENSORS = 2 * 12 + 4


def test_sophia_hessian_refresh_is_no_dropped_update_and_policies_as_measured():
    """SophiaG's state: exp_avg and hessian (fp32, one each per parameter) and a 4 B step
    tensor per parameter: 8 x 28,032 + 4 x 28 = 224,368 B. The refresh's backward comes
    after step 1's zero_grad and before step 2's; the doctor finds nothing (it said
    `dropped_update` of it: the test fails on the old code)."""
    argv = ["--opt", "sophia", "--hess-every", "1"]
    pols = {"checkpoint:blocks.*": 658_396, "offload:blocks.*": 586_268,
            "selective:@Block": 702_748}
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_muon_sophia.py", argv, list(pols))
    assert run.ledger_peak == run.allocator_peak == 735_260
    assert run.summary.resident["optimizer_state"] == 8 * ELEMENTS + 4 * TENSORS == 224_368
    assert {k: (p.predicted, p.measured) for k, p in run.policies.items()} == \
        {k: (v, v) for k, v in pols.items()}
    # Note [A branch no backward ran, kept past a later backward]
    # (trace/doctor_retention.py): the refresh's `samp_dist` (its normalised logits and
    # their softmax) and `logits` stay bound through step 2's forward and backward; the
    # branch's saves are the logits, the softmax and the logsumexp, 2 x 16,384 + 256 B (no
    # finding on the old code)
    from memledger.doctor.run import diagnose_in_process

    with contextlib.redirect_stdout(io.StringIO()):
        report, outcome = diagnose_in_process(HERE / "train_muon_sophia.py", argv, 2)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == \
        [("cross_step_retention", "warning")]
    f = report.findings[0]
    assert f.evidence["side_saved_bytes_per_step"] == [2 * 16_384 + 256]
    assert f.evidence["also"] == ["logits"] and f.evidence["steps"] == [2]
    assert "`samp_dist` (and `logits`, which holds part of it) keep" in f.message
    assert "train_muon_sophia.py:209" in f.message and "32.2 KiB" in f.message
    lines = (HERE / "train_muon_sophia.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip() == \
        "samp_dist = torch.distributions.Categorical(logits=logits)"
    with contextlib.redirect_stdout(io.StringIO()):   # deleted after the refresh: clean
        assert_one_doctor_error("train_muon_sophia.py", [*argv, "--free-refresh"], 2,
                                None, "")
