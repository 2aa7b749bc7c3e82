"""`predict`: replay each policy; predicted peak, its breakdown and added time per step.

No torch. Peaks come from replay (memledger/replay/engine.py); added time from the cost
model (memledger/replay/costs.py, Note [Added time]): untraced module and op times recorded
by `trace` times counts taken from the replay, plus the machine's calibrated constants.
Nothing is timed here, so one ledger predicts the same times on every run; each added time
carries a band (`added_time_lo_s` .. `added_time_hi_s`) from the spread of the timings and
constants that set it.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from memledger.errors import NotPredicted
from memledger.ledger.model import Ledger
from memledger.replay.calib_cache import negative_band, read_cached
from memledger.replay.costs import AddedTime, CostModel, cached_calibration, is_modelled
from memledger.replay.fake_time import prepare
from memledger.replay.engine import CPU_RNG_STATE_BYTES, Replayed, Work, replay
from memledger.replay.policies import Policy, PolicyError
from memledger.replay.prepared import Prepared, rank_gap_is_collective
from memledger.replay.timings import timing_record

PREDICT_SCHEMA = "memledger.predict/1"


class PolicyPrediction(BaseModel):
    """One policy's predicted peak and added time."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    peak_bytes: int = Field(description="predicted allocator peak")
    saving_bytes: int = Field(description="baseline peak minus predicted peak")
    added_time_s: float = Field(description="predicted added time per step")
    added_time_lo_s: float = Field(0.0, description="band: every cost at its 10th percentile")
    added_time_hi_s: float = Field(0.0, description="band: every cost at its 90th percentile")
    recompute_s: float = Field(description="of which recomputation")
    transfer_s: float = Field(description="of which offload copies (both ways)")
    machinery_s: float = Field(0.0, description="of which checkpoint / selective / hook work")
    at_peak: dict[str, int] = Field(description="bytes per category at the predicted peak")
    peak_event: int = Field(description="event of the peak (original numbering)")
    peak_phase: str
    peak_step: int
    peak_in_recompute: str = Field(description="module being recomputed at the peak, or ''")
    regions: list[str] = Field(description="selected modules")
    idle_regions: list[str] = Field(default_factory=list, description="selected modules no "
                                    "traced call of which ran with gradients in forward "
                                    "(under no_grad, or only from inside backward): the "
                                    "policy leaves them as they are, and so does measure")
    empty_regions: list[str] = Field(default_factory=list, description="selected modules "
                                     "whose calls the policy acts on saved nothing for "
                                     "backward (their work ran outside them: a lazy module's "
                                     "forward returns an object that computes later): the "
                                     "policy changes nothing there")
    peak_before_model: str = Field("", description="where the policy's peak lies before the "
                                   "first optimizer step decided which module is the model: "
                                   "the label the model's calls had until then, on which no "
                                   "policy acts (Note [A peak before the model is decided]); "
                                   "'' otherwise")


