"""Blocks handed their features inside an object, in plain torch
(tests/clients/train_held_in_object.py; Note [Tensors handed inside an object] in
memledger/trace/collector.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt52c, 2026-12-07, torch
2.13.0 CPU; 2 steps, 3 blocks of width 16, batch 64, SGD). Before: the tensor handed in
a dataclass or an object was no argument of the call to the replay, which let it go where
the script did while checkpoint kept it: `checkpoint:1` 125,200 B predicted against
129,296 B measured, `selective:*` 151,384 against 163,672 (`checkpoint:*` 109,776
against 118,616); no storage was `input`. The same blocks handed a dict were exact.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_tensor_handed_inside_a_dataclass_is_the_calls_argument():
    """A dataclass (`Frame(h)`); each block's argument, kept by checkpoint to the block's
    backward, is predicted as measured, and the batch inside the box is `input`: (64, 16)
    fp32 = 4,096 B a step. (`--box object`, an object holding a dict as a `TensorFrame`
    holds its `feat_dict`, reads the same numbers; pytorch-frame's tier pins that shape.)"""
    run = run_client("train_held_in_object.py", ["--box", "dataclass"],
                     ["checkpoint:1", "selective:*"])
    assert run.ledger_peak == run.allocator_peak == 132_120
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:1": (129_296, 129_296), "selective:*": (163_672, 163_672)}
    st = run.ledger.storages
    assert st.loc[st["category"] == "input", "bytes"].tolist() == [64 * 16 * 4] * 2
