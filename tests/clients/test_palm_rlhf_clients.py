"""PaLM-rlhf-pytorch (tests/clients/train_palm_rlhf.py): lucidrains' PaLM (parallel
attention + SwiGLU blocks, multi-query attention, rotary embeddings cached as buffers on the
first call, tied embedding) trained as a language model, and its `RewardModel` (a
non-causal PaLM copy with a LoRA scope whose modules, `palm.finetune_modules.reward.N.M`,
are called inside each `palm.layers.N` block) LoRA-finetuned on binned ratings.

Measured (`tests/clients/harness.py run_client`, steps 1, the helper hunt44d, 2026-12-06,
torch 2.13.0 CPU, PaLM-rlhf-pytorch 0.8.0, dim 32, depth 2, 64 tokens, batch 2 x 16):
`--mode lm`: ledger 324,270 B + 12 B of kernel scratch (the optimizer's) = allocator
324,282 B (the peak in Adam's step); `checkpoint:layers.*`, `checkpoint:layers.0.fn` and
`offload:layers.*` 324,282 B, predicted and measured (before the fix: `checkpoint:layers.*`
predicted 389,338 B, `checkpoint:layers.0.fn` 356,810 B; Note [A buffer kept without a
graph], replay/engine.py). With `--steps 2` the peak is step 2's backward: 355,714 B, and
checkpoint 338,202 B both sides. `--mode reward`: ledger = allocator 307,176 B;
`checkpoint:palm.layers.*` 281,980 B, `offload:palm.layers.*` 253,944 B,
`checkpoint:palm.finetune_modules.reward.0.0` (LoRA's q, called inside `palm.layers.0`)
310,184 B, predicted and measured (before the fix: `checkpoint:palm.layers.*` predicted
323,256 B, the re-runs' saves held to the end of the run through the peak in backward).

`--mode ppo` (the library's `RLHFTrainer.train`: generation, the reward model's calls with
gradients on, one actor and one critic AdoptAtan2 step, through accelerate): ledger =
allocator 607,832 B at `--steps 2` (the peak in the PPO loss); every model call runs before
the first optimizer step names the model (the ActorCritic), so policies on
`actor_palm.layers.*` are refused by both ("ran only before the first optimizer step
decided which module is the model"); ~4 s of CPU a run, so not in this file. The trainer's
own name for the actor, `checkpoint:palm.layers.*`, was refused by predict as "the modules
the traced forward called are (none recorded)" while measure listed the model's modules
(Note [The model's modules, none called after], replay/policies.py; pinned in
tests/unit/test_policies.py).

`selective:layers.*` with `--steps 2`: refused by both (the rotary cache and the causal
mask are filled on the first call, and the re-run slices them). With `--steps 1` measure
refuses it and predict prices it: one call of the block is all the ledger has, and it
cannot tell a cache filled once from a buffer made anew on every call (left alone; see
docs/decisions.md, forty-fourth session).
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("palm_rlhf_pytorch") is None:
    pytest.skip("PaLM-rlhf-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import palm_rlhf_pytorch  # noqa: F401  (accelerate, einops, beartype: before any pass)


def test_a_rotary_cache_registered_on_the_first_call_holds_no_rerun_saves():
    """PaLM's block registers its rotary embedding (`pos_emb`, `pos_emb_scale`) and its
    attention the causal mask as buffers on the first call: held to the end of the run, and
    re-made by a checkpointed block's re-run as the replay reads it, but made from buffers
    alone (a bool mask, `arange`), no graph. The replay held the re-run's saves for as long
    as the module keeps those buffers, to the end of the run: 32,528 B per block over
    measured at Adam's step, `checkpoint:layers.*` 389,338 B against 324,282 B."""
    run = run_client("train_palm_rlhf.py", ["--mode", "lm"],
                     ["checkpoint:layers.*"], steps=1)
    assert run.ledger_peak == 324_270
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 324_282
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        "checkpoint:layers.*": (324_282, 324_282)}


def test_a_lora_finetuned_reward_model_is_predicted_to_the_byte():
    """The RewardModel's LoRA modules live under `palm.finetune_modules` and run inside
    `palm.layers.N`'s forward: a policy on the block takes them in, one on a LoRA module
    acts on a call inside the block. `checkpoint:palm.layers.*` was predicted 323,256 B,
    41,276 B over measured, by the rotary cache's mistake (the test above)."""
    run = run_client("train_palm_rlhf.py", ["--mode", "reward"],
                     ["checkpoint:palm.layers.*", "offload:palm.layers.*",
                      "checkpoint:palm.finetune_modules.reward.0.0"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 307_176
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        "checkpoint:palm.layers.*": (281_980, 281_980),
        "offload:palm.layers.*": (253_944, 253_944),
        "checkpoint:palm.finetune_modules.reward.0.0": (310_184, 310_184)}


def test_the_doctor_finds_the_reward_models_unoptimized_parameters_and_nothing_in_the_lm():
    """`RewardModel.finetune_parameters()` lists the LoRA scope and the head: the frozen
    PaLM's weights and the prompt/response embeddings still require gradients, get them,
    and no optimizer steps them (a true warning); the language model's loop is clean."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_palm_rlhf.py", ["--mode", "lm"], 1)
    assert outcome.code == 0, outcome.reason
    assert report.findings == [], [f.line() for f in report.findings]
    report, outcome = diagnose_in_process(HERE / "train_palm_rlhf.py", ["--mode", "reward"], 1)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == [("no_optimizer", "warning")]
    assert report.findings[0].message.startswith(
        "12 trainable parameters (`prompt_embed`, `response_embed`, `palm.token_emb.weight` "
        "and 9 more) are in no optimizer")
