"""The one pydantic base for values memledger reads or writes (summaries, budgets, results):
frozen (a value, never edited in place) and strict about keys (`extra="forbid"`: a typo in
a budget file or a renamed JSON key is an error, not a silently ignored field)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
