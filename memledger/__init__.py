"""memledger: where the memory of a PyTorch training step goes, and what to do about it."""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

import memledger.trace as _trace_package  # noqa: F401  (before `trace` below; see there)

if TYPE_CHECKING:
    from memledger.ledger.model import Ledger


def trace(*args, **kwargs):
    """Record a ledger of a block of code: `with memledger.trace() as ledger: ...`.

    See `memledger.trace.api.trace`; imported lazily so reading ledgers needs no torch.
    The subpackage `memledger.trace` was imported above, so this function, not the
    subpackage, is what `memledger.trace` names (submodules resolve through sys.modules).
    """
    from memledger.trace.api import trace as _trace

    return _trace(*args, **kwargs)


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
