"""Note [A parameter's storage swapped inside step()] (trace/collector.py): an optimizer that
gives each parameter a new storage and a new `.grad` inside its step, as galore-torch's
GaLoreAdamW8bit does (tests/clients/test_galore_clients.py, with galore-torch installed)."""

from __future__ import annotations

import torch
import torch.nn as nn

import memledger


class _SwapSGD(torch.optim.Optimizer):
    """SGD written as GaLoreAdamW8bit's step is: a copy of the data kept on the parameter,
    a new `.grad` (GaLore's projected gradient), the data pointed at the updated copy,
    then weight decay."""

    def __init__(self, params, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.saved_data = p.data.clone()
                p.grad = p.grad * 0.5
                p.data = p.saved_data.add_(p.grad, alpha=-group["lr"])
                p.data.add_(p.data, alpha=-group["lr"] * 1e-2)   # decoupled weight decay


def test_a_parameter_given_a_new_storage_in_step_stays_a_parameter():
    """Read at the step's start only, the last step's new storages were `gradient ·
    weight.saved_data` (Note [A parameter's gradients, as they are set] takes a tensor of
    the parameter's shape set on it for a gradient) and `temporary`: `resident` said 0 B
    of parameters, the parameters' 16,640 B as gradients and the gradients' as
    temporaries; 16,640 B of parameters and of gradients now."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 64)
    opt = _SwapSGD(lin.parameters())
    x = torch.randn(8, 64)
    with memledger.trace() as led:
        for _ in range(2):
            opt.zero_grad()
            lin(x).square().mean().backward()
            opt.step()
    res = led.summary().resident
    assert res["parameter"] == res["gradient"] == 4 * (64 * 64 + 64) == 16_640
    st = led.storages
    live = st[(st["category"] == "parameter") & (st["freed"] >= int(st["freed"].max()))]
    assert sorted(live["name"].astype(str)) == ["bias", "weight"]
