"""A shared module's saves, by the place that called it, the model's own forward among
them (Note [A shared module's saves, by the block that called it], ledger/summary.py),
pinned in plain torch (tests/clients/train_shared_proj.py): one `nn.Linear` registered as
`blocks.0.proj` (its first path), `blocks.1.proj` and the model's `proj`, called by each
block and by the model's forward.

Measured (the helper hunt48g, 2026-12-06, torch 2.13.0 CPU, the ledger pass of 1 step,
`--dim 8 --batch 4`): before, `show`'s per-block table read `blocks.0` 544 B and
`blocks.1` 288 B: the model's own call's 128 B input (`2 * x`, 4 x 8 floats) and block 1's
call's 128 B both counted in block 0 (block 1's, its `proj` called at the event its `norm`
returned, read as called by that `norm`). After: `blocks.0` 288 B, `blocks.1` 416 B (its
norm saves its input, block 0's output, 128 B more; block 0's norm input is the batch, an
input) and `proj` 128 B.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.clients.harness import ledger_pass

pytestmark = pytest.mark.clients


def test_the_models_own_call_of_a_shared_module_is_not_the_first_blocks():
    with contextlib.redirect_stderr(io.StringIO()):
        led = ledger_pass("train_shared_proj.py", [], steps=1)
    acts = led.summary().activations
    x = 4 * 8 * 4                          # bytes of one (4, 8) float input = 128
    assert acts.by_module["blocks.0.proj"] == 3 * x       # the one Linear, named once
    assert (acts.by_block["blocks.0"], acts.by_block["blocks.1"]) == (288, 288 + x)
    assert acts.by_block["proj"] == x