class RefusedPolicy(BaseModel):
    """A policy the replay refused (a KV cache written in its region, a module the script
    checkpoints itself, a save list on an op changed in place): predict says why."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    reason: str = Field(description="why, in one line")
    runs: bool = Field(False, description="the policy runs and only its prediction is "
                       "refused (inside compiled code): `measure` it")


class PredictReport(BaseModel):
    """The `memledger.predict/1` contract."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(PREDICT_SCHEMA, alias="schema")
    baseline_peak_bytes: int
    untraced_step_time_s: float = Field(description="0 when unknown")
    timed_step_s: float = Field(0.0, description="median step time while the module times "
                                "were taken, on their clock (thread CPU or wall); 0: unknown")
    copy_bytes_per_s: float = Field(description="0 when no policy offloads")
    offload_to: str = Field("", description="where offload's copies go and what priced "
                            "them, e.g. 'files in /tmp (ext4), priced by this model's own "
                            "offloaded steps'; '' when no policy offloads")
    cost_source: str = Field("", description="untraced: module/op times measured without "
                             "the tracer; traced: the fallback for older ledgers")
    calibration: str = Field("", description="ledger | cache | none: where the machine's "
                             "constants came from")
    calibration_unsettled: str = Field("", description="why those constants are noise "
                                       "(measured on a busy machine), '' when they are not")
    timings_busy: str = Field("", description="why the trace's own timed steps and probes "
                              "are noise (the load they ran at, e.g. 'load average 5.8 on 2 "
                              "cores'), '' when they ran on a quiet machine")
    costs_probed: bool = Field(False, description="trace measured this model's own "
                               "checkpoint, selective and offload costs (its probes); "
                               "False: the machine's calibration priced them")
    probes_skipped: str = Field("", description="why trace did not probe this model's "
                                "costs when it had the steps to: 'compiled' (it runs code "
                                "torch.compile'd by a real backend), 'uncalled' (the "
                                "script calls the model's parts, never its own forward), "
                                "'ranks' (a rank of several: no rank probes), '' otherwise")
    policies: list[PolicyPrediction]
    refused: list[RefusedPolicy] = Field(default_factory=list, description="policies the "
                                         "replay refused, with why (their peaks unknown)")
    time_model: str = Field("traced", description="'traced' (measured), or how a fake "
                            "ledger's time was modelled (FLOPs at a throughput)")
    collective_bytes: int = Field(0, description="a CPU rank: gloo's own buffers at the "
                                  "traced peak, live or not at a measured peak as its threads "
                                  "let them go (Note [A gloo rank's gap]); 0 elsewhere")

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def cost_model(led: Ledger, prep: Prepared, step_time_s: float | None = None,
               bandwidth: float | None = None) -> tuple[CostModel, str]:
    """The cost model for `led`: its own calibration, else this machine's cached one. Built
    once per prepared ledger and arguments (plan prices its table and then predicts; the
    model's probes take 0.1 s on a 48-block GPT)."""
    params, where = prep.calibration, "ledger"
    if is_modelled(prep):         # Note [A modelled ledger's added time] in costs.py
        params, where = {}, "none"
    elif not params:
        params, where = cached_calibration(led.device), "cache"
    if not params:
        where = "none"
    memo = prep.__dict__.setdefault("_cost_models", {})
    key = (step_time_s, bandwidth, where, json.dumps(params, sort_keys=True, default=str))
    if key not in memo:
        memo[key] = CostModel(prep, params, bandwidth=bandwidth, step_time_s=step_time_s), where
    return memo[key]


_PROBES = ("recompute_factor", "ckpt_region_ns", "sac_op_ns", "selective_probe",
           "offload_probe")


UNPROBED_LINE = ("checkpoint, selective and offload costs from the machine's calibration, "
                 "not this model's own: the script ended before trace's probes ran (they "
                 "follow its timed steps); let it run 16 steps more than --steps")
COMPILED_UNPROBED_LINE = ("checkpoint, selective and offload costs from the machine's "
                          "calibration, not this model's own: trace's probes do not run "
                          "torch.compile'd code (each probe would compile again)")


RANKS_UNPROBED_LINE = ("checkpoint, selective and offload costs from the machine's "
                       "calibration, not this model's own: trace does not probe a model "
                       "on several ranks (Note [No probes on several ranks])")
UNCALLED_UNPROBED_LINE = ("checkpoint, selective and offload costs from the machine's "
                          "calibration, not this model's own: trace's probes re-run a "
                          "call of the model's own forward, and the script's timed steps "
                          "made none (it calls the model's parts)")


def unprobed_line(rep: "PredictReport") -> str:
    """Why the calibration priced the policies (priced_by_calibration)."""
    return {"compiled": COMPILED_UNPROBED_LINE, "uncalled": UNCALLED_UNPROBED_LINE,
            "ranks": RANKS_UNPROBED_LINE}.get(rep.probes_skipped, UNPROBED_LINE)


def unsettled_line(reason: str) -> str:
    return (f"time costs measured on a busy machine ({reason}): the +ms figures and their "
            "bands may be far off; a trace on a quiet machine measures them again")


def unsettled_why(timings_busy: str, calibration_unsettled: str) -> str:
    """The one reason said beside the times ('' when none): the trace's own timings first,
    they priced the model (Note [Timings taken on a busy machine] in trace/timing.py)."""
    return f"this trace's own timings: {timings_busy}" if timings_busy else \
        calibration_unsettled


def priced_by_calibration(rep: "PredictionReport") -> bool:
    """The model's own probes never ran: the machine's calibration priced checkpoint,
    selective and offload (UNPROBED_LINE)."""
    return rep.cost_source == "untraced" and not rep.costs_probed and bool(rep.policies)


