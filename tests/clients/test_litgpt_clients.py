"""litgpt (tests/clients/train_litgpt.py): tiny models from litgpt's named configs (`GPT.
from_name(name, n_layer=1, ...)`, nothing downloaded), fine-tuned as `litgpt finetune` does it
under Lightning Fabric: litgpt's LoRA (`litgpt.lora`, `mark_only_lora_as_trainable`) and
adapters, its SFT collate, `validate` before training, `fit`'s chunked `lm_head` and
`chunked_cross_entropy`, accumulation under `no_backward_sync`, clipping, the
warmup-then-cosine schedule, and `generate_example`'s KV-cache generation mid-run.

Measured (`memledger measure --steps 2` unless said, hunt44a, 2026-12-06, torch 2.13.0
CPU, litgpt 0.5.13; ledger = allocator, every policy predicted = measured, the doctor
clean on each loop but the adapter's):

- default (`pythia-14m` cut to 2 layers of width 32, full fine-tune): baseline 410,156 B;
  `checkpoint:transformer.h.*` 395,428; `offload:transformer.h.*` 386,564;
  `selective:transformer.h.*` 399,012; `checkpoint:transformer.h.0+offload:transformer.h.1`
  395,428.
- `--mode lora`: baseline 266,676 B; `checkpoint:transformer.h.*` 234,568;
  `offload:transformer.h.*` 187,492; `selective:transformer.h.*` 286,992;
  `checkpoint:transformer.h.*.attn` 233,816.
- `--mode adapter_v2`: baseline 263,212 B; checkpoint 223,756; offload 173,132; selective
  248,844 (all of `transformer.h.*`).
- `--config llama --mode lora --accum 2 --clip`: baseline 321,900 B; checkpoint 270,220;
  `offload:transformer.h.*.mlp` 272,812; selective 341,604.
- `--config mixtral` (LLaMAMoE, 4 experts, top 2): 1,017,820 B; checkpoint 1,016,708,
  offload 1,003,380, `selective:transformer.h.*.mlp` 1,016,708.
- `--config gemma` (soft-capping, sliding window, post-norms): 515,924 B; checkpoint
  457,564, offload 411,444, selective 467,380; `--config olmo2 --precision bf16-mixed`:
  531,232 B with the bf16 kernels' scratch (checkpoint 485,504, offload 452,404);
  `--precision bf16-true --mode lora`: 186,372 B with scratch (checkpoint 171,332, offload
  157,524); `--eval-interval 1` (validate and KV-cache generation after each step):
  410,160 B (checkpoint 395,432, offload 386,568, `selective:transformer.h.*.attn`
  409,768).

Not in the dev extra (pyproject.toml): litgpt 0.5.13 pins huggingface-hub below 1.4, and
transformers 5 needs 2.4 or newer; installed here with `pip install --no-deps litgpt`.
"""

import importlib.util

import pytest

if importlib.util.find_spec("litgpt") is None or importlib.util.find_spec("lightning") is None:
    pytest.skip("litgpt (and lightning) not installed", allow_module_level=True)

from tests.clients.harness import HERE, assert_one_doctor_error, run_client  # noqa: E402

pytestmark = pytest.mark.clients
SCRIPT = "train_litgpt.py"
H = "transformer.h.*"


@pytest.fixture(scope="module", autouse=True)
def _litgpt_imported():
    """torchmetrics (Fabric's and litgpt's `RunningMean`) makes a 4 B tensor as it is
    imported (`torchmetrics.functional.text.chrf._EPS_SMOOTHING`): imported inside the
    first pass only, that pass read 4 B over every later one (ledger 410,160 B against the
    allocator's 410,156). Imported before the first pass, every pass starts alike."""
    import lightning  # noqa: F401
    import litgpt.finetune.lora  # noqa: F401
    import litgpt.generate.base  # noqa: F401
    import litgpt.lora  # noqa: F401
    import torchmetrics  # noqa: F401


def test_lora_on_a_llama_config_and_the_head_clamp_made_in_the_forward():
    """LoRA on a Llama config (RMSNorm, grouped-query attention, SwiGLU; LoRA on query,
    value and MLP), two micro-batches per step, clipping. litgpt's `GPT.forward` makes
    `nn.Identity()` as its logit clamp on every call: the trace named it `Identity`, predict
    listed "Identity (Identity)" among the model's modules and predicted
    `checkpoint:Identity` (169,444 B) where measure refused it, "matches no module" (Note
    [Modules the model makes in its forward], trace/collector.py)."""
    run = run_client(SCRIPT, ["--config", "llama", "--mode", "lora", "--layers", "1",
                              "--accum", "2", "--clip"],
                     [f"checkpoint:{H}", f"offload:{H}.mlp", "checkpoint:Identity"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 169_444
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {f"checkpoint:{H}": (178_948, 178_948), f"offload:{H}.mlp": (159_280, 159_280),
                   "checkpoint:Identity": (None, None)}
    clamp = run.policies["checkpoint:Identity"]
    # both sides in one line saying what it is (Note [A selector of a module made in the
    # forward], replay/policies.py; fix53c): "matches no module; the ..." before
    assert clamp.predict_refusal == clamp.measure_refusal
    assert clamp.predict_refusal.startswith(
        "memledger: selector 'Identity' matches 'Identity', an Identity that the model's "
        "forward makes on each call and holds nowhere")
    assert "\n" not in clamp.predict_refusal


def test_the_doctor_finds_litgpts_adapter_trained_on_a_cache_from_validation():
    """litgpt 0.5.13's Adapter keeps its prefix's keys and values (`adapter_kv_cache`) from
    the first call on, gradients or not (litgpt issue #1287, open): `fit`'s sanity-check
    `validate` runs under `no_grad` first, so training reads a cache without a graph and
    `adapter_wte` never gets a gradient. The doctor says so, at the `validate` line."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / SCRIPT, ["--mode", "adapter", "--layers", "1"],
                                          2)
    assert outcome.code == 0, outcome.reason
    found = [(f.check, f.severity, f.where.line) for f in report.findings]
    lines = (HERE / SCRIPT).read_text().splitlines()
    validate_line = next(i for i, t in enumerate(lines, 1) if t.strip().startswith("validate("))
    assert found[0] == ("cut_graph", "error", validate_line), [f.line() for f in report.findings]
    assert "`transformer.h.0.attn.adapter_wte.weight`" in report.findings[0].message
    assert {f.check for f in report.findings} <= {"cut_graph", "unused_parameter"}


def test_the_doctor_finds_nothing_in_lora_with_generation_between_steps():
    """`--eval-interval 1`: after every step `validate` and `generate_example`, whose KV
    caches (`set_kv_cache`: a module and two buffers per attention, made and dropped
    between steps) are written in place under `no_grad`."""
    assert_one_doctor_error(SCRIPT, ["--mode", "lora", "--layers", "1", "--eval-interval", "1"],
                            2, None, "")
