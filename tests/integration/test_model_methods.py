"""Note [A model called through its methods] (trace/roots.py): a model whose forward the
script never calls, only methods that call its parts (diffusers' `vae.encode(x)`,
`vae.decode(z)`), is the model, and its parts are named under it."""

from __future__ import annotations

import torch
import torch.nn as nn

import memledger


class _AE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(8, 4), nn.Linear(4, 8)

    def encode(self, x):
        return self.enc(x)

    def decode(self, z):
        return self.dec(z)


class _Sized(nn.Module):
    """Runs a part on a dummy input in its constructor to size its head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(8, 6), nn.ReLU())
        with torch.no_grad():
            n = self.features(torch.zeros(1, 8)).shape[1]
        self.head = nn.Linear(n, 2)

    def forward(self, x):
        return self.head(self.features(x))


def _train(make, loss):
    with memledger.trace() as led:
        m = make()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            loss(m, torch.randn(2, 8)).backward()
            opt.step()
            opt.zero_grad()
    return led


def test_a_model_trained_through_its_methods_is_the_model():
    led = _train(_AE, lambda m, x: (m.decode(m.encode(x)) - x).pow(2).mean())
    assert set(led.scopes["mod"]) == {"enc", "dec"}   # not `Linear`, named beside `enc`
    assert not led.extra.get("root")
    st = led.storages
    assert set(st.loc[st["category"] == "parameter", "name"]) == \
        {"enc.weight", "enc.bias", "dec.weight", "dec.bias"}


def test_a_part_called_in_the_constructor_leaves_the_names_to_the_first_call():
    """Not its constructor: the head, made after the dummy call, read `Linear` when the
    model was named there."""
    led = _train(_Sized, lambda m, x: m(x).sum())
    step2 = led.scopes[led.scopes["step"] == 2]
    assert set(step2["mod"]) == {"", "features", "features.0", "features.1", "head"}
