"""torchsde (tests/clients/train_torchsde.py): a neural SDE whose drift `drift.blocks.*` the
solver calls at every step, Brownian motion drawn from generators of its own.

Measured once (`memledger compare ... --steps 2 -- --mode kept`, the lead, 2026-12-05):
`checkpoint:drift.blocks.*`, `selective:drift.blocks.*`, `offload:drift.blocks.*` and
`checkpoint:drift` predicted exactly (302.8 / 360.8 / 115.1 / 146.8 KiB), gradients bitwise.
"""

import pytest

from tests.clients.harness import HERE, imported_first, ledger_pass, predicted_peak, skip_without

pytestmark = pytest.mark.clients
skip_without("torchsde")
_imported = imported_first("torchsde")


def test_a_latent_sde_is_named_as_the_script_wrote_it_not_by_torchsdes_wrappers():
    """`sdeint(sde, ..., logqp=True, names=...)` calls the user's `f` through torchsde's
    per-call `SDELogqp(RenameMethodsSDE(sde))`. The model was the outer wrapper: every
    module read `_base_sde._base_sde.drift.blocks.0.lin` and the policy the user writes,
    `checkpoint:drift.blocks.*`, matched no module (Note [A library's wrapper around the
    model], memledger/trace/roots.py)."""
    led = ledger_pass("train_torchsde.py", ["--mode", "logqp"], steps=2)
    mods = set(led.storages["module"])
    assert {"drift.blocks.0.lin", "drift.blocks.2.act", "sigma.0", "prior"} <= mods
    assert not any("_base_sde" in m for m in mods)
    base = led.peak().bytes
    assert predicted_peak(led, "checkpoint:drift.blocks.*") not in (None, base)


def test_doctor_names_torchsdes_shape_check_and_its_brownian_cache_cycle():
    """torchsde's `check_contract` calls `f` and `g` under gradients once per solve and drops
    the results: the finding now names that caller (Note [A library's call no backward
    used]). The BrownianInterval's cycle runs through `__slots__` attributes and a dict
    keyed by the intervals: those hops read '' and `[<_Interval object at 0x7f...>]`."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_torchsde.py", ["--mode", "euler"], 3)
    assert outcome.code == 0, outcome.reason
    unused = [f for f in report.findings if f.check == "unused_graph"]
    assert sorted(f.evidence["cls"] for f in unused) == ["Drift", "Sequential"]
    for f in unused:
        assert f.evidence["via"].startswith("torchsde/_core/sdeint.py:")
        assert f.evidence["via"].endswith("(check_contract)")
        assert "called by torchsde/_core/sdeint.py:" in f.message
    # which collection finds which garbage follows Python's gc schedule; the hops do not
    cycles = [f.evidence["cycle"] for f in report.findings if f.check == "cyclic_garbage"]
    assert any("BrownianInterval → ._" in c for c in cycles), cycles
    assert not any(" at 0x" in c or "→  →" in c for c in cycles), cycles


class Key:
    __slots__ = ("parent",)


class Top:
    __slots__ = ("cache", "w")


def test_a_cycle_through_slots_and_dict_keys_is_labelled():
    """The hops torchsde's cache cycle takes, built by hand: a `__slots__` attribute, a
    dict holding the next object as a key, a dict keyed by an object (on the old code: ''
    for the first two, and `[<...Key object at 0x7f...>]`)."""
    from memledger.trace.doctor_garbage import _label

    top, key = Top(), Key()
    key.parent = top
    top.cache = {key: (1,)}
    path = [top, top.cache, key, top, top.cache, top.cache[key]]
    assert _label({id(o): o for o in path}, [id(o) for o in path]) == \
        "Top → .cache → (a key) Key → .parent Top → .cache → [Key] tuple"
