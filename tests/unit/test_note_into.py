"""The `into` notes of writes in place outside forward and backward, from the hot loop's own
lookups (Note [The reads of a write in place, from the op's own lookups], trace/
collector.py), and the parameters read in one walk (Note [Every parameter of a model, in
one walk], trace/roots.py)."""

from __future__ import annotations

import sys

import torch
from torch import nn

from memledger.ledger.writer import MemorySink
from memledger.trace import collector as collector_mod
from memledger.trace.collector import Collector
from memledger.trace.roots import module_parameters


def _in_place_outside_forward():
    """GIVEN tensors written in place with no forward (the setup phase, as an optimizer's
    update is outside forward and backward): a plain `add_` of two storages seen before, a
    number (`mul_(0.5)`), an `out=` keyword, and an `out=` the op grows."""
    torch.manual_seed(0)
    old = torch.randn(4, 4)          # 64 B = 16 x 4 (fp32)
    new = torch.randn(4, 4)          # 64 B
    a, b = torch.randn(8), torch.randn(8)   # 32 B each
    c = torch.empty(8)               # 32 B
    grown = torch.empty(0)           # 0 B, then 32 B
    sink = MemorySink()
    with Collector(sink):
        new.add_(old, alpha=0.9)     # old's last read wrote `new`
        new.mul_(0.5)                # the wrapped 0.5 was read beside `new`
        torch.add(a, b, out=c)       # `a`, `b` read, `c` written (a keyword)
        torch.mul(a, b, out=grown)   # `grown` resized inside the op: a new sid
        del old, a, b
    return sink.records


def test_writes_in_place_note_what_they_read_into_the_storage_written():
    recs = _in_place_outside_forward()
    size = {r["sid"]: r["bytes"] for r in recs if r["k"] == "alloc"}
    ends = [r for r in recs if r["k"] in ("free", "live")]
    into = sorted((size[r["sid"]], size[r["into"]]) for r in ends if "into" in r)
    # old (64 B) -> new (64 B); a and b (32 B) -> the grown `out` (its new 32 B
    # storage: the last op that read them); the 0.5 is no tensor of the op's (mul_.Scalar)
    assert into == [(32, 32), (32, 32), (64, 64)]
    by_sid = {r["sid"]: r.get("into") for r in ends}
    grown = [r["sid"] for r in recs if r["k"] == "alloc" and r.get("op") == "resize_"]
    assert len(grown) == 1
    reads = [sid for sid, to in by_sid.items() if to == grown[0]]
    assert sorted(size[s] for s in reads) == [32, 32]


def test_an_add_in_place_of_two_storages_seen_before_looks_neither_up_again(monkeypatch):
    """The hot loop has found both storages' sids: `_note_into` asks for no storage (main
    asked for both, `new` and `old`: 2 lookups)."""
    calls = []
    inside = [False]
    real_key = collector_mod.storage_key
    real_note = Collector._note_into

    def counting_key(t):
        if inside[0]:
            calls.append(tuple(t.shape))
        return real_key(t)

    def note(self, *args, **kwargs):
        inside[0] = True
        try:
            return real_note(self, *args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(collector_mod, "storage_key", counting_key)
    monkeypatch.setattr(Collector, "_note_into", note)
    sink = MemorySink()
    with Collector(sink):
        old, new = torch.zeros(4, 4), torch.ones(4, 4)   # made here: sids of their own
        new.add_(old)
        torch.add(old, new, out=torch.empty(4, 4))   # an `out=` keyword: looked up
    assert calls == [(4, 4)]   # the keyword `out` only, once


class _OwnWalk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def named_modules(self, *args, **kwargs):   # torch's walk follows a class's own
        yield from super().named_modules(*args, **kwargs)


def _models() -> list[nn.Module]:
    shared = nn.Linear(2, 2)
    tied = nn.Sequential(shared, nn.ReLU(), shared, nn.Sequential(nn.Linear(2, 3), shared))
    tied.register_module("gone", None)
    tied.extra = nn.Parameter(torch.zeros(1))
    tied.register_parameter("unset", None)
    emb, head = nn.Embedding(4, 2), nn.Linear(2, 4, bias=False)
    head.weight = emb.weight   # tied weights: one parameter under two modules
    return [shared, tied, nn.ModuleDict({"e": emb, "h": head, "t": tied}),
            nn.Sequential(_OwnWalk(), nn.Linear(1, 1))]


def test_all_parameters_are_torchs_named_parameters_in_their_order():
    from memledger.trace.roots import all_parameters

    for m in _models():
        mine, torchs = all_parameters(m), list(module_parameters(m))
        assert [id(p) for p in mine] == [id(p) for p in torchs]
    assert [tuple(p.shape) for p in all_parameters(_models()[1])] == [
        (1,), (2, 2), (2,), (3, 2), (3,)]


def test_the_gradients_read_at_a_pass_walk_no_named_modules():
    """`_grad_versions` (twice a backward pass) reads the same `.grad`s without torch's
    `named_modules` generators (main walked them: one call per module)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    sink = MemorySink()
    with Collector(sink) as c:
        model(torch.randn(3, 4)).sum().backward()
        code = nn.Module.named_modules.__code__
        seen = []

        def prof(frame, event, arg):
            if event == "call" and frame.f_code is code:
                seen.append(frame.f_code.co_name)

        sys.setprofile(prof)
        try:
            versions = c._grad_versions()
        finally:
            sys.setprofile(None)
    assert seen == []
    assert len(versions) == 4   # two weights, two biases
    assert set(versions) == {id(p) for p in model.parameters()}


def test_a_role_written_before_is_told_without_a_storage_lookup(monkeypatch):
    """Note [A role written before, told at once]: a parameter named once is named again
    by the optimizer's hooks every step; the second naming reads no sid through `_sid`
    (main: one `_sid` per call) and writes nothing."""
    calls = []
    real_sid = Collector._sid

    def counting_sid(self, t, ev):
        calls.append(tuple(t.shape))
        return real_sid(self, t, ev)

    sink = MemorySink()
    with Collector(sink) as c:
        w = nn.Parameter(torch.zeros(3, 2))   # 24 B = 6 x 4 (fp32)
        c._role(w, "parameter", "w")
        monkeypatch.setattr(Collector, "_sid", counting_sid)
        c._role(w, "parameter", "w")
        c._role(w, "parameter")      # asked without a name: the named role stands
        written = [r for r in sink.records if r["k"] == "role"]
        c._role(w, "gradient", "w")  # a role not written yet: the full path
    assert calls == [(3, 2)]
    assert [(r["role"], r.get("name")) for r in written] == [("parameter", "w")]
