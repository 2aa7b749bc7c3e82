"""A doctor finding and the report (`memledger doctor --json`, schema memledger.doctor/1).

Keys here are a promise to CI scripts: add, never rename without a schema bump. No torch:
`show`, `report` and `check` read findings from a ledger anywhere.

In a ledger (Note [Ledger file format] in memledger/ledger/schema.py) the doctor writes one
`doctor` record (schema, steps, checks run) and one `finding` record per finding, after the
`end` record; ledgers without them are read as "the doctor did not run" (None).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from memledger.units import count

DOCTOR_SCHEMA = "memledger.doctor/1"

CHECKS: tuple[str, ...] = (
    "cut_graph", "unused_parameter", "frozen_moving", "no_optimizer", "two_optimizers",
    "stale_optimizer", "optimizer_reset", "wasted_gradients",
    "grad_leak", "mixed_gradient", "token_denominator", "loss_not_divided",
    "short_accumulation", "nonfinite_grad",
    "zeroed_before_step", "double_step", "clip_order", "written_after_step",
    "dropped_update", "no_update",
    "scheduler_order",
    "scheduler_rate", "cross_step_retention", "eval_mode", "dead_penalty", "double_activation",
    "broadcast_target", "not_log_probs", "kl_div_mean", "rng_reset", "cyclic_garbage",
    "unused_graph",
    "unsynced_gradients", "unaveraged_gradients",
)


class Where(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    file: str = Field("", description="the user's file ('' when no user frame was running)")
    line: int = Field(0, description="1-based line in `file` (0 when unknown)")

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "(no line)"


class Finding(BaseModel):
    """One thing wrong with the training mechanics, with the numbers that show it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str = Field(description="which check found it (one of CHECKS)")
    severity: Literal["error", "warning"] = Field(
        description="error: the update is wrong; warning: likely wrong, or wasteful")
    message: str = Field(description="one sentence: what, where, and what to do")
    evidence: dict[str, Any] = Field(default_factory=dict,
                                     description="the numbers (counts, bytes, steps)")
    where: Where = Field(default_factory=Where)

    def line(self) -> str:
        return f"{self.severity.upper()} {self.check} at {self.where}: {self.message}"


class DoctorReport(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(DOCTOR_SCHEMA, alias="schema", serialization_alias="schema")
    ok: bool = Field(description="no finding at all")
    steps: int = Field(0, description="training steps the doctor watched (as --steps counts "
                       "them: a backbone's and a head's optimizer after one backward are one)")
    optimizer_steps: Optional[int] = Field(
        None, description="optimizer.step() calls in those steps, which the findings' step "
        "numbers count (a GAN's two optimizers make two calls a training step)")
    steps_by: str = Field("optimizer", description="what ended a step (`--steps-by`): "
                          "optimizer, forward or whole")
    findings: list[Finding] = Field(default_factory=list)

    @classmethod
    def of(cls, findings: list[Finding], steps: int, optimizer_steps: int | None = None,
           steps_by: str = "optimizer") -> "DoctorReport":
        order = {"error": 0, "warning": 1}
        fs = sorted(findings, key=lambda f: (order[f.severity], CHECKS.index(f.check)
                                             if f.check in CHECKS else 99))
        return cls(ok=not fs, steps=steps, optimizer_steps=optimizer_steps,
                   steps_by=steps_by, findings=fs)

    def steps_text(self) -> str:
        """'3 steps', '3 steps (6 optimizer steps, as the findings number them)' or
        '3 steps (by forward)'."""
        text = count(self.steps, "step")
        if self.steps_by != "optimizer":   # no optimizer step need be there to count
            return text + f" (by {self.steps_by})" + (
                f", {count(self.optimizer_steps, 'optimizer step')}"
                if self.optimizer_steps else "")
        if self.optimizer_steps is not None and self.optimizer_steps != self.steps:
            text += (f" ({count(self.optimizer_steps, 'optimizer step')}, as the findings "
                     "number them)")
        return text

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)

    # ---- in a ledger ---------------------------------------------------------------------
    def ledger_records(self) -> list[dict]:
        head = {"k": "doctor", "schema": DOCTOR_SCHEMA, "steps": self.steps, "ok": self.ok,
                "optimizer_steps": self.optimizer_steps, "steps_by": self.steps_by}
        return [head] + [{"k": "finding", **f.model_dump()} for f in self.findings]

    @classmethod
    def from_ledger_extra(cls, extra: dict[str, list[dict]]) -> "DoctorReport | None":
        """The doctor's report kept in a ledger (`Ledger.extra`), or None if it has none."""
        heads = extra.get("doctor") or []
        if not heads:
            return None
        findings = [Finding(**{k: v for k, v in r.items() if k != "k"})
                    for r in extra.get("finding", [])]
        opt = heads[-1].get("optimizer_steps")
        return cls.of(findings, int(heads[-1].get("steps", 0)),
                      None if opt is None else int(opt),
                      str(heads[-1].get("steps_by", "optimizer")))