def time_caveats(rep: "PredictionReport", own_load: bool = True) -> list[str]:
    """Why `rep`'s added times may be far off, a line each ([] when this model's own probes
    priced them on a quiet machine), for compare: the lines predict and plan print under
    their tables. compare said nothing, and a Mamba whose script ended before the probes showed
    +367 ms predicted beside +192 measured with no word that the calibration priced it.
    `own_load=False` leaves out the trace's own load mark: compare traces right after a
    minute of its own doctor and gate runs, whose load (2.0-2.1 on 2 cores, each run's
    torch on both) the 1-minute average still holds."""
    why = unsettled_why(rep.timings_busy if own_load else "", rep.calibration_unsettled)
    out = [unsettled_line(why)] if why else []
    if priced_by_calibration(rep):
        out.append(unprobed_line(rep))
    return out


def costs_probed(led: Ledger) -> bool:
    """Whether `trace`'s probes measured this model's own checkpoint, selective and offload
    costs (memledger/trace/timing.py). They run after the timed steps: a script that ends
    first leaves a timing record without them, and the calibration prices those costs."""
    record = timing_record(led)
    return record is not None and any(record.get(k) for k in _PROBES)


def timings_busy(led: Ledger) -> str:
    """The load the trace's own timings ran at, when above the cores ('' when quiet): Note
    [Timings taken on a busy machine] in memledger/trace/timing.py."""
    record = timing_record(led)
    return str(record.get("busy") or "") if record is not None else ""


def calibration_unsettled(led: Ledger) -> str:
    """Why the machine's constants pricing `led` are unreliable ('' when they are not):
    Note [A calibration taken on a busy machine] in memledger/replay/calib_cache.py."""
    calib = (led.extra.get("calibration") or [{}])[-1]
    if not calib.get("params"):
        calib = read_cached(led.device)
    # ledgers from before the mark: their constants' bands still tell
    return str(calib.get("unsettled") or negative_band(calib.get("params") or {}))


def predict(led: Ledger, policies: list[Policy], step_time_s: float | None = None,
            bandwidth: float | None = None, prep: Prepared | None = None,
            flops: float | None = None, keep_going: bool = False) -> PredictReport:
    """`keep_going`: a policy the replay refuses goes to `refused` and the others are
    predicted, even where none is left (the caller says what a report of refusals alone
    means: Note [Every policy refused]); else its PolicyError is raised."""
    # a fake ledger's times are FLOPs / --flops (Note [Modelled time] in fake_time.py)
    prep, time_model, bandwidth = prepare(led, prep, flops, bandwidth)
    rng = CPU_RNG_STATE_BYTES if led.device == "cpu" else 0
    results, refused = [], []
    for p in policies:
        try:
            results.append(replay(prep, p, rng_bytes=rng))
        except PolicyError as e:
            if not keep_going:
                raise
            refused.append(RefusedPolicy(policy=str(p), runs=isinstance(e, NotPredicted),
                                         reason=str(e).removeprefix("memledger: ")))
    # Note [Every policy refused]
    # With `keep_going`, a report of refusals alone is returned, not the first refusal
    # raised: `predict` exits 2 on it with every reason (`_raise_refused`), and `compare`
    # keeps every policy's verdict. The raise that stood here, for "nothing predicted and
    # not each of them `runs`", made `compare` exit 2 with one policy's NotPredicted line
    # ("... `memledger compare` measures and judges it") where the gates had run all
    # three: torchjd's one backward pass per example (`parallel_chunk_size=1`) reads
    # every save 16 times, so checkpoint and offload are measured but not predicted, and
    # selective, refused by both sides, was the one refusal without `runs`
    # (tests/clients/test_torchjd_clients.py).
    base = prep.baseline_ledger_peak + prep.workspace
    model, where = cost_model(led, prep, step_time_s, bandwidth)
    bw, offload_to = 0.0, ""
    # what offload writes, not what leaves: `offload:fc2` on the MLP writes the ReLU output
    # fc2 packs though the ReLU keeps it resident (0 B saved, its copies still priced)
    if any(r.work.off_rows.size for r in results):
        per_byte = model.consts["median"].per_byte
        bw = 2e9 / per_byte if per_byte > 0 else 0.0
        dest = "pinned host memory" if led.device.startswith("cuda") else (
            model.offload_where or "files")
        offload_to = f"{dest}, priced by {model.offload_priced_by}"
    phase, step, _ = led.reported_phase_of_events()   # Note [A backward pass outside the step]
    decided = model_decided(led)
    out = [_prediction(r, base, model.price(r), phase, step, prep, decided) for r in results]
    untraced = step_time_s * 1e9 if step_time_s else prep.untraced_step_ns
    return PredictReport(baseline_peak_bytes=base, untraced_step_time_s=untraced / 1e9,
                         timed_step_s=(prep.timings.step_ns if prep.timings else 0.0) / 1e9,
                         copy_bytes_per_s=bw, offload_to=offload_to, calibration=where,
                         policies=out, refused=refused,
                         calibration_unsettled=calibration_unsettled(led),
                         timings_busy=timings_busy(led),
                         costs_probed=costs_probed(led),
                         probes_skipped=str((timing_record(led) or {}).get("probes_skipped",
                                                                          "")),
                         cost_source="modelled" if time_model != "traced" else model.source,
                         time_model=time_model,
                         collective_bytes=int((led.measured or {}).get(
                             "collective_at_peak_bytes") or 0)
                         if rank_gap_is_collective(led) else 0)


