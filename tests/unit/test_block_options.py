"""plan's per-block options offer save lists of op kinds only (replay/block_options.py)."""

from __future__ import annotations

import pytest

from memledger.replay import block_options as bo
from memledger.replay.policies import PolicyError, is_op_kind, parse_policy


def test_a_saved_wrapped_number_is_no_save_list(monkeypatch):
    # a peft Llama in bf16 autocast saves wrapped numbers (trace/scalars.py): cheapest bytes
    # per second of all, so they ranked first, and plan printed
    # "selective[(wrapped number)] ruled out: save='(wrapped number)' ... op kinds are ..."
    monkeypatch.setattr(bo, "op_ranking", lambda prep, blocks: [
        ("(wrapped number)", 8, 5_000.0), ("mm", 1_000_000, 400_000.0),
        ("silu", 500_000, 50_000.0)])
    labels = [o.label() for o in bo.block_options(None, ["layers.0"])]
    assert labels == ["none", "checkpoint", "offload", "selective", "selective[mm]",
                      "selective[mm,silu]"]
    for o in bo.block_options(None, ["layers.0"]):
        if o.kind != "none":
            parse_policy(o.part("layers.0"))           # every option is a valid policy


def test_op_kinds_and_pseudo_ops():
    assert is_op_kind("mm") and is_op_kind("_scaled_dot_product_flash_attention")
    assert not is_op_kind("(wrapped number)") and not is_op_kind("(script)")
    with pytest.raises(PolicyError, match="op kinds are aten names"):
        parse_policy("selective:layers.0:save=(wrapped number)")


def test_options_refused_for_one_reason_share_a_line():
    """`plan` on a transformers Llama with its KV cache on printed the same 6-line refusal
    for checkpoint and for each of three selective save lists, each naming its own policy
    first; they now share one line (commands/plan.py `ruled_out`)."""
    from memledger.commands.plan import ruled_out

    cache = "would re-run model.layers.0, whose forward stores new tensors into the cache"
    refused = {"checkpoint": f"checkpoint:model.layers.* {cache}",
               "selective": f"selective:model.layers.* {cache}",
               "selective[rsqrt]": f"selective:model.layers.*:save=rsqrt {cache}",
               "offload": "offload: no block saves anything"}
    assert ruled_out(refused) == [
        ("checkpoint, selective, selective[rsqrt]", f"each {cache}"),
        ("offload", "offload: no block saves anything")]
    assert ruled_out({"checkpoint": f"checkpoint:x {cache}"}) == [
        ("checkpoint", f"checkpoint:x {cache}")]
