"""torchtune (tests/clients/train_torchtune.py): a tiny Llama-3 decoder from torchtune's
component builders, trained as its single-device recipes train it (full and LoRA / DoRA,
its activation checkpointing helper, its chunked cross-entropy, optimizer in backward).

Measured (`memledger measure --steps 2`, hunt39a, 2026-12-06, torch 2.13.0 CPU, torchtune
0.6.1; ledger = allocator, every policy predicted = measured):

- default (2 layers, dim 64, seq 32, batch 2): baseline 2,779,300 B; `checkpoint:layers.*`
  2,603,108; `offload:layers.*` 2,433,196; `selective:layers.*` 2,619,492;
  `checkpoint:layers.*.attn` 2,656,292; `checkpoint:layers.0+offload:layers.1` 2,603,108.
- `--lora --chunks 4`: baseline 1,411,248 B; `checkpoint:layers.*` 1,139,504;
  `offload:layers.*` 932,768; `selective:layers.*` 1,379,120.
- `--dora --chunks 2`: baseline 1,513,792 B; `checkpoint:layers.*` 1,192,128;
  `offload:layers.*` 935,472; `selective:layers.*` 1,458,368.
- `--ac --accum 2`: baseline 2,838,052 B; `offload:layers.*` 2,821,668; checkpoint and
  selective of the layers refused by both sides (the script checkpoints them already).
- `--opt-in-bwd`: baseline 2,746,276 B (2,746,288 with kernel scratch, the allocator's);
  `checkpoint:layers.*` 2,345,264; `offload:layers.*` 2,022,308;
  `checkpoint:layers.*.mlp` 2,494,256.
"""

import importlib.metadata
import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client


def _torchao_usable() -> bool:
    """torchtune 0.6.1 imports torchao, and `torchao.quantization.int4_weight_only` (gone in
    torchao 0.17) and `torchao.dtypes.nf4tensor` (gone in 0.18) from it; read from the
    metadata, so that collecting this module imports neither."""
    try:
        major, minor = importlib.metadata.version("torchao").split(".")[:2]
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (int(major), int(minor)) < (0, 17)


# Not in the dev extra (pyproject.toml): peft refuses a torchao older than 0.17, so one venv
# holds either peft's tests or these
if importlib.util.find_spec("torchtune") is None:
    pytest.skip("torchtune is not installed", allow_module_level=True)
if not _torchao_usable():
    pytest.skip("torchtune 0.6.1 needs torchao older than 0.17 (and peft refuses one)",
                allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _torchtune_imported():
    """torchtune imports torchao, which registers its ops and may make tensors as it loads:
    imported before the first pass, every pass starts from the same state."""
    import torchtune.models.llama3  # noqa: F401
    import torchtune.modules.loss  # noqa: F401
    import torchtune.modules.peft  # noqa: F401
    import torchtune.training  # noqa: F401


def test_optimizer_in_backward_steps_once_per_backward_and_policies_are_exact():
    """torchtune's `optimizer_in_bwd`: one AdamW per parameter, stepped by a
    post-accumulate-grad hook inside backward (`training.register_optim_in_bwd_hooks`).
    Each parameter's update ended a training step (21 per backward); `trace --steps 2`
    stopped after two updates at 1,629,788 B and its allocator pass lost the measured
    peak ("trying to pop from empty mode stack"); in one process `measure` then failed
    with "Profiler is already enabled on this thread" (Note [An optimizer stepped inside
    backward], trace/steps.py). One step per forward and backward now, as `--steps-by
    forward` counts it."""
    run = run_client("train_torchtune.py", ["--opt-in-bwd"],
                     ["checkpoint:layers.*", "offload:layers.*"], steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == 2_746_276
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 2_746_288
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:layers.*": (2_345_264, 2_345_264),
                   "offload:layers.*": (2_022_308, 2_022_308)}


def test_lora_with_torchtunes_own_checkpointing_and_chunked_loss():
    """The LoRA recipe with `enable_activation_checkpointing` (torchtune's
    `set_activation_checkpointing`, torch.distributed's CheckpointWrapper) and
    `CEWithChunkedOutputLoss`: offload around the script's checkpoints is exact,
    checkpointing them again is refused by predict and measure alike."""
    run = run_client("train_torchtune.py", ["--lora", "--chunks", "4", "--ac", "--layers", "1"],
                     ["offload:layers.*", "checkpoint:layers.*"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 851_484
    off, ck = run.policies["offload:layers.*"], run.policies["checkpoint:layers.*"]
    assert off.predicted == off.measured == 835_100
    assert ck.predicted is None and ck.measured is None
    assert ck.predict_refusal == ck.measure_refusal and "already checkpoints" in \
        ck.predict_refusal and "\n" not in ck.predict_refusal


def test_the_doctor_finds_nothing_in_the_dora_recipe_loop():
    """With DoRA's magnitudes initialized as the recipe does once the base weights are in
    (left `torch.empty`, the doctor rightly reported `nonfinite_grad` on 12 parameters)."""
    assert_one_doctor_error("train_torchtune.py", ["--dora", "--chunks", "2", "--layers", "1"],
                            2, None, "")
