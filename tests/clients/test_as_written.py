"""Transformers written as tutorials and course code write them (train_as_written.py):
the mechanisms other people's scripts met in the second round of running them as they are
(docs/accuracy.md, "Other people's training scripts, a second round")."""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_container_is_refused_by_predict_and_measure_alike():
    """Note [Containers] (replay/policies.py): makemore's blocks keep their MLP in an
    nn.ModuleDict called through a closure, ng-video-lecture's its heads in an
    nn.ModuleList. measure wrapped the container's forward, which nothing calls, and read
    the baseline (739,320 B) as the policy's peak; predict refused it, saying the script
    called its `.forward()` directly and to call the container, which raises. Both now
    refuse it in one line, and a glob passes over containers as over modules that never
    ran."""
    pols = ["checkpoint:blocks.0.mlp", "offload:blocks.*.heads", "checkpoint:blocks.*",
            "offload:blocks.1.*"]
    run = run_client("train_as_written.py", ["--case", "container"], pols)
    assert run.ledger_peak == run.allocator_peak == 739_320
    mlp, heads = run.policies["checkpoint:blocks.0.mlp"], run.policies["offload:blocks.*.heads"]
    assert mlp.measured is None and mlp.predict_refusal == mlp.measure_refusal == (
        "memledger: selector 'blocks.0.mlp' matches blocks.0.mlp, a ModuleDict: a container "
        "with no forward of its own (the script calls its submodules one by one), so a "
        "policy on it would do nothing; select the modules it holds that run instead: "
        "blocks.0.mlp.act, blocks.0.mlp.fc, blocks.0.mlp.proj (`blocks.0.mlp.*` selects them "
        "all)")
    assert heads.measured is None and heads.predict_refusal == heads.measure_refusal
    assert "blocks.0.heads, blocks.1.heads, a ModuleList" in heads.predict_refusal
    assert run.policies["checkpoint:blocks.*"].predicted == \
        run.policies["checkpoint:blocks.*"].measured == 586_388
    # blocks.1.heads and blocks.1.mlp are passed over: the block's norms are the regions
    assert run.policies["offload:blocks.1.*"].predicted == \
        run.policies["offload:blocks.1.*"].measured == 733_168


def test_scores_masked_in_place_after_a_batched_matmul():
    """Note [Written in place in forward] (trace/collector.py): LLMs-from-scratch's
    attention, `attn_scores.masked_fill_(...)` on `queries @ keys.transpose(2, 3)`: `bmm`
    then `_unsafe_view`, so the fill never reaches the cached bmm's version counter.
    Before: predict refused both ("changed in place afterwards"), measure read them."""
    peaks = {"selective:blocks.*": 746_304, "selective:blocks.1": 783_488}
    run = run_client("train_as_written.py", ["--case", "masked"], list(peaks))
    assert run.ledger_peak == run.allocator_peak == 837_056
    for policy, peak in peaks.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_an_in_place_relu_on_a_linears_view_is_still_refused():
    """A Linear on a 3-D input returns a view of its `addmm`, which `ReLU(inplace=True)`
    then changes: torch's selective checkpoint sees it (the view shares the counter), so
    predict and measure refuse it in the same line, as before."""
    run = run_client("train_as_written.py", ["--case", "relu"], ["selective:blocks.*"])
    assert run.ledger_peak == run.allocator_peak == 771_520
    sel = run.policies["selective:blocks.*"]
    assert sel.measured is None and sel.predict_refusal == sel.measure_refusal
    assert "changed in place afterwards" in sel.predict_refusal


def test_the_refusal_names_the_kept_op_the_re_run_finds_changed():
    """Note [The kept op a re-run finds changed] (replay/stateful.py): the line said "keeps
    an op's output ... leave that op out of save=" without naming it. Here the scores come
    from `torch.bmm` (its own output, masked in place) and the MLP's `addmm` view is changed
    by an in-place ReLU after it: the re-run meets the `bmm` first, and both sides name it;
    with `save=addmm` both name `addmm`. Taking the last op changed in the call instead
    (the MLP's `addmm`) would have told measure's line apart from predict's."""
    pols = ["selective:blocks.*", "selective:blocks.0:save=addmm"]
    run = run_client("train_as_written.py", ["--case", "filled"], pols)
    assert run.ledger_peak == run.allocator_peak == 771_520
    sel, add = run.policies["selective:blocks.*"], run.policies["selective:blocks.0:save=addmm"]
    assert sel.measured is None and sel.predict_refusal == sel.measure_refusal == (
        "memledger: selective:blocks.* keeps bmm's output in blocks.1 that is changed in place "
        "afterwards (an inplace=True activation, `x += ...`, a mask filled in place, "
        "nn.LSTMCell's kernel), and torch's selective checkpoint cannot hand back a changed "
        "tensor; leave bmm out of save=, make the change out of place, or checkpoint that "
        "module instead")
    assert add.measured is None and add.predict_refusal == add.measure_refusal
    assert "keeps addmm's output in blocks.0" in add.predict_refusal
    assert "leave addmm out of save=" in add.predict_refusal
