"""`@pytest.mark.memledger(...)` arguments -> a Budget (pure: no pytest, no torch).

    @pytest.mark.memledger(peak="800 MiB", activation="300 MiB")
    @pytest.mark.memledger("800MiB", phases={"backward": "700MiB"}, measure=True)
"""

from __future__ import annotations

from typing import Any

from memledger.budget.config import build_budget
from memledger.budget.model import Budget
from memledger.errors import BudgetError
from memledger.ledger.schema import CATEGORIES

MARKER_KEYS = ("peak", "measure", "phases", "step_time")
WHERE = "@pytest.mark.memledger"


def budget_from_marker(args: tuple, kwargs: dict[str, Any]) -> tuple[Budget, bool]:
    """(budget, measure). `measure=True` also runs the CPU profiler for the allocator peak
    (slower); by default the ledger peak is checked."""
    kw = dict(kwargs)
    if len(args) > 1 or (args and "peak" in kw):
        raise BudgetError(f"{WHERE} takes one positional argument, the peak "
                          "(e.g. \"800MiB\"); name the others (activation=\"300MiB\")")
    if args:
        kw["peak"] = args[0]
    unknown = [k for k in kw if k not in MARKER_KEYS and k not in CATEGORIES]
    if unknown:
        raise BudgetError(f"{WHERE}: unknown argument {unknown[0]!r}; use peak, measure, "
                          f"phases, step_time or a category ({', '.join(CATEGORIES)})")
    measure = kw.pop("measure", False)
    if not isinstance(measure, bool):
        raise BudgetError(f"{WHERE}: measure must be True or False, not {measure!r}")
    data: dict[str, Any] = {k: kw.pop(k) for k in ("peak", "phases", "step_time") if k in kw}
    data["categories"] = kw
    budget = build_budget(data, WHERE)
    if not budget.has_limits:
        raise BudgetError(f"{WHERE} has no limit; write e.g. "
                          "@pytest.mark.memledger(peak=\"800MiB\")")
    return budget, measure
