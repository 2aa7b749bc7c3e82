"""The Budget: what a training step may use, as data (pydantic, unknown keys refused).

A budget file (TOML) reads the same as the model, e.g. `configs/budget.toml`::

    steps = 2                      # optimizer steps to trace when checking a script
    fake = false                   # true: trace the script above FakeTensorMode (shapes only)
    device = "cuda"                # with fake: the target device (docs/fake.md)
    peak = "42MiB"                 # total peak: the allocator's when measured, else the ledger's
    [categories]                   # bytes of each category live at the peak
    activation = "26MiB"
    [phases]                       # highest live bytes within each phase
    backward = "40MiB"             # the step's passes; backward_outside_step = an evaluation's
    [baseline]                     # relative to a ledger recorded before the change
    ledger = "main.ledger"
    max_increase = "5%"            # or a size: "2MiB"
    [step_time]                    # opt-in, noisy: never exact
    max = "900ms"
    tolerance = "25%"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memledger.budget.sizes import DurationField, FractionField, IncreaseField, SizeField
from memledger.ledger.schema import CATEGORIES, PHASES

# Note [Budget phases: the reported ones and the passes outside the step]
# A `[phases]` key names what the ledger reports as a phase: the seven of schema.py's
# `Phase`, each event under the phase reports give it (Note [A backward pass outside the
# step], ledger/model.py: a backward pass begun in setup or between steps that no optimizer
# step follows is read under the phase it began in, `setup` or `other`), and the one thing
# reports say besides, `backward_outside_step` (`show`'s "a backward pass between steps
# that no optimizer step follows", the summary's `peak.backward_outside_step`): its limit
# reads those passes' events alone, wherever they began, so an evaluation's
# `torch.autograd.grad` can be held to a budget of its own while `backward` is the step's.
# The ledger has no evaluation phase (an evaluation's forward is `forward`, its loss
# `loss`) and no phase per pass (every pass of a step is `backward`); a name outside these
# eight is refused, one line listing them (exit 2).
BACKWARD_OUTSIDE_STEP = "backward_outside_step"
BUDGET_PHASES: tuple[str, ...] = (*PHASES, BACKWARD_OUTSIDE_STEP)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BaselineBudget(_Strict):
    """Growth allowed over a baseline ledger recorded from the same model."""

    ledger: Path | None = Field(None, description="the baseline ledger file (or --baseline)")
    max_increase: IncreaseField = Field(description="'5%' of the baseline peak, or a size")


class StepTimeBudget(_Strict):
    """Opt-in: median traced step time must stay under max × (1 + tolerance)."""

    max: DurationField = Field(description="e.g. '900ms'")
    tolerance: FractionField = Field(0.10, description="slack for noise, e.g. '25%' (default 10%)")


class Budget(_Strict):
    """Every limit is optional; a budget with no limit at all is refused by `load_budget`.

    Example usage::

        Budget(peak="800MiB", categories={"activation": "300MiB"})

    Known limitations: per-phase peaks come from the ledger (tracked tensors only); the
    allocator is measured for the whole run, not per phase.
    """

    steps: int | None = Field(None, ge=1, description="optimizer steps to trace a script for")
    peak: SizeField | None = Field(None, description="total peak")
    categories: dict[str, SizeField] = Field(default_factory=dict,
                                             description="category -> bytes live at the peak")
    phases: dict[str, SizeField] = Field(
        default_factory=dict, description="phase -> highest live bytes in it (a phase of "
        "schema.py's `Phase`, or backward_outside_step: Note [Budget phases: the reported "
        "ones and the passes outside the step])")
    baseline: BaselineBudget | None = None
    step_time: StepTimeBudget | None = None
    fake: bool = Field(False, description="trace the script above FakeTensorMode (docs/fake.md)")
    device: str | None = Field(None, description="with fake: the target device, cpu or cuda")

    @field_validator("categories", mode="before")
    @classmethod
    def _known_categories(cls, v: Any) -> Any:
        return _check_keys(v, CATEGORIES, "category")

    @field_validator("phases", mode="before")
    @classmethod
    def _known_phases(cls, v: Any) -> Any:
        return _check_keys(v, BUDGET_PHASES, "phase")

    @property
    def has_limits(self) -> bool:
        return bool(self.peak or self.categories or self.phases or self.baseline
                    or self.step_time)


def _check_keys(v: Any, known: tuple[str, ...], what: str) -> Any:
    if isinstance(v, dict):
        for k in v:
            if k not in known:
                raise ValueError(f"unknown {what} {k!r}; known: {', '.join(known)}")
    return v
