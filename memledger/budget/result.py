"""What a check found: one `LimitResult` per limit, gathered in a `CheckResult`
(the `memledger.check/1` contract when dumped with `to_json_dict`)."""

from __future__ import annotations

from pydantic import Field

from memledger.units import format_bytes, format_signed_bytes
from memledger.values import Value

CHECK_SCHEMA = "memledger.check/1"
ALL = "(all)"  # Growth.module of a whole-category growth


_Model = Value   # memledger/values.py: the one frozen, key-strict base


class TensorAtPeak(_Model):
    """One storage live at the peak, as a failure message names it."""

    bytes: int
    category: str
    module: str = Field(description="module that made it ('(script)' outside modules)")
    shape: str
    dtype: str
    op: str
    name: str = Field("", description="parameter/gradient/state name when it has one")

    def describe(self, with_category: bool = False) -> str:
        """`blocks.3.mlp.c_fc addmm 512x512 1.0 MiB` (a named storage shows its name)."""
        what = self.name or f"{self.module} {self.op.removeprefix('aten.').split('.')[0]}"
        # shape () reads '' in the ledger; an imported allocator block has no dtype either
        shape = self.shape or ("scalar" if self.dtype else "?")
        s = f"{what} {shape} {format_bytes(self.bytes)}"
        return f"{self.category} {s}" if with_category else s

    def __str__(self) -> str:
        return self.describe()


class Growth(_Model):
    """Bytes at the peak that grew over the baseline, for one category and module."""

    category: str
    module: str
    delta_bytes: int

    def __str__(self) -> str:
        where = self.category if self.module == ALL else f"{self.category} {self.module}"
        return f"{where} {format_signed_bytes(self.delta_bytes)}"


class LimitResult(_Model):
    """One limit, checked. Byte limits fill *_bytes; the step-time limit fills *_s."""

    limit: str = Field(description="'peak', 'category:<c>', 'phase:<p>', 'baseline', 'step_time'")
    label: str = Field(description="how messages name it: 'peak', 'activation', ...")
    ok: bool
    budget_text: str = Field(description="the budget as the user wrote it")
    budget_bytes: int | None = None
    actual_bytes: int | None = None
    budget_s: float | None = None
    actual_s: float | None = None
    note: str = Field("", description="what was measured: allocator or ledger, baseline, ...")
    top: list[TensorAtPeak] = Field(default_factory=list)
    growth: list[Growth] = Field(default_factory=list)

    @property
    def over(self) -> float:
        """How far over (negative: headroom), in bytes or seconds."""
        if self.budget_bytes is not None:
            return (self.actual_bytes or 0) - self.budget_bytes
        return (self.actual_s or 0.0) - (self.budget_s or 0.0)

    def _exact(self) -> bool:
        """Byte counts when the rounded sizes would read the same (40.3 MiB > 40.3 MiB)."""
        return self.budget_bytes is not None and \
            format_bytes(self.actual_bytes or 0) == format_bytes(self.budget_bytes)

    def actual_str(self) -> str:
        if self.budget_bytes is not None:
            a = self.actual_bytes or 0
            return f"{a:,} B" if self._exact() else format_bytes(a)
        return f"{(self.actual_s or 0) * 1e3:.1f} ms"

    def budget_str(self) -> str:
        if self.budget_bytes is not None:
            b = self.budget_bytes
            return f"{b:,} B" if self._exact() else format_bytes(b)
        return f"{(self.budget_s or 0) * 1e3:.1f} ms"

    def over_str(self) -> str:
        if self.budget_bytes is not None:
            return f"{int(self.over):,} B" if self._exact() else format_bytes(int(self.over))
        return f"{self.over * 1e3:.1f} ms"

    def line(self) -> str:
        """`activation 440.2 MiB > budget 300.0 MiB by 140.2 MiB (blocks.3.mlp ...)`."""
        rel = "<=" if self.ok else ">"
        s = f"{self.label} {self.actual_str()} {rel} budget {self.budget_str()}"
        if not self.ok:
            s += f" by {self.over_str()}"
        why = self.why()
        return f"{s} ({why})" if why and not self.ok else s

    def why(self) -> str:
        parts = []
        if self.growth:
            cats = [g for g in self.growth if g.module == ALL][:2]
            mods = [g for g in self.growth if g.module != ALL][:3]
            parts.append("grew most: " + ", ".join(str(g) for g in cats + mods))
        if self.top:
            mixed = not self.limit.startswith("category:")
            parts.append("top at peak: " + ", ".join(t.describe(mixed) for t in self.top[:3]))
        return "; ".join(parts)


class CheckResult(_Model):
    """The verdict over every limit of a budget on one ledger."""

    ok: bool
    peak_bytes: int = Field(description="the peak checked (allocator's when measured)")
    peak_source: str = Field(description="'allocator (<source>)' or 'ledger (no allocator ...)'")
    ledger_peak_bytes: int
    steps_traced: int
    limits: list[LimitResult]
    budget_sources: list[str] = Field(default_factory=list)

    @property
    def violations(self) -> list[LimitResult]:
        return [lim for lim in self.limits if not lim.ok]

    def headline(self) -> str:
        """One line for a test failure: the first violation, then why, in the shape
        `peak 912.0 MiB > budget 800.0 MiB (activation +140.2 MiB: blocks.3.mlp ...)`."""
        bad = self.violations
        if not bad:
            return f"peak {format_bytes(self.peak_bytes)} within budget"
        first = bad[0]
        rel = f"{first.label} {first.actual_str()} > budget {first.budget_str()}"
        cats = [v for v in bad if v.limit.startswith("category:")]
        if cats:
            why = "; ".join(f"{c.label} {format_signed_bytes(int(c.over))}: "
                            + ", ".join(str(t) for t in c.top[:3]) for c in cats)
        else:
            why = first.why()
        return f"{rel} ({why})" if why else rel

    def to_json_dict(self) -> dict:
        return {
            "schema": CHECK_SCHEMA,
            "ok": self.ok,
            "peak_bytes": self.peak_bytes,
            "peak_source": self.peak_source,
            "ledger_peak_bytes": self.ledger_peak_bytes,
            "steps_traced": self.steps_traced,
            "budget_sources": self.budget_sources,
            "violations": [_violation(v) for v in self.violations],
            "limits": [lim.model_dump() for lim in self.limits],
        }


def _violation(v: LimitResult) -> dict:
    d = {"limit": v.limit, "budget_bytes": v.budget_bytes, "actual_bytes": v.actual_bytes,
         "budget": v.budget_text, "message": v.line()}
    if v.budget_s is not None:
        d.update(budget_s=v.budget_s, actual_s=v.actual_s)
    return d
