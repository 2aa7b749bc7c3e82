"""Deliberately broken "policies", for tests only: each must be caught by a gate.

Never a user policy kind (`memledger compare --policy` cannot name them). Tests pass them to
`memledger.verify.runs.capture_run(..., broken=("detach_output", "layers.0"))`, and they land
on the model exactly as a real policy does: `install_policy` finds the model at its first
forward, the selector resolves against `named_modules()` with the same globs, and each
selected module's `forward` is shadowed by an instance attribute.

| name                | what it does to a selected module              | gate that must catch it |
|---------------------|------------------------------------------------|-------------------------|
| checkpoint_no_rng   | checkpoint with `preserve_rng_state=False`:    | gradients               |
|                     | recomputed dropout draws different masks       |                         |
| detach_output       | returns `output.detach()`: every parameter     | update (grad is None)   |
|                     | before the cut loses its gradient              |                         |
| perturb_saved       | saved activations ×(1 + 1e-3) at pack          | gradients               |
| checkpoint_plain    | torch's checkpoint and nothing else: a         | update (buffers)        |
|                     | BatchNorm inside updates its running stats     |                         |
|                     | again during the recompute                     |                         |
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from memledger.errors import PolicyError
from memledger.measure.apply import module_table
from memledger.replay.policies import parse_policy, resolve
from memledger.trace.roots import named_modules
from memledger.trace.wrapped import storage_ptrs

PERTURBATION = 1e-3   # relative: saved × (1 + 1e-3)


def _checkpoint_no_rng(orig: Callable, model: nn.Module) -> Callable:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(orig, *args, use_reentrant=False, preserve_rng_state=False, **kwargs)
    return forward


def _checkpoint_plain(orig: Callable, model: nn.Module) -> Callable:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(orig, *args, use_reentrant=False, preserve_rng_state=True, **kwargs)
    return forward


def _detach_output(orig: Callable, model: nn.Module) -> Callable:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return orig(*args, **kwargs).detach()
    return forward


def _perturb_saved(orig: Callable, model: nn.Module) -> Callable:
    # a wrapper's parameter (an 8-bit or NF4 weight) has no pointer of its own: its inner
    # tensors' (`storage_ptrs`)
    keep = {ptr for p in model.parameters() for ptr in storage_ptrs(p)}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point() or any(ptr in keep for ptr in storage_ptrs(t)):
            return t
        return t * (1 + PERTURBATION)

    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return orig(*args, **kwargs)
    return forward


CANDIDATES: dict[str, Callable[[Callable, nn.Module], Callable]] = {
    "checkpoint_no_rng": _checkpoint_no_rng,
    "detach_output": _detach_output,
    "perturb_saved": _perturb_saved,
    "checkpoint_plain": _checkpoint_plain,
}


def apply_broken(model: nn.Module, name: str, selector: str) -> list[str]:
    """Wrap the forward of each module `selector` picks with candidate `name`; return paths."""
    if name not in CANDIDATES:
        raise PolicyError(f"no broken candidate {name!r}; known: {', '.join(CANDIDATES)}")
    regions = resolve(parse_policy(f"checkpoint:{selector}"), module_table(model))
    named = dict(named_modules(model))
    for r in regions:
        mod = named[r.path]
        mod.forward = functools.wraps(mod.forward)(CANDIDATES[name](mod.forward, model))
    return [r.path for r in regions]
