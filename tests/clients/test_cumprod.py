"""`cumprod`'s and `prod`'s backward under the tracer, pinned in plain torch
(tests/clients/train_cumprod.py): Note [A derivative formula that branches on the mode]
(memledger/trace/untraced_formulas.py).

Measured (`tests/clients/harness.py run_client`, the helper cumprod46, 2026-12-06, torch
2.13.0 CPU; 2 steps, Adam, `--length 64 --dim 8 --batch 16`, the complex one `--length 32
--dim 8`). Before: the collector without the re-stated formulas (`_FORMULAS` empty).
ledger / allocator, then `offload:body` and `checkpoint:body` predicted / measured:

    case        before                                          after
    cumprod     129,304 / 91,800; 129,304 / 91,800; 134,360 / 96,856    all exact
    complex      61,336 / 47,512;  61,336 / 47,512;  66,392 / 52,568    all exact
    prod dim    159,384 / 106,136; 159,384 / 106,136; 164,440 / 111,192 all exact
    prod all    155,304 / 89,768; 155,304 / 89,768; 160,360 / 94,824    all exact
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients

_SIZE = ["--length", "64", "--dim", "8", "--batch", "16"]


@pytest.mark.parametrize("argv, peak, checkpoint", [
    (_SIZE, 91_800, 96_856),
    (["--complex", "--length", "32", "--dim", "8"], 47_512, 52_568),
    (["--prod", "dim", *_SIZE], 106_136, 111_192),
    (["--prod", "all", *_SIZE], 89_768, 94_824),
], ids=["cumprod", "complex", "prod-dim", "prod-all"])
def test_a_formula_that_branches_on_the_mode_is_priced_as_untraced(argv, peak, checkpoint):
    """Traced, `cumprod`'s and `prod`'s backward took torch's composite-compliant paths
    (every tensor is "subclass-like" under a dispatch mode: ~20 temporaries for cumprod,
    `prod_safe_zeros_backward`'s two cumprods, cats and flips for prod), which the
    untraced run never has, and the ledger's peak, in that backward, read 37,504 B
    (cumprod), 13,824 B (complex), 53,248 B (prod over a dim), 65,536 B (prod of all)
    over the allocator. The ledger pass routes each call to a Function whose backward is
    the untraced formula (`reversed_cumsum(output.conj() * grad).div(input.conj())`;
    `grad * (result / input).conj()`): ledger = allocator, each policy predicted =
    measured."""
    run = run_client("train_cumprod.py", argv, ["offload:body", "checkpoint:body"])
    assert run.ledger_peak == run.allocator_peak == peak
    for name, want in (("offload:body", peak), ("checkpoint:body", checkpoint)):
        p = run.policies[name]
        assert (p.predicted, p.measured) == (want, want), name
