"""Comparing against a baseline ledger: same model or refused, and what grew most.

A baseline only means something for the same model: a ledger of another model (a different
parameter set, by name and shape) is refused rather than compared.
"""

from __future__ import annotations

import pandas as pd

from memledger.budget.result import ALL, Growth
from memledger.errors import BudgetError
from memledger.ledger.model import Ledger
from memledger.ledger.names import module_label
from memledger.units import count


def parameter_set(led: Ledger) -> set[tuple[str, str]]:
    """(name, shape) of every named parameter storage."""
    st = led.storages
    p = st[(st["category"] == "parameter") & (st["name"] != "")]
    return set(zip(p["name"], p["shape"]))


def require_same_model(current: Ledger, base: Ledger, base_name: str) -> None:
    """Refuse a baseline whose parameters differ in name or shape, or that traced another
    number of steps (a 1-step baseline's peak holds no optimizer state: a 2-step run read
    as +994 KiB of 'activation' growth where nothing grew)."""
    if current.steps_traced != base.steps_traced and min(current.steps_traced,
                                                          base.steps_traced) < 2:
        raise BudgetError(
            f"baseline {base_name} traced {count(base.steps_traced, 'step')} and this "
            f"ledger {current.steps_traced}: the first step's peak holds no optimizer state, so the "
            "two peaks do not compare; record both with the same --steps (2 or more)")
    mine, theirs = parameter_set(current), parameter_set(base)
    if mine == theirs:
        return
    only_here = sorted(mine - theirs)
    only_there = sorted(theirs - mine)
    ex = []
    if only_here:
        ex.append(f"{len(only_here)} only here (e.g. {only_here[0][0]} {only_here[0][1]})")
    if only_there:
        ex.append(f"{len(only_there)} only in the baseline "
                  f"(e.g. {only_there[0][0]} {only_there[0][1]})")
    raise BudgetError(
        f"baseline {base_name} is from another model: the parameter sets differ "
        f"({'; '.join(ex)}); record the baseline from the same model")


def _at_peak_rows(led: Ledger) -> pd.DataFrame:
    return led.labelled(led.live_at(led.peak().event))


def module_of(row_module: str, saved_module: str) -> str:
    return module_label(row_module or saved_module)


def growth(current: Ledger, base: Ledger, top: int = 5) -> list[Growth]:
    """Largest growths of bytes at the peak, per category and per (category, module),
    categories first (their sum is the growth of the peak), then modules."""
    cur_cat, base_cat = current.at_peak(), base.at_peak()
    cats = [Growth(category=c, module=ALL, delta_bytes=cur_cat[c] - base_cat.get(c, 0))
            for c in cur_cat]
    cats = sorted((g for g in cats if g.delta_bytes > 0), key=lambda g: -g.delta_bytes)

    def by_mod(led: Ledger) -> pd.Series:
        rows = _at_peak_rows(led)
        mods = [module_of(m, s) for m, s in zip(rows["module"], rows["saved_module"])]
        return rows["bytes"].groupby([rows["category"].to_numpy(), mods]).sum()

    d = by_mod(current).sub(by_mod(base), fill_value=0)
    d = d[d > 0].sort_values(ascending=False, kind="stable")
    mods = [Growth(category=str(c), module=str(m), delta_bytes=int(v))
            for (c, m), v in d.head(top).items()]
    return cats[:top] + mods
