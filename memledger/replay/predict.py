"""`predict(ledger, policies)`: the `memledger.predict/1` contract, and its cost model.

No torch here. Added time per step = recompute + transfer:

- recompute: the traced forward time of each re-run region call (scope `ns`), times the
  share of its events that early stop re-runs, averaged over the warm steps (step 1 is
  left out when there are more: first calls pay one-time costs), minus what tracing added
  to those events. Tracing adds about the same per event, so the per-event cost is
  (traced step time - untraced step time) / events per step. Example (tiny GPT, one
  thread): traced step 65 ms over 1,348 events, untraced 50 ms: 11 us per event; a block
  forward traced at 6.0 ms over 64 events costs 6.0 - 64 x 0.011 = 5.3 ms to recompute.
  The untraced step time comes from `--step-time` or from the ledger's measurement when it
  carries one; without either nothing is subtracted (an upper bound).
- transfer: bytes offloaded per step, written and read back, at the copy bandwidth
  (`--bandwidth`, else the ledger's calibration, else measured here: see cost.py).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memledger.ledger.model import Ledger
from memledger.replay.cost import disk_bandwidth
from memledger.replay.engine import CPU_RNG_STATE_BYTES, Replayed, replay
from memledger.replay.policies import Policy
from memledger.replay.prepared import Prepared

PREDICT_SCHEMA = "memledger.predict/1"


class PolicyPrediction(BaseModel):
    """One policy's predicted peak and added time."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    peak_bytes: int = Field(description="predicted allocator peak")
    saving_bytes: int = Field(description="baseline peak minus predicted peak")
    added_time_s: float = Field(description="predicted added time per step")
    recompute_s: float = Field(description="of which recomputation")
    transfer_s: float = Field(description="of which offload copies (both ways)")
    at_peak: dict[str, int] = Field(description="bytes per category at the predicted peak")
    peak_event: int = Field(description="event of the peak (original numbering)")
    peak_phase: str
    peak_step: int
    peak_in_recompute: str = Field(description="module being recomputed at the peak, or ''")
    regions: list[str] = Field(description="selected modules")


class PredictReport(BaseModel):
    """The `memledger.predict/1` contract."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(PREDICT_SCHEMA, alias="schema")
    baseline_peak_bytes: int
    untraced_step_time_s: float = Field(description="0 when unknown")
    copy_bytes_per_s: float = Field(description="0 when no policy offloads")
    policies: list[PolicyPrediction]
    time_model: str = Field("traced", description="'traced', or how a fake ledger's time "
                            "was modelled (FLOPs at a throughput)")

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def predict(led: Ledger, policies: list[Policy], step_time_s: float | None = None,
            bandwidth: float | None = None, prep: Prepared | None = None,
            flops: float | None = None) -> PredictReport:
    prep = prep or Prepared.from_ledger(led)
    time_model = "traced"
    if led.header.get("fake"):   # no wall time: FLOPs / --flops (Note [Modelled time])
        from memledger.replay.fake_time import modelled
        prep, time_model = modelled(prep, led, flops, bandwidth)
    rng = CPU_RNG_STATE_BYTES if led.device == "cpu" else 0
    results = [replay(prep, p, rng_bytes=rng) for p in policies]
    base = prep.baseline_ledger_peak + prep.workspace
    untraced = step_time_s * 1e9 if step_time_s else prep.untraced_step_ns
    warm = slice(1, None) if len(prep.step_ns) > 1 else slice(None)
    traced = float(np.median(prep.step_ns[warm])) if len(prep.step_ns) else 0.0
    ev_per_step = float(np.median(prep.step_events[warm])) if len(prep.step_events) else 0.0
    per_event_ns = max(0.0, traced - untraced) / ev_per_step if untraced and ev_per_step \
        else 0.0
    bw = 0.0
    if any(r.offload_bytes for r in results):
        bw = bandwidth or prep.copy_bytes_per_s or disk_bandwidth()
    phase, step = led.phase_of_events()
    steps = max(led.steps_traced, 1)
    out = []
    for r in results:
        recompute = max(0.0, r.recompute_ns_per_step
                        - per_event_ns * r.recompute_events_per_step) / 1e9
        transfer = 2 * r.offload_bytes / steps / bw if bw and r.offload_bytes else 0.0
        out.append(_prediction(r, base, recompute, transfer, phase, step))
    return PredictReport(baseline_peak_bytes=base, untraced_step_time_s=untraced / 1e9,
                         copy_bytes_per_s=bw, policies=out, time_model=time_model)


def _prediction(r: Replayed, base: int, recompute: float, transfer: float, phase,
                step) -> PolicyPrediction:
    ev = r.peak_event
    ph = str(phase[ev]) if len(phase) else ""
    if r.in_recompute:
        ph = "backward"
    return PolicyPrediction(
        policy=str(r.policy), peak_bytes=r.peak_bytes, saving_bytes=base - r.peak_bytes,
        added_time_s=recompute + transfer, recompute_s=recompute, transfer_s=transfer,
        at_peak=r.at_peak, peak_event=ev, peak_phase=ph,
        peak_step=int(step[ev]) if len(step) else 1, peak_in_recompute=r.in_recompute,
        regions=r.regions)
