"""Hugging Face TRL's own trainers (tests/clients/train_trl.py): SFT, DPO with a reference
model, DPO with `ref_model=None` and a LoRA adapter, reward modelling. A 2-layer Llama
(hidden 64) built from a config, a word-level tokenizer built in code, data sets in memory.

TRL's configs default to `gradient_checkpointing=True` and bf16 autocast, and project the
LM head through a fused kernel that writes each tile into a slice of a `torch.empty` buffer
with `torch.mm(.., out=tile)`; the bf16 CPU kernel takes scratch inside that call, which
the ledger could not place (it knew an event's op only from the storages it made): the
ledger read 13,294 B under the allocator on SFT, 8,288 B on DPO (Note [Ops that made
nothing, placed] in memledger/trace/collector.py). And compare's inputs gate digested the
unwritten buffer as an input of DPO's reference pass, and rejected every policy as "not
reproducible" (Note [Memory no one wrote is no input] in memledger/verify/capture.py).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from configs: never reach the hub

from tests.clients.harness import HERE, imported_first, native_bf16, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("trl", "datasets")
_imported = imported_first("trl", "datasets")

SCRIPT = "train_trl.py"


def _exact(run) -> None:
    """Every byte of the allocator's peak explained, every policy predicted to the byte."""
    explained = run.summary.measured.ledger_with_scratch_bytes or run.ledger_peak
    assert explained == run.allocator_peak, \
        f"ledger {explained:,} vs allocator {run.allocator_peak:,}"
    for text, p in run.policies.items():
        if p.predicted is None or p.measured is None:
            continue
        assert p.predicted == p.measured, (text, p)


def test_sft_as_trl_configures_it():
    """SFT with TRL's defaults: its own checkpoint over the layers, bf16 autocast, the fused
    LM head. The peak is in the fused head's forward, beside a tile `mm(out=)` whose kernel
    took 22,016 B of scratch: ledger + scratch = allocator (13,294 B short before). Offload
    of the checkpointed layers is exact; checkpoint and selective there are refused by
    both predict and measure (the script checkpoints them itself)."""
    run = run_client(SCRIPT, ["--trainer", "sft", "--steps", "3"],
                     ["offload:model.layers.*", "checkpoint:model.layers.*"])
    # the scratch is no tensor's; a CPU without native bf16 takes none there (Note [Numbers
    # that depend on the CPU], tests/clients/harness.py)
    assert run.ledger_peak < run.allocator_peak if native_bf16() else \
        run.ledger_peak == run.allocator_peak
    _exact(run)
    assert run.policies["offload:model.layers.*"].measured is not None
    ck = run.policies["checkpoint:model.layers.*"]
    assert ck.predicted is None and ck.measured is None
    assert ck.predict_refusal == ck.measure_refusal
    assert "which the script already checkpoints itself" in ck.predict_refusal


def test_dpo_with_a_reference_model_under_policies():
    """DPO, a policy and a reference model (chosen and rejected in one batch, the reference
    under no_grad), the script's own checkpointing off: the baseline and checkpoint /
    selective / offload over the policy's layers, each to the byte."""
    blocks = "model.layers.*"
    run = run_client(SCRIPT, ["--trainer", "dpo", "--no-grad-ckpt", "--steps", "3"],
                     [f"checkpoint:{blocks}", f"selective:{blocks}", f"offload:{blocks}"])
    _exact(run)
    assert all(p.measured is not None for p in run.policies.values())
    base = run.allocator_peak
    assert all(p.measured < base for p in run.policies.values())


def test_dpo_reference_pass_reads_no_unwritten_memory_as_input():
    """The inputs gate records, between the model's forward and its backward, the data
    torch functions are handed; DPO's reference pass runs there (outside the model's call),
    and its fused LM head slices a `torch.empty` buffer and writes tiles into it with
    `out=`. Those were recorded (`__getitem__ arg[0]`, `mm['out']`) with whatever the
    allocator left in them, and two baseline runs disagreed; none is an input now."""
    from memledger.verify.runs import Variant, capture_in_process

    res = capture_in_process(HERE / SCRIPT, ["--trainer", "dpo", "--steps", "3"],
                             Variant("baseline"), steps=1)
    assert res.code == 0, res.reason
    labels = [label for label, _ in res.data["steps"][0]["inputs"]]
    assert "forward kwarg['input_ids']" in labels
    assert not [x for x in labels if "['out']" in x], labels


@pytest.mark.parametrize("argv", [["--trainer", "dpo", "--lora"], ["--trainer", "reward"],
                                  ["--trainer", "grpo"]])
def test_the_doctor_finds_nothing_wrong_with_trls_loops(argv):
    """No finding: DPO's reference pass with the LoRA adapter disabled (peft's
    `disable_adapter()`, the same weights, no gradients) is no unused graph nor a frozen
    parameter's update; the reward model's chosen and rejected rows share one forward.
    GRPO steps that scored both completions of each prompt alike have advantages of
    zero: every gradient zero as backward computed it, then clipped in place by the
    Trainer; that read as "the gradients of 21 parameters were cleared between backward and
    optimizer.step()" (Note [Zero as backward left it] in memledger/trace/doctor_probe.py)."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / SCRIPT, [*argv, "--steps", "4"], 3)
    assert outcome.code == 0, outcome.reason
    assert [f.line() for f in report.findings] == []


def test_dpo_with_precomputed_reference_log_probs():
    """`precompute_ref_log_probs=True`: TRL runs the reference model (the policy's class)
    over the data set before training, under no_grad, so it was the model until the first
    step; renamed then by TRL's own name for it, `model`, a child of the policy, and
    predict refused `checkpoint:model.layers.*` as selecting "modules of 'model', which
    the script calls beside the model" while measure ran it (Note [Root names],
    memledger/trace/roots.py). Named `LlamaForCausalLM#2` now; predicted as measured."""
    blocks = "model.layers.*"
    run = run_client(SCRIPT, ["--trainer", "dpo", "--precompute", "--no-grad-ckpt",
                              "--steps", "3"], [f"checkpoint:{blocks}"])
    assert [r["mod"] for r in run.ledger.extra["root"]] == ["LlamaForCausalLM",
                                                            "LlamaForCausalLM#2"]
    _exact(run)
    assert run.policies[f"checkpoint:{blocks}"].predicted is not None
