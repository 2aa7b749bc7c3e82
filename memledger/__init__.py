"""memledger: where the memory of a PyTorch training step goes, and what to do about it."""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

import memledger.trace as _trace_package  # noqa: F401  (before `trace` below; see there)

if TYPE_CHECKING:
    from memledger.ledger.model import Ledger


def trace(path=None, measure: bool = False, max_steps: int | None = None,
          fake: bool = False, device: str | None = None, steps_by: str = "optimizer"):
    """Record a ledger of a block of code: `with memledger.trace() as ledger: ...`; after
    the block `ledger` acts as the `Ledger` (`ledger.summary()`, `ledger.peak()`, ...).

    path: stream the ledger to this file (renamed into place when the block ends).
    measure: add the allocator's peak (CPU: runs the profiler alongside, slow).
    max_steps: leave the block after that many training steps.
    fake, device: run the block above FakeTensorMode for a target device (cpu, cuda).
    steps_by: what ends a step: "optimizer", "forward" or "whole" (as `--steps-by`).

    Details: `memledger.trace.api.trace`, imported lazily so reading ledgers needs no torch.
    The subpackage `memledger.trace` was imported above, so this function, not the
    subpackage, is what `memledger.trace` names (submodules resolve through sys.modules).
    """
    from memledger.trace.api import trace as _trace

    return _trace(path, measure=measure, max_steps=max_steps, fake=fake, device=device,
                  steps_by=steps_by)


def load(path) -> "Ledger":
    """Read a ledger file (no torch needed)."""
    from memledger.ledger.model import Ledger

    return Ledger.load(path)


def __getattr__(name: str) -> Any:
    # `memledger.Ledger` on first use: importing the package (the CLI, the pytest plugin)
    # must not pay for pandas and numpy until a ledger is read (tests/unit/test_imports.py).
    if name == "Ledger":
        from memledger.ledger.model import Ledger

        return Ledger
    raise AttributeError(f"module 'memledger' has no attribute {name!r}")


__all__ = ["Ledger", "load", "trace", "__version__"]
