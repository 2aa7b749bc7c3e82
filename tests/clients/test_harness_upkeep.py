"""Note [Each module looked through once] (tests/clients/harness.py): the harness's look
for transformers' method caches, before every pass, walks the classes of each
`transformers.models.*` module once, when it first finds the module, and clears every
cache it found at each pass."""

from __future__ import annotations

import functools
import sys
import types

import pytest

from tests.clients import harness


def _model_module(name: str) -> tuple[types.ModuleType, object]:
    """A module named like a transformers model module: one class whose method holds an
    `lru_cache` in its closure, as `compile_compatible_method_lru_cache` wraps one."""
    mod = types.ModuleType(name)

    @functools.lru_cache
    def anchors(n: int) -> tuple[int, ...]:
        return tuple(range(n))

    def method(self, n):
        return anchors(n)

    mod.Embeddings = type("Embeddings", (), {"__module__": name, "anchors": method})
    return mod, anchors


@pytest.fixture
def counted_vars(monkeypatch) -> dict[str, int]:
    """How many times the harness read a namespace with `vars`, by the object's name."""
    reads: dict[str, int] = {}

    def counting(obj):
        key = getattr(obj, "__name__", repr(obj))
        reads[key] = reads.get(key, 0) + 1
        return vars(obj)

    monkeypatch.setattr(harness, "vars", counting, raising=False)
    return reads


def test_a_model_module_is_looked_through_once_and_its_cache_cleared_at_every_pass(
        monkeypatch, counted_vars):
    name = "transformers.models.memledger_probe.modeling_memledger_probe"
    mod, anchors = _model_module(name)
    monkeypatch.setitem(sys.modules, name, mod)
    for _ in range(3):   # three passes
        anchors(4)
        assert anchors.cache_info().currsize == 1
        assert anchors in harness._transformers_caches()
        for cache in harness._transformers_caches():   # as _fresh_library_state does
            cache.cache_clear()
        assert anchors.cache_info().currsize == 0
    # the module's namespace and its class's, read by the first look only (before: once
    # per call, six of each here)
    assert (counted_vars.get(name), counted_vars.get("Embeddings")) == (1, 1)


def test_a_module_imported_again_is_looked_through_again(monkeypatch, counted_vars):
    name = "transformers.models.memledger_probe2.modeling_memledger_probe2"
    first, old = _model_module(name)
    monkeypatch.setitem(sys.modules, name, first)
    assert old in harness._transformers_caches()
    again, new = _model_module(name)   # a new module object under the same name
    monkeypatch.setitem(sys.modules, name, again)
    assert new in harness._transformers_caches()
    assert counted_vars.get(name) == 2
