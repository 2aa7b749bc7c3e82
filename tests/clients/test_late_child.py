"""A child the model registers after its first call, in plain torch
(tests/clients/train_late_child.py; Note [A module registered after the first call] in
memledger/trace/roots.py, Note [A region registered after the first call] in
memledger/measure/apply.py).

Measured (`tests/clients/harness.py run_client`, the helper gap45, 2026-12-06, torch 2.13.0
CPU; 2 steps, batch 128, width 64, SGD). Before: b908568, where every one of these
selectors read "matches no module" in predict and measure alike, and `offload:blocks.*`
over the cache case measured 317,832 B against 301,704 B predicted.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_head_built_in_the_first_training_forward():
    """The head is built inside the first training step's forward, the optimizer made
    after it. The trace named its calls by the caller and class (`Sequential`, `unowned`)
    and measure resolved the policy at the model's first call, before the head existed:
    `checkpoint:head` "matches no module" on both sides. Now both name it `head`; its first
    call, which torch bound before the pre-hook that put the policy on it, gets the policy
    through the wrapper's halves (without them measure refused, "never called as a
    module"). Its weights, unnamed before (`show` read "" for them), are `head.0.weight`..."""
    run = run_client("train_late_child.py", ["--case", "first"],
                     ["checkpoint:head", "offload:head", "selective:head"])
    assert run.ledger_peak == run.allocator_peak == 275_592
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:head": (280_584, 280_584),
                   "offload:head": (283_784, 283_784),
                   "selective:head": (288_776, 288_776)}
    sc = run.ledger.scopes
    assert set(sc[sc["mod"].str.startswith("head")]["mod"]) == {"head", "head.0", "head.1",
                                                                "head.2"}
    assert not sc["unowned"].any()
    st = run.ledger.storages   # its weights are named as the model's others are
    assert {"head.0.weight", "head.2.bias"} <= set(st.loc[st["category"] == "parameter", "name"])


def test_modules_registered_after_the_first_step():
    """After step 1 the script gives each block a `cache` module (litgpt's `set_kv_cache`
    alike) and adds its parameters to the optimizer. measure no longer refuses
    `checkpoint:blocks.*.cache` at the first step (the selector may match a module the
    model registers later) and puts it on when the caches are first called; and the
    offloader of `offload:blocks.*`, which took the model's parameters to skip when the
    policy went on, wrote the caches' weights out and read them back as copies: 317,832 B
    measured against 301,704 B predicted, now equal. A selector that never matches is
    refused at the end, naming the modules the model has by then."""
    run = run_client("train_late_child.py", ["--case", "cache"],
                     ["checkpoint:blocks.*.cache", "offload:blocks.*", "checkpoint:nothing"])
    assert run.ledger_peak == run.allocator_peak == 439_944
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:blocks.*.cache": (384_520, 384_520),
                   "offload:blocks.*": (301_704, 301_704),
                   "checkpoint:nothing": (None, None)}
    said = run.policies["checkpoint:nothing"].measure_refusal
    assert said.startswith("memledger: selector 'nothing' matches no module; the model's "
                           "modules are blocks.0 (Block), blocks.0.cache (Sequential)")
