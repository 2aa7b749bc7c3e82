"""The names of top-level modules, one rule for every pass that names modules.

The model (the first top-level module with parameters, while no earlier top-level module
is alive) has no prefix: its modules are named as its `named_modules()` names them. Every
other top-level module (a GAN's discriminator, a loss module called on its own) is named by
its class: `Sequential.0`. The collector (ledger pass) and ModuleTimer (allocator pass)
must agree, since untraced module times are matched to the ledger's calls by path: when
the timer named every top-level module from its own root, a GAN's generator and
discriminator both had a module `0`.
"""

from __future__ import annotations

import weakref

import torch


class RootNames:
    """Prefixes of the top-level modules seen so far, in the order they were first called."""

    def __init__(self) -> None:
        self._roots: list[weakref.ref] = []

    def register(self, root: torch.nn.Module) -> str:
        """The prefix of a top-level module called for the first time ("": the model)."""
        has_params = next(root.parameters(), None) is not None
        prefix = "" if has_params and not self.alive() else type(root).__name__
        self._roots.append(weakref.ref(root))
        return prefix

    def alive(self) -> list[torch.nn.Module]:
        return [m for r in self._roots if (m := r()) is not None]


def paths_under(root: torch.nn.Module, prefix: str) -> dict[int, str]:
    """id(module) -> path for `root` and its submodules, under `prefix`."""
    return {id(m): ".".join(p for p in (prefix, name) if p) for name, m in root.named_modules()}
