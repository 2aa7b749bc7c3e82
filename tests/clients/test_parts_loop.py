"""A model the script never calls, only its parts, from its own loop (tests/clients/
train_parts_loop.py): plain torch, pinning Note [A model held by the script]
(memledger/trace/roots.py).

Measured (`tests/clients/harness.py run_client`, the helper fix50a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; 2 steps, batch 4, 8 tokens, width 16,
two blocks; no kernel scratch in `loop` or `parts`). "Before" is main at 7b0f0f2e.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, run_client

pytestmark = pytest.mark.clients

_BLOCKS = {f"blocks.{i}.{m}.{p}" for i in (0, 1) for m in ("fc1", "fc2", "norm")
           for p in ("weight", "bias")}


def _parameter_names(led) -> set[str]:
    st = led.storages
    return set(st[st["category"] == "parameter"]["name"])


def _regions(led, text: str) -> list[str]:
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    return predict(led, [parse_policy(text)], bandwidth=1e9).policies[0].regions


def test_blocks_called_in_the_scripts_loop_are_the_models():
    """`for b in model["blocks"]: h = b(h)`, `model` an nn.ModuleDict never called. Before:
    block 0 was the model (`fc1.weight`), block 1 named by the loop variable
    (`b.fc1.weight`), the head `model.head`; `checkpoint:blocks.*` refused by both sides
    ("matches no module; the modules the traced forward called are fc1 (Linear), fc2
    (Linear), norm (LayerNorm) (... not on b, model.head)"), and `checkpoint:*` covered
    block 0 alone (80,008 B, both sides)."""
    pols = {"checkpoint:blocks.*": 62_092, "checkpoint:blocks.1": 67_532}
    run = run_client("train_parts_loop.py", ["--case", "loop"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 65_096
    assert _parameter_names(run.ledger) == _BLOCKS | {"head.weight", "head.bias"}
    assert "root" not in run.ledger.extra   # nothing named beside the model
    assert set(run.ledger.scopes["mod"]) >= {"blocks.0", "blocks.1", "head"}
    for text, peak in pols.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), (text, p)
    assert _regions(run.ledger, "checkpoint:blocks.*") == ["blocks.0", "blocks.1"]


def test_the_research_shape_names_its_parts_under_the_model():
    """`x = model.embed(ids); for blk in model.blocks: x = blk(x); logits = model.head(x)`,
    in a function whose local binds the model. Before: the Embedding was the model
    (`weight`), the blocks `blk` and `Block`, the head `model.head`; `checkpoint:blocks.*`
    refused by both ("the model, an Embedding, has no submodules"), `checkpoint:*` refused
    by both in other words (predict: `model` never called as a module; measure: it selects
    modules of `blk`, called beside the model)."""
    pols = {"checkpoint:blocks.*": 77_288, "offload:blocks.*+checkpoint:head": 68_136}
    run = run_client("train_parts_loop.py", ["--case", "parts", "--in-function"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 88_168
    assert _parameter_names(run.ledger) == _BLOCKS | {"embed.weight", "head.weight",
                                                      "head.bias"}
    assert "root" not in run.ledger.extra
    for text, peak in pols.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), (text, p)


def test_an_ema_wrapper_of_the_held_model_is_named_beside_it():
    """ema-pytorch's shape (the model and a frozen copy) bound as `ema`, its copy run by its
    parts after each step: the wrapper holds block 0 too, but is a copy's wrapper, so the
    ModuleDict is the model; the copy's blocks read `ema.ema_model.blocks.0` (before:
    `b`, `Block`, `Block#2`, the model's own blocks `fc1` and `b`)."""
    led = ledger_pass("train_parts_loop.py", ["--case", "loop", "--ema"])
    names = _parameter_names(led)
    assert names == _BLOCKS | {"head.weight", "head.bias"} | {
        f"ema.ema_model.{n}" for n in _BLOCKS | {"head.weight", "head.bias"}}


def test_two_models_held_apart_stay_apart():
    """A GAN's `G` and `D` held separately and a loss module held by none: unchanged, the
    generator the model, the discriminator `D`, the loss `bce` (Note [Root names])."""
    led = ledger_pass("train_parts_loop.py", ["--case", "gan"])
    assert _parameter_names(led) == {"0.weight", "0.bias", "2.weight", "2.bias",
                                     "D.0.weight", "D.0.bias", "D.2.weight", "D.2.bias"}
    assert [r["mod"] for r in led.extra["root"]] == ["D", "bce"]
