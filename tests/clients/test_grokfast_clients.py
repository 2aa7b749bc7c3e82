"""grokfast-pytorch (tests/clients/train_grokfast.py): lucidrains' `GrokFastAdamW`, Adam
whose step keeps an EMA of each gradient in `optimizer.state` (`grok_exp_avg`, made at the
first step past `grokfast_after_step`) and adds it to the gradient in place, over a residual
MLP grokking modular addition; beside it the paper's own `gradfilter_ema` /
`gradfilter_ma` between backward and step (a dict of EMAs, a deque of past gradients, kept
by the script).

Measured (`tests/clients/harness.py run_client`, the helper hunt53c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread, 2 steps unless said; ledger = allocator,
no kernel scratch, every policy predicted = measured; parameters 20,927 floats = 83,708 B):
- default (`grokfast_after_step=0`): 579,192 B, optimizer state 251,124 B = 3 x 83,708
  (exp_avg, exp_avg_sq, grok_exp_avg); `checkpoint:blocks.*` 535,480, `offload:blocks.*`
  513,528, `selective:@Block` 564,216, `checkpoint:*` 599,416 (the same at 3 steps, and
  with `--after 1`).
- `--after 1 --spectral` (the test): 495,484 B; at the peak (step 2's backward) 167,416 B
  of state, the EMA made in step 2's `step()`, resident at the end 251,124 B; the spectral
  entropy's own backward inside `step()`'s pre-hook.
- `--regen 0.1` (a `param_init` clone each): 662,900 B, 334,832 B of state.
- `--opt adamw --filter ema`: 579,260 B, the EMAs 83,708 B of `other` resident at the
  end (`temporary` before fix53f: Note [Read by the next step], ledger/held_roles.py);
  `--filter ma` (window 2): 662,968 B, the deque's past gradients `other` from their
  parameter's next gradient on (`gradient` 83,708 B and `other` 167,416 B resident at the
  end; 251,124 B of `gradient` before fix53f: Note [A gradient the script keeps past its
  step]), and from the `zero_grad()` that dropped their `.grad` on (fix54a: at the 2-step
  peak, step 2's backward, `gradient` 20,604 B and `other` 83,708 B, where 83,708 and
  20,604 read before: Note [A gradient dropped from .grad]); each policy as measured.
- `--off-at 1 --keep-zeros --clip --accum 2 --validate` (3 steps): 575,104 B.
The fake ledgers equal the real ones; the doctor finds nothing on these loops, and says
`grad_leak` (`--bug no-zero-grad`), `zeroed_before_step` (`--bug zero-before-step`) and
`written_after_step` (`--opt adamw --filter ema --bug filter-after-step`: the filter after
the step; no finding before hunt53c, pinned by tests/doctor/late_grad_write.py).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("grokfast_pytorch") is None:
    pytest.skip("grokfast-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

PARAMS = 4 * (31 * 32 + 64 * 32 + 32 + 2 * (64 + 32 * 128 + 128 + 128 * 32 + 32) + 32 * 31 + 31)


def test_grokfast_adamw_state_made_late_and_a_backward_inside_its_step():
    """`GrokFastAdamW(grokfast_after_step=1, add_spectral_entropy_reg=True)`: the gradient
    EMA is made in step 2's `step()` (after Adam's moments), and a step pre-hook runs its own
    backward through `svdvals` of every matrix before each step. A policy on every block, a
    mix and selective on `@Block`, each predicted and measured to the byte; the state read as
    optimizer state (2 x parameters at step 2's backward, 3 x resident at the end); the
    doctor finds nothing (the backward inside `step()` adds to gradients the step reads)."""
    argv = ["--after", "1", "--spectral"]
    pols = {"checkpoint:blocks.*": 465_524, "offload:blocks.0+checkpoint:blocks.1": 465_524,
            "selective:@Block": 480_508}
    run = run_client("train_grokfast.py", argv, list(pols), steps=2)
    # pinned on AVX2; the relations hold on every CPU kind (Note [Numbers that depend on the
    # CPU], harness.py): svdvals takes LAPACK workspace, none seen here
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=495_484)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert PARAMS == 83_708
    assert run.ledger.at_peak()["optimizer_state"] == 2 * PARAMS
    assert run.summary.resident["optimizer_state"] == 3 * PARAMS
    assert_one_doctor_error("train_grokfast.py", argv, 2, None, "")
