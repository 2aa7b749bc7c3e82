"""The `memledger.compare/1` contract and the verdict rule. No torch here.

Verdict per policy:

- `REJECT`: a gate failed (inputs, gradients, update) or the script failed under it; the
  reason names the gate, the tensor, the step and by how much.
- `ADOPT`: among the policies that pass every gate and save memory (measured), the one with
  the most bytes saved per second of added step time (measured). An added time below the
  timing's noise (the two baseline medians' difference) counts as that noise, not as free:
  a policy whose step happened to time faster is not worth infinitely many bytes per second
  (a 512-byte saving at -0.4 ms beat 18 MiB at +9 ms that way). Ties go to the larger
  saving.
- `OK`: passes the gates, but is not the best trade (or performance was not measured).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from memledger.units import format_bytes

COMPARE_SCHEMA = "memledger.compare/1"
MIN_ADDED_S = 1e-6   # added time below this counts as free (a clock tick, not a cost)


class Gates(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inputs: bool
    gradients: bool
    update: bool


class Worst(BaseModel):
    """The largest gradient difference against the baseline (0.0 and 0.0: bitwise equal)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    step: int
    max_abs: float
    max_rel: float


class PolicyComparison(BaseModel):
    """One policy's row."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    verdict: str = Field(description="ADOPT | OK | REJECT")
    reason: str
    gates: Gates
    failed_gate: str | None = Field(description="the gate named in the reason; 'script' "
                                    "when the script failed under the policy, 'policy' when "
                                    "the policy is bad input here (not run); else null")
    tensor: str = Field("", description="the parameter/buffer/input the reason names")
    step: int | None = Field(None, description="the step the reason names")
    worst_gradient: Worst | None = None
    steps_compared: int = 0
    predicted_peak_bytes: int = 0
    not_predicted: str = Field("", description="why predict refused this policy though it "
                               "runs (inside compiled code): measured and judged, not "
                               "predicted")
    measured_peak_bytes: int = 0
    idle_regions: list[str] = Field(default_factory=list, description="selected modules the "
                                    "policy acts on no call of (called only without "
                                    "gradients, or from inside backward)")
    empty_regions: list[str] = Field(default_factory=list, description="selected modules "
                                     "whose calls saved nothing for backward")
    selected: int = Field(0, description="modules the policy selects (in the prediction)")
    peak_before_model: str = Field("", description="the predicted peak lies before the first "
                                   "optimizer step decided the model: the label the model's "
                                   "calls had until then (Note [A peak before the model is "
                                   "decided]); '' otherwise")
    predicted_peak_at: str = Field("", description="step·phase of the predicted peak")
    predicted_added_time_s: float = 0.0
    measured_added_time_s: float = 0.0
    measured_step_time_s: float = 0.0
    measured_added_interval_s: list[float] | None = Field(
        None, description="90 % bootstrap interval [lo, hi] of measured_added_time_s from "
        "the timed steps (memledger/measure/interval.py); null with fewer than 3 timed steps")
    measured_added_resolved: bool | None = Field(
        None, description="whether that interval lies within +-15 % of the measured added "
        "time (false also with fewer than 3 timed steps): false means the measurement "
        "cannot judge the prediction; null when not measured")
    saving_bytes: int = Field(0, description="baseline measured peak minus measured peak")
    peak_prediction_error: float | None = Field(
        None, description="(predicted - measured) / measured peak")
    bytes_saved_per_s: float | None = Field(None, description="saving / added time; null "
                                            "when the added time is within the noise")
    at_peak: dict[str, int] = Field(default_factory=dict,
                                    description="predicted bytes per category at the peak")
    rank: int | None = Field(None, description="`--nproc`: the rank these figures are from "
                             "(the one that rejected the policy, else its highest measured peak)")
    by_rank: list[dict] = Field(default_factory=list, description="`--nproc`: per rank: rank, "
                                "gradients (gate), gates_passed, predicted_peak_bytes, measured_peak_bytes")


class CompareReport(BaseModel):
    """The `memledger.compare/1` contract."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(COMPARE_SCHEMA, alias="schema")
    script: str
    steps: int
    steps_by: str = Field("optimizer", description="what ends a step: optimizer | forward | "
                          "whole (`--steps-by`, as `memledger trace` counts)")
    device: str
    tolerance: str = Field(description="bitwise | rtol 1.0e-05 (see docs/compare.md)")
    reproducible: bool = Field(description="the baseline's inputs agree between two runs")
    noise_floor: float = Field(description="largest relative difference of two baseline runs")
    note: str = ""
    performance: bool = Field(description="false when only the gates were run")
    frozen_changed: list[str] = Field(default_factory=list, description="requires_grad=False "
                                      "parameters that the baseline's optimizer step changes")
    baseline: dict = Field(default_factory=dict, description="predicted_peak_bytes, "
                           "measured_peak_bytes, measured_step_time_s, at_peak")
    front: list[dict] = Field(default_factory=list, description="plan's Pareto front on the "
                              "baseline ledger: policy, peak_bytes, added_time_s (predicted)")
    time_caveats: list[str] = Field(default_factory=list, description="why the predicted "
                                    "added times may be far off, a line each (as predict "
                                    "prints them); [] when this model's own probes priced "
                                    "them on a quiet machine")
    compiled: str = Field("", description="the baseline runs torch.compile'd code, which "
                          "the trace runs eagerly: the predicted peaks are the eager run's, "
                          "the measured ones the compiled run's; '' when it runs none")
    errors: list[str] = Field(default_factory=list, description="bad input met on the way, "
                              "a line each (a policy that cannot apply, a script too short "
                              "to time): the rest is judged and reported, then compare "
                              "exits 2 (Note [One bad policy among several])")
    policies: list[PolicyComparison]

    @property
    def rejected(self) -> bool:
        return any(p.verdict == "REJECT" for p in self.policies)

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def assign_verdicts(rows: list[PolicyComparison], performance: bool,
                    noise_s: float = 0.0) -> None:
    """Set ADOPT on the best trade among the rows that passed (REJECT rows are left alone).
    `noise_s`: how far two timings of the same step differ (module docstring)."""
    floor = max(noise_s, MIN_ADDED_S)
    best, best_key = None, None
    for r in rows:
        if r.verdict == "REJECT":
            continue
        r.verdict = "OK"
        if not performance or r.saving_bytes <= 0:
            continue
        within_noise = r.measured_added_time_s < floor
        per_s = r.saving_bytes / max(r.measured_added_time_s, floor)
        r.bytes_saved_per_s = None if within_noise else per_s
        key = (per_s, r.saving_bytes)
        if best_key is None or key > best_key:
            best, best_key = r, key
    if best is not None:
        best.verdict = "ADOPT"
        saved = format_bytes(best.saving_bytes)
        noise = f" (timings of the baseline differ by {noise_s * 1e3:.1f} ms)" \
            if noise_s >= MIN_ADDED_S else ""
        best.reason = (f"best saving per second of added time: {saved} for "
                       f"{best.measured_added_time_s * 1e3:+.1f} ms/step "
                       f"({format_bytes(best.bytes_saved_per_s)}/s)" if best.bytes_saved_per_s
                       else f"saves {saved} at no cost in time measurable above the "
                       f"noise{noise}")
