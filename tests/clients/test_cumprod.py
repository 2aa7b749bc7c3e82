"""`cumprod`'s and `prod`'s backward under the tracer, pinned in plain torch
(tests/clients/train_cumprod.py): Note [A derivative formula that branches on the mode]
(memledger/trace/untraced_formulas.py).

Measured (`tests/clients/harness.py run_client`, the helpers cumprod46 and cumprod47,
2026-12-06, torch 2.13.0 CPU; 2 steps, Adam, `--length 64 --dim 8 --batch 16`, the complex
one `--length 32 --dim 8`). Before: main without the re-stated formulas (c72a4df; the
same with `_KERNELS` empty). ledger / allocator, then `offload:body` and `checkpoint:body` predicted / measured:

    case        before                                          after
    cumprod     129,304 / 91,800; 129,304 / 91,800; 134,360 / 96,856    all exact
    complex      61,336 / 47,512;  61,336 / 47,512;  66,392 / 52,568    all exact
    prod dim    159,384 / 106,136; 159,384 / 106,136; 164,440 / 111,192 all exact
    prod all    155,304 / 89,768; 155,304 / 89,768; 160,360 / 94,824    all exact
"""

from __future__ import annotations

import warnings

import pytest
import torch

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


@pytest.mark.parametrize("argv", [
    _SIZE, ["--complex", "--length", "32", "--dim", "8"], ["--prod", "dim", *_SIZE],
    ["--prod", "all", *_SIZE]], ids=["cumprod", "complex", "prod-dim", "prod-all"])
def test_a_fake_run_prices_the_formula_as_the_real_one(argv):
    """Note [A fake run's formula]: a fake run's FakeTensors took torch's kernel, the
    composite path: the fake ledger read 37,504 / 13,824 / 53,248 / 65,536 B over the real
    one at the peak and in both policies (and prod-of-all's `nonzero`, an upper bound under
    a fake run, 102,400 B more once routed). Now equal, and no stand-in said for it."""
    from tests.clients.harness import fake_client_gaps, ledger_pass

    assert fake_client_gaps("train_cumprod.py", argv, ["offload:body", "checkpoint:body"]) == {}
    assert not ledger_pass("train_cumprod.py", argv, fake_device="cpu").extra.get("standin")


def test_the_kernels_are_the_passs_alone_and_say_nothing():
    """The kernels route only under a dispatch mode (torch's node elsewhere) and for an
    input without a zero (the untraced formula's own branch, asked unseen), say nothing
    (no "Overriding a previously registered kernel"), leave a kernel someone registered at
    `AutogradCPU` for an op alone (`cumprod` here: that op priced as before; replacing it
    warned, and under a mode torch's table of Python kernels made theirs call ours without
    end), and are gone at the pass's end."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from memledger.trace.untraced_formulas import UntracedFormulas

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torchs = torch.library.get_kernel("aten::cumprod", "AutogradCPU")
    calls = []

    def users(keyset, *args, **kwargs):
        calls.append(args[1])
        return torchs.call_boxed(keyset, *args, **kwargs)

    x = torch.rand(3, 4, requires_grad=True) + 0.5

    def nodes() -> tuple[str, str]:
        with Mode():
            return x.cumprod(1).grad_fn.name(), x.prod(1).grad_fn.name()

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        UntracedFormulas.acquire()
        try:
            traced = nodes()
            untraced = x.cumprod(0).grad_fn.name(), x.prod().grad_fn.name()   # no mode
            # a zero: torch's kernel, the composite path as before (re-running the native
            # node in backward, as cumprod46's Function did, read 8,192 B more)
            with Mode():
                z = x * torch.tensor([0.0, 1.0, 1.0, 1.0])
                zeros = z.cumprod(1).grad_fn.name(), z.prod().grad_fn.name()
        finally:
            UntracedFormulas.release()
    assert [str(w.message) for w in said] == []
    assert traced == ("_CumprodBackward", "_ProdBackward")
    assert zeros == ("CumprodBackward0", "ProdBackward0")
    assert untraced == ("CumprodBackward0", "ProdBackward0")
    assert nodes() == ("CumprodBackward0", "ProdBackward1")   # gone: torch's nodes again
    user = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            user.impl("cumprod", users, "AutogradCPU", with_keyset=True)
        UntracedFormulas.acquire()
        try:
            assert nodes() == ("CumprodBackward0", "_ProdBackward")   # theirs for cumprod
            assert calls == [1]
        finally:
            UntracedFormulas.release()
        x.cumprod(-1)
        assert calls == [1, -1]   # the user's kernel is still theirs
    finally:
        user._destroy()
