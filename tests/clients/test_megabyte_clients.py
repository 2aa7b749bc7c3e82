"""MEGABYTE-pytorch (tests/clients/train_megabyte.py): a two-stage `MEGABYTE` as its README
builds it (`dim=(64, 32)`, `depth=(2, 2)`, `max_seq_len=(16, 4)`, `flash_attn=False`), a
global transformer over patches and a local one over each patch's bytes, `return_loss=True`
on random bytes, plain Adam.

Measured (`tests/clients/harness.py run_client`, steps 1, the helper hunt45f, 2026-12-06,
torch 2.13.0 CPU, MEGABYTE-pytorch 0.3.6): `--batch 8 --depth 1 1 --dropout 0.1 --rel-pos`
(the test's) reads the ledger 5,458,978 B + 524,280 B of kernel scratch = allocator
5,983,258 B, `checkpoint:transformers.0+selective:transformers.1.layers.*.0+offload:
transformers.1.layers.*.1` 3,818,944 B both sides. `--batch 8 --dropout 0.1 --rel-pos` reads the
ledger 8,330,124 B + 524,280 B of kernel scratch = allocator 8,854,404 B;
`checkpoint:transformers.*` (the two stages) 5,253,614 B, `selective:transformers.*.layers.*.*`
(each attention and feed-forward) 6,336,016 B, `checkpoint:transformers.0.layers.*.*+
offload:transformers.1.layers.*.*` 3,704,144 B, predicted and measured; the layers
themselves (`transformers.*.layers.*`, ModuleLists of [attention, feed-forward] that the
Transformer unpacks) refused by both in the same words. `--batch 16` (no dropout):
13,817,004 B + 1,048,568 B = 14,865,572 B, `offload:transformers.*.layers.*.*` 6,487,600 B,
the plan's `offload:transformers.*+offload:token_embs.*+offload:
to_next_transformer_projections.0` 5,604,720 B, both sides. `plan` finds the blocks
`transformers.0`, `transformers.1` and, beside them, `token_embs.*` (one unit: both embed
the same ids) and `to_next_transformer_projections.*`. With `--validate` (under no_grad)
and `--generate` (MEGABYTE's `generate`, which runs under gradients) all still agree.
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("MEGABYTE_pytorch") is None:
    pytest.skip("MEGABYTE-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import MEGABYTE_pytorch  # noqa: F401  (beartype, einops: before any pass)


def test_megabyte_stages_and_their_layers_predicted_as_measured():
    """Checkpoint on the global transformer, selective on the local one's attention and
    offload on its feed-forward, in one policy (dropout and rotary on), agree to the byte;
    a policy on the [attention, feed-forward] ModuleLists is refused by both sides alike,
    in words that name the pattern that selects what they hold."""
    mix = ("checkpoint:transformers.0+selective:transformers.1.layers.*.0"
           "+offload:transformers.1.layers.*.1")
    run = run_client("train_megabyte.py", ["--batch", "8", "--depth", "1", "1", "--dropout",
                                           "0.1", "--rel-pos"],
                     [mix, "offload:transformers.*.layers.*"], steps=1)
    assert run.ledger_peak == 5_458_978
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 5_983_258
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        mix: (3_818_944, 3_818_944), "offload:transformers.*.layers.*": (None, None)}
    lists = run.policies["offload:transformers.*.layers.*"]
    assert lists.predict_refusal == lists.measure_refusal
    # Note [A glob of containers]: the pattern one level down, which selects every layer's
    # attention and feed-forward, where it named one block's modules alone
    assert lists.predict_refusal == (
        "memledger: selector 'transformers.*.layers.*' matches transformers.0.layers.0, "
        "transformers.1.layers.0, a ModuleList: a container with no forward of its own (the "
        "script calls its submodules one by one), so a policy on it would do nothing; select "
        "the modules it holds that run instead: transformers.0.layers.0.0, "
        "transformers.0.layers.0.1 (`transformers.*.layers.*.*` selects what each of them "
        "holds)")


def test_the_doctor_names_the_model_whose_generate_ran_under_gradients():
    """MEGABYTE's `generate` (no `no_grad` of its own) runs `self.forward(seq)` per sampled
    byte, so the model's own call never happens and each submodule's call is top-level.
    The doctor said "modules no variable of the script names (`Identity` x4, ...) ran 28
    forwards under gradients" on the script's `model.generate(prime)` line; they are
    `model`'s, and it says so now (Note [Calls inside a model the script names],
    trace/doctor_unused.py). The four `Identity` calls saved nothing for backward and are
    not counted since the fifty-second session (Note [A graph that saved nothing]): 24."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(
        HERE / "train_megabyte.py", ["--depth", "1", "1", "--generate", "60"], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity, f.evidence["calls"], f.evidence["steps"]) == \
        ("unused_graph", "warning", 24, [2])
    assert f.evidence["owner"] == "model" and f.evidence["var"] == ""
    assert f.message.startswith(
        "modules of `model` called without `model`'s own call around them (`Sequential` x8, "
        "`Transformer` x8, `Embedding` x4, `Linear` x4) ran 24 forwards "
        "under gradients in step 2 whose graph no backward used")
