"""The ledger: data model, file format and queries. Never imports torch.

The names below resolve on first use, so that importing a light submodule (`schema`,
`writer`: the tracer's side) does not pay for pandas, which only the reader needs.
"""

from __future__ import annotations

from typing import Any

from memledger.ledger.schema import CATEGORIES, PHASES, SCHEMA, Category, Phase


def __getattr__(name: str) -> Any:
    if name in ("Ledger", "PeakPoint"):
        from memledger.ledger import model

        return getattr(model, name)
    raise AttributeError(f"module 'memledger.ledger' has no attribute {name!r}")


__all__ = ["Ledger", "PeakPoint", "Category", "Phase", "CATEGORIES", "PHASES", "SCHEMA"]
