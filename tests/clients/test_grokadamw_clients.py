"""grokadamw and adam-atan2-pytorch (tests/clients/train_grokadamw.py): a tiny transformer
grokking modular addition under grokadamw's `GrokAdamW` (a gradient EMA per parameter whose
momentum the `grokking_signal_fns` closures decay from the losses, kept in
`param_groups[i]['state']`, each parameter's gradient clipped inside the step) or
adam-atan2-pytorch's `AdamAtan2` family (atan2 in place of eps; `--regen`, `--cautious`,
`AdamAtan2ClipGrok`, `AdoptAtan2`).

Measured (`tests/clients/harness.py run_client`, the helper hunt54c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread, 2 steps; ledger = allocator, no kernel
scratch, every policy predicted = measured; parameters 27,423 floats = 109,692 B):
- GrokAdamW (every `--signal`: none, gap with `--validate`, tensor, raise; `--no-clip`):
  1,380,220 B, optimizer state 329,076 B = 3 x 109,692 (exp_avg, exp_avg_sq, grok_ema; the
  step a Python int); `checkpoint:blocks.*` 1,037,884, `offload:blocks.*` 831,612,
  `selective:@Block` 1,262,844, `checkpoint:@Attention` 1,190,652, `offload:@MLP`
  1,134,460, `checkpoint:*` 1,390,332.
- `--opt atan2` and `--opt clipgrok --wd 0.1 --cautious-wd`: 1,270,528 B, state 219,384 B
  (2 x); `--opt atan2 --regen 0.1 --cautious 0.5` and `--opt adopt --regen 0.1`: 1,380,220
  B, 3 x (`param_init`; ADOPT's `v` is the first gradient squared, its first step moves
  nothing); `--closure --opt adopt --keep-zeros` 1,375,868 B.
- `--reload-at 1` (the test): a checkpoint saved and loaded after step 1; GrokAdamW's
  group state is deep-copied by `load_state_dict`, keyed by copies of the parameters, and
  step 2 makes a fresh state beside it: 1,928,680 B at step 2's backward with 438,768 B
  of state (the loaded 3 x and the 1 x of key copies), 767,844 B resident at the end; the
  key copies read `other` and the state was named by their printed values before hunt54c
  (Note [A tensor as a key], trace/optimizer_state.py).
The fake ledgers equal the real ones (`--reload-at` aside: torch.save under --fake is
refused, as docs/fake.md says); the doctor finds nothing on these loops, and says
`grad_leak` (`--bug no-zero-grad`) and `no_gradient` (`--bug readme-closure`, the README's
closure with no backward).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("grokadamw") is None or \
        importlib.util.find_spec("adam_atan2_pytorch") is None:
    pytest.skip("grokadamw or adam-atan2-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

PARAMS = 4 * (2 * (64 + 96 * 32 + 32 * 32 + 32 + 64 + 128 * 32 + 128 + 32 * 128 + 32)
              + 32 * 32 + 3 * 32 + 64 + 32 * 31 + 31)   # bytes = floats x 4 (fp32)


def test_grokadamw_state_after_a_reload_and_adam_atan2s_loop():
    """GrokAdamW with the README's train / validation gap as its grokking signal, a
    checkpoint saved and loaded after step 1: its group state comes back keyed by copies of
    the parameters (held state, Note [A tensor as a key]) and step 2 makes a fresh one beside
    it. Three policies predicted and measured to the byte; the doctor finds nothing on
    AdamAtan2 with regenerative regularization and cautious updates."""
    argv = ["--reload-at", "1", "--signal", "gap", "--validate"]
    pols = {"checkpoint:blocks.*": 1_613_268, "offload:blocks.0+checkpoint:blocks.1": 1_613_268,
            "selective:@Block": 1_811_304}
    run = run_client("train_grokadamw.py", argv, list(pols), steps=2)
    # pinned on AVX2; the relations hold on every CPU kind (Note [Numbers that depend on the
    # CPU], harness.py): no kernel scratch seen here
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=1_928_680)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert PARAMS == 109_692
    assert run.ledger.at_peak()["optimizer_state"] == 4 * PARAMS   # loaded 3 x + key copies
    assert run.summary.resident["optimizer_state"] == 7 * PARAMS   # + step 2's fresh 3 x
    assert run.summary.resident["other"] == 4 * PARAMS   # the checkpoint the script holds
    assert_one_doctor_error("train_grokadamw.py",
                            ["--opt", "atan2", "--regen", "0.1", "--cautious", "0.5"], 2,
                            None, "")
