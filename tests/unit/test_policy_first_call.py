"""Note [The call that found the model] (memledger/measure/apply.py): a model the script
calls through a method is found at its first submodule's call; when that submodule is a
region, its first call gets the policy too."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from memledger.measure.apply import install_policy
from memledger.replay.policies import parse_policy


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8), nn.GELU())
        self.head = nn.Linear(8, 1)

    def loss(self, x, y, by_keyword=False):
        h = self.enc(input=x) if by_keyword else self.enc(x)
        return F.mse_loss(self.head(h), y)


@pytest.mark.parametrize("policy", ["checkpoint:enc", "selective:enc", "offload:enc"])
@pytest.mark.parametrize("by_keyword", [False, True])
def test_the_first_call_of_a_region_found_at_its_own_call(policy, by_keyword):
    # GIVEN the policy installed before the model exists, the model called by a method
    torch.manual_seed(0)
    installer = install_policy(parse_policy(policy))
    try:
        model = Model()
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        seen = []
        for _ in range(2):
            packs = [0]

            def pack(t):
                packs[0] += 1
                return t
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = model.loss(x, y, by_keyword)
            loss.backward()
            seen.append(packs[0])
    finally:
        installer.remove()
    # THEN the region's saves never reach the outer hooks, in the first call as in the
    # second (the first call's `enc` sent its Linear and GELU saves there)
    assert seen[0] == seen[1], seen
    assert installer.applied is None or installer._first is None


def test_a_policy_that_fits_no_model_yet_keeps_no_frame_alive():
    """botorch: the GP is found as the model while it is fitted, before the acquisition
    function that holds it (and that the policy fits) is called. The refusal kept for that
    first model held its traceback, whose frames held the fit's frames and their tensors
    after they returned: every policy measured 2,456 B over its prediction at the next
    peak (tests/clients/train_botorch.py --mode acqf)."""
    import gc
    import weakref

    gp, head = nn.Linear(8, 8), nn.Linear(8, 1)
    installer = install_policy(parse_policy("offload:1"))
    try:
        def fit() -> weakref.ref:
            x = torch.ones(1024, 8)   # 32 KiB, a local of the fit's frame
            gp(x)                     # the first model found: 'offload:1' fits it not
            return weakref.ref(x)

        gc.disable()   # freed by reference counts alone, as in the script
        try:
            gone = fit()
            assert gone() is None
        finally:
            gc.enable()
        nn.Sequential(gp, head)(torch.ones(2, 8)).sum().backward()   # the model now
        assert installer.error is None and installer.applied is not None
    finally:
        installer.remove()


class _ByHand(nn.Module):
    """mambapy's MambaBlock: `dt_proj`'s weight and bias are used by hand, the module is
    never called."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.dt_proj = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.inp(x) @ self.dt_proj.weight.t() + self.dt_proj.bias


def test_a_region_used_by_hand_in_a_model_gone_at_the_end_is_refused_for_that():
    """Note [Parameters used while the model lived] (measure/apply.py): the model local to
    the script's `main()` was gone when the policy came off, its parameters' weak
    references dead, and measure refused `checkpoint:dt_proj` as "never ran in the steps
    (the script's input never reaches them ...)"; predict says the module runs through
    another method, and measure now says the same."""
    def main() -> None:
        model = _ByHand()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    installer = install_policy(parse_policy("checkpoint:dt_proj"))
    try:
        main()
    finally:
        installer.remove()
    assert "never called as a module: the code runs its work through another of its " \
        "methods" in str(installer.error), installer.error
