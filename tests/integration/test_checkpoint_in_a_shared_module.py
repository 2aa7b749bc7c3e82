"""Note [A checkpoint met in a call, not under its path] (memledger/replay/
script_checkpoint.py): a policy region that calls a module it does not hold by name (a
module shared by two layers, `named_modules()` naming it once, elsewhere), whose forward
checkpoints something itself, nests the two checkpoints; the replay refuses it as
`measure` does, by the events of the region's calls rather than by the paths."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import memledger
from memledger.errors import PolicyError


def _contract(h):
    return torch.tanh(h) * h


class _Shared(nn.Module):
    """One weight for both layers; its forward checkpoints a function of no module
    (`fn=True`, as tensorly-torch's FactorizedLinear(checkpointing=True)) or its child's
    call (`fn=False`)."""

    def __init__(self, fn: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.fn = fn

    def forward(self, x):
        if self.fn:
            return checkpoint(_contract, self.fc(x), use_reentrant=False)
        return checkpoint(self.fc, x, use_reentrant=False)


class _Layer(nn.Module):
    """tensorly-torch's SubFactorizedLinear: it calls the shared module, holds it in a
    plain attribute (no child of its by name)."""

    def __init__(self, shared: _Shared) -> None:
        super().__init__()
        self.__dict__["shared"] = shared

    def forward(self, x):
        return self.shared(x) + 1


class _Net(nn.Module):
    def __init__(self, fn: bool) -> None:
        super().__init__()
        self.stack = _Shared(fn)
        self.blocks = nn.Sequential(_Layer(self.stack), nn.GELU(), _Layer(self.stack))

    def forward(self, x):
        return self.blocks(x)


@pytest.mark.parametrize("fn", [True, False])
def test_a_region_that_calls_a_shared_checkpointing_module_is_refused_as_measure_does(fn):
    """`checkpoint:blocks.2` was predicted (the script's checkpoint is `stack`'s, and
    `stack` is no path under `blocks.2`) while measure, which meets the nesting in the
    running calls, refused it; both refuse it now, in one line. A region that calls no
    such module (`blocks.1`) is still predicted."""
    from memledger.measure.apply import apply_policy
    from memledger.replay.engine import replay
    from memledger.replay.policies import parse_policy
    from memledger.replay.prepared import Prepared

    torch.manual_seed(0)
    net = _Net(fn)
    x = torch.randn(4, 8, requires_grad=True)
    with memledger.trace() as led:
        net(x).sum().backward()
    prep = Prepared.from_ledger(led)
    with pytest.raises(PolicyError) as predicted:
        replay(prep, parse_policy("checkpoint:blocks.2"))
    replay(prep, parse_policy("checkpoint:blocks.1"))
    with apply_policy(net, parse_policy("checkpoint:blocks.2")), \
            pytest.raises(PolicyError) as measured:
        net(x)
    assert str(predicted.value) == str(measured.value)
    assert "would checkpoint blocks.2" in str(measured.value)