def model_decided(led: Ledger) -> tuple[int, str] | None:
    """(event, former label) where the first optimizer step took another module for the
    model than the first one called (Note [The model], trace/roots.py); None where it did
    not."""
    moved = [r for r in led.extra.get("model", []) if r.get("was")]
    return (int(moved[0]["ev"]), str(moved[0]["was"])) if moved else None


def _prediction(r: Replayed, base: int, t: AddedTime, phase, step,
                prep: Prepared, decided: tuple[int, str] | None) -> PolicyPrediction:
    ev = r.peak_event
    # Note [A region called inside backward] (measure/apply.py): Reformer's layers run under
    # no_grad in forward and again inside its reversible backward; a policy on them acts on
    # no call, and the prediction is the baseline's: say which modules
    acting = set(prep.scope_mod[r.work.scope_row].tolist()) if len(r.work.scope_row) \
        else set()
    ph = str(phase[ev]) if len(phase) else ""
    if r.in_recompute:
        ph = "backward"
    return PolicyPrediction(
        policy=str(r.policy), peak_bytes=r.peak_bytes, saving_bytes=base - r.peak_bytes,
        added_time_s=t.seconds, added_time_lo_s=t.lo, added_time_hi_s=t.hi,
        recompute_s=t.recompute_s, transfer_s=t.transfer_s, machinery_s=t.machinery_s,
        at_peak=r.at_peak, peak_event=ev, peak_phase=ph,
        peak_step=int(step[ev]) if len(step) else 1, peak_in_recompute=r.in_recompute,
        regions=r.regions, idle_regions=[m for m in r.regions if m not in acting],
        empty_regions=_saved_nothing(prep, r.work, acting),
        # Note [A peak before the model is decided] (report/compare_table.py)
        peak_before_model=decided[1] if decided and ev < decided[0] else "")


# Note [A region that saves nothing]
# A policy acts on what its modules' calls save for backward. A call may save nothing: zuko's
# lazy transforms return a torch `Transform` from `forward(c)`, and the network that does
# their work runs later, inside `log_prob` (Note [Blocks whose work runs outside their
# calls], replay/plan.py); a rotary embedding's table is made from a buffer, and nothing
# in it needs a gradient; a reversible sequence's custom Function (h-transformer-1d's
# `ReversibleSequence`, reformer's) keeps its input on `ctx` as an attribute, not through
# `save_for_backward`, and recomputes its blocks in backward, so autograd saves nothing
# there and no policy has anything to drop. `checkpoint:transform.transforms.*` was
# predicted and measured as the baseline, with no word why. The modules whose every acted-on call holds no `saved`
# record are named, as the idle ones are.
# Which call holds a save is Rule 5's (replay/calls.py `record_call`), as the replay itself
# reads it: a save is recorded at the event before an op that saves its input, so a call
# on [ev0, ev1) holds the saves on [ev0 - 1, ev1 - 1]. Counted on [ev0, ev1] instead, a
# call whose one save is its first op's input was named: perceiver-ar-pytorch's `pos_emb`
# (an `nn.Embedding` of `torch.arange(n)`, which saves the indices it is handed) read "saved
# nothing ... the policy changes nothing there" beside its own prediction of
# `offload:net.pos_emb`, 192 B under the baseline and measured so
# (tests/clients/test_perceiver_ar_clients.py). The count is now the replay's own, the
# packs `_packs_per_call` gives each call (Work.saves).
def _saved_nothing(prep: Prepared, work: Work, acting: set) -> list[str]:
    rows = work.scope_row
    if not len(rows) or prep.pack_ev is None:
        return []
    mods = prep.scope_mod[rows]
    saving = set(mods[work.saves > 0].tolist())
    return [m for m in dict.fromkeys(mods.tolist()) if m in acting and m not in saving]
