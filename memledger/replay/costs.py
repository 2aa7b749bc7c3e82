"""The time side of replay: what a policy adds to a step, with its band. No torch.

# Note [Added time]
Every term is a count taken from the replayed ledger times a cost measured *without the
tracer*: module and op times from the allocator pass (memledger/replay/timings.py) and the
machine's constants from its calibration (memledger/measure/calibrate.py, recorded in the
ledger by `trace`). Nothing is timed while predicting, so the same ledger gives the same
prediction on every run. Per selected call in a warm step (steps after the first, averaged):

    checkpoint   factor × fwd × share + call + saves × save
    selective    factor × fwd × share - kept + call + saves × save + sac_call
                 + (ops + rerun) × sac_op + kept ops × sac_keep
    offload      saves × pack + Σ over its offloaded storages (file + bytes × per_byte) × s

and once per warm step that re-runs any call (checkpoint or selective): `step`, what such a
step pays besides its calls (Note [A checkpointed step's own cost] in
memledger/trace/timing.py; 0 for ledgers whose probe did not measure it).

- fwd: the call's untraced forward (thread CPU time, module hooks; recompute re-runs
  exactly that forward with autograd recording).
- share: the part early stop re-runs, weighed by untraced op time: Σ op time over
  [ev0, rerun_end) / Σ over [ev0, ev1) (by event count where op times are missing); for a
  call that drops nothing, to its last pack (a Linear re-runs its `t` only: engine.py
  Note [What a call does, for the time model]).
- kept: untraced op time of the save-list ops in the re-run part (their cached outputs are
  handed back instead of recomputed).
- saves: packs made by the call (q, k and v of one attention are three).
- factor from a probe run with early stop (ledgers with `ckpt_early_stop`): the probe's
  re-run over plain forward time covers only the part early stop re-runs, so it is divided
  by the share the replay gives the probe's own regions (`_probe_share`).
- sac_op, factor, call: this model's own cost per op under selective checkpointing's
  caching mode, its own re-run/forward ratio and its own cost per checkpointed call,
  measured by `trace` after its timed steps (memledger/trace/timing.py `sac_probe`;
  `recompute_probe`, Note [Recompute probe in context]: its blocks checkpointed one by one
  in a real forward + backward, call = region_ns - saves per region x save); the
  calibration's when the ledger has none. Inside a real step a checkpointed call costs far
  more than in the calibration's isolated microbenchmark (tiny GPT: 0.6-1.5 ms per block
  against 84 us + 28 x 10 us): that missing part made every GPT policy 13-25 % low.
- kept ops, sac_keep: the save-list ops of the call (each output cached in forward) and
  what keeping one costs beyond its op time, solved from `trace`'s selective probe
  (Note [Selective probe in context] in memledger/trace/timing.py; `_sac_keep`); 0
  without a probe.
- s: what this model's own offloaded step paid per priced byte, from `trace`'s offload
  probe (Note [Offload probe in context] in memledger/trace/timing.py): its measured added
  time, less its saves × pack, over the price of the storages it wrote; 1 without a probe
  or with `--bandwidth`. The calibration's isolated bursts underprice a step's stream
  (tiny GPT, tmpfs: 14.0 ms priced, 18.5 ms paid).
- factor, call, save, sac_call, pack, file, per_byte: the calibration's constants (factor: what re-running a forward inside backward costs over running it
  plainly; 1 without a calibration).

Worked example (tiny GPT block, batch 8, this machine): fwd 5.0 ms, factor 1.06 (probe),
share 0.97 (early stop skips the last dropout and add), call 0.9 ms (probe: 1.2 ms per
region less 28 saves x 10 us), saves 26.5: 1.06 × 5.0 × 0.97 + 0.9 + 26.5 × 0.010
= 6.3 ms per block.
The band (`lo`, `hi`) repeats the sum with every cost at its 10th and at its 90th
percentile.

Without a `timing` record (ledgers from older versions) fwd falls back to the traced call
time minus the tracer's cost per event ((traced step - untraced step) / events per step);
without a calibration the constants are 0 and per_byte comes from a numpy file copy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from memledger.replay.calib_cache import read_cached
from memledger.replay.cost import disk_bandwidth
from memledger.replay.engine import Kind, Replayed, Work, replay
from memledger.replay.policies import Policy, PolicyKind, PolicyPart
from memledger.replay.prepared import Prepared

PARAMS = ("recompute_factor", "ckpt_call_ns", "ckpt_save_ns", "sac_op_ns", "sac_call_ns",
          "offload_file_ns", "offload_ns_per_byte", "pack_ns")


def cached_calibration(device: str) -> dict:
    """This machine's cached calibration constants for `device` ({} if none)."""
    return read_cached(device).get("params", {})


@dataclass(frozen=True)
class Constants:
    """One value of each calibrated constant (ns; per_byte in ns/byte)."""

    factor: float = 1.0       # re-run forward / plain forward
    ckpt_call: float = 0.0
    ckpt_save: float = 0.0
    sac_op: float = 0.0
    sac_call: float = 0.0
    file: float = 0.0
    per_byte: float = 0.0
    pack: float = 0.0
    sac_keep: float = 0.0     # per save-list op of a selective call (Note [Selective probe
                              # in context]); 0 without a probe
    ckpt_step: float = 0.0    # once per step that re-runs anything (Note [A checkpointed
                              # step's own cost]); 0 without a probe that measured it

    @classmethod
    def from_params(cls, params: dict, which: str, bandwidth: float | None = None) -> "Constants":
        g = {k: float(params[k][which]) if k in params else 0.0 for k in PARAMS}
        per_byte = g["offload_ns_per_byte"]
        if bandwidth:                          # --bandwidth: bytes/s one way, written + read
            per_byte = 2e9 / bandwidth
        elif not per_byte:
            per_byte = 2e9 / disk_bandwidth()
        return cls(g["recompute_factor"] or 1.0, g["ckpt_call_ns"], g["ckpt_save_ns"],
                   g["sac_op_ns"], g["sac_call_ns"], g["offload_file_ns"], per_byte, g["pack_ns"])


def _offload_scale(probe: dict | None, c: Constants, i: int) -> float | None:
    """What this model's own offloaded step paid per priced byte (Note [Offload probe in
    context], memledger/trace/timing.py): the probe's added time, its packs taken out,
    over the calibration's price of the storages it wrote; None without a probe."""
    if not probe:
        return None
    priced = probe["storages"] * c.file + probe["bytes"] * c.per_byte
    if priced <= 0:
        return None
    return max(0.0, probe["added"][i] - probe["saves"] * c.pack) / priced


# Note [A modelled ledger's added time]
# A fake ledger's times are modelled (Note [Modelled time] in memledger/replay/fake_time.py):
# a step is its FLOPs / F, a forward call its own FLOPs / F, and nothing else in the step
# costs anything. The machine's calibration (recompute factor, ckpt_call, ckpt_save,
# sac_op, sac_call, pack, offload_file; measured on this CPU with real kernels, per call
# and per op) belongs to another time scale: mixed into a modelled step it priced
# `checkpoint:model.layers.*.*` on a fake Coconut ledger at +12.1 ms against a whole
# step of 1.85 us, and `checkpoint:blocks.*` on examples/train_gpt.py at +3.34 ms
# (2.49 ms of it the calibration's per-call machinery) against a 2.82 ms step. A
# recompute re-runs ops whose time the model already knows, so on a modelled ledger the
# cost model prices with no calibration at all: factor 1, every per-call, per-save and
# per-op constant 0, offload copies at bytes / B each way (`--bandwidth` or the device's
# default B; no per-file cost). A checkpoint then adds exactly the FLOPs of the ops it
# re-runs over F; selective those less its kept ops (the save list's ops, named per event
# by the op that made the event's first storage: before, no event had a kind and
# selective was priced as a whole checkpoint); offload its bytes x 2 / B. Real ledgers
# (timings measured) are priced as before.


def is_modelled(prep: Prepared) -> bool:
    """Whether `prep`'s times are modelled from FLOPs (a fake ledger)."""
    return prep.timings is not None and prep.timings.source == "modelled"


@dataclass(frozen=True)
class AddedTime:
    """Predicted added time per step (seconds) and its band."""

    seconds: float
    lo: float
    hi: float
    recompute_s: float      # re-run forward work (fwd × share - kept)
    transfer_s: float       # offload: files written and read back
    machinery_s: float      # checkpoint / selective / hook bookkeeping


class CostModel:
    """Prices the `Work` of replayed policies on one prepared ledger (see Note [Added time])."""

    def __init__(self, prep: Prepared, params: dict | None = None,
                 bandwidth: float | None = None, step_time_s: float | None = None) -> None:
        self.prep = prep
        self.params = params if params is not None else (prep.calibration or {})
        if is_modelled(prep):      # Note [A modelled ledger's added time]
            self.params = {}
            bandwidth = bandwidth or prep.copy_bytes_per_s or None
        self.source = "untraced" if prep.timings.source else "traced"
        self.consts = {w: Constants.from_params(self.params, w, bandwidth)
                       for w in ("median", "lo", "hi")}
        op = prep.timings.op_ns
        self._op_known = ~np.isnan(op)
        self._op_cum = np.concatenate([[0.0], np.cumsum(np.where(self._op_known, op, 0.0))])
        self._known_cum = np.concatenate([[0], np.cumsum(self._op_known)])
        self._kept_cum: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        # the model's own selective cost per op and recompute factor, from the trace
        # (memledger/trace/timing.py sac_probe, recompute_probe), over the machine's
        off = prep.timings.offload if prep.timings is not None else None
        # where offload's copies go and what priced them, for the user (predict prints it)
        self.offload_where = (off or {}).get("where", "")
        sac = prep.timings.sac_op_ns if prep.timings is not None else ()
        fac = prep.timings.factor if prep.timings is not None else ()
        reg = prep.timings.region_ns if prep.timings is not None else ()
        per_step = prep.timings.step_ckpt_ns if prep.timings is not None else ()
        # a probe run with early stop timed the part of each re-run early stop makes
        share = self._probe_share(prep) if fac and prep.timings.probe_paths else 1.0
        # a probe whose median paid nothing above its packs ran on a machine too busy to see
        # the copies (a traced step of 1.2 s against 65 ms quiet): the calibration prices them
        trust_probe = not bandwidth and bool(_offload_scale(off, self.consts["median"], 0))
        failed = prep.timings.offload_failed if prep.timings is not None else ""
        self.offload_priced_by = "--bandwidth" if bandwidth else (
            "this model's own offloaded steps" if trust_probe else
            "the calibration (this model's offload probe saw no cost: a busy machine)" if off
            else f"the calibration (this model's offload probe failed: {failed})" if failed
            else "the calibration")
        for i, w in enumerate(("median", "lo", "hi")):
            c = self.consts[w]
            if sac:
                c = dataclasses.replace(c, sac_op=sac[i], sac_call=0.0)
            if fac:
                c = dataclasses.replace(c, factor=fac[i] / share)
            if per_step:
                c = dataclasses.replace(c, ckpt_step=max(0.0, per_step[i]))
            if reg:      # the call cost in this model's own step, its saves taken out
                call = reg[i] - prep.timings.probe_saves * c.ckpt_save
                c = dataclasses.replace(c, ckpt_call=max(0.0, call))
            scale = _offload_scale(off, c, i) if trust_probe else None
            if scale is not None:
                c = dataclasses.replace(c, file=c.file * scale, per_byte=c.per_byte * scale)
            self.consts[w] = c
        t = prep.timings
        fwd = t.call_ns.copy()
        lo, hi = t.call_lo.copy(), t.call_hi.copy()
        missing = np.isnan(fwd)
        if missing.any():                      # Note [Added time]: the traced fallback
            per_ev = self._tracer_ns_per_event(step_time_s)
            ev = (prep.scope_ev1 - prep.scope_ev0).astype(np.float64)
            traced = np.maximum(0.0, prep.scope_ns - per_ev * ev)
            fwd[missing], lo[missing], hi[missing] = (traced[missing],) * 3
        self.fwd = {"median": fwd, "lo": lo, "hi": hi}
        sel_probe = t.selective
        for i, w in enumerate(("median", "lo", "hi") if sel_probe else ()):
            keep = self._sac_keep(sel_probe, self.consts[w], i)
            self.consts[w] = dataclasses.replace(self.consts[w], sac_keep=keep)

    def _probe_work(self, prep: Prepared, kind: PolicyKind,
                    paths) -> tuple[Work, np.ndarray] | None:
        """The replay's `Work` of `kind` on the probe's regions, and which of its calls are
        in warm steps; None where the replay cannot run it."""
        if not paths or "" in paths:
            return None
        policy = Policy(parts=tuple(PolicyPart(kind=kind, selector=p) for p in paths))
        try:
            w = replay(prep, policy).work
        except Exception:          # a region the replay refuses: priced without it
            return None
        if w is None or not len(w.kind):
            return None
        step = prep.scope_step[w.scope_row]
        return w, (step > 1 if (step > 1).any() else np.ones(len(step), dtype=bool))

    def _probe_share(self, prep: Prepared) -> float:
        """The share of the probe regions' plain forward that their re-runs make under early
        stop, weighed by untraced forward time (Note [A checkpointed step's own cost]):
        the probe's factor (re-run time over plain forward time) over it is the factor of
        a whole re-run. 1 where the ledger cannot tell."""
        got = self._probe_work(prep, PolicyKind.CHECKPOINT, prep.timings.probe_paths)
        if got is None:
            return 1.0
        w, warm = got
        fwd = prep.timings.call_ns[w.scope_row]
        ok = warm & ~np.isnan(fwd)
        if not ok.any() or fwd[ok].sum() <= 0:
            return 1.0
        part = self._share(w.ev0, w.ev1, w.rerun_end)[ok]
        return max(float((fwd[ok] * part).sum() / fwd[ok].sum()), 1e-3)

    def _kept_ops(self, ev0: np.ndarray, ev1: np.ndarray, save_ops) -> tuple[np.ndarray,
                                                                              np.ndarray]:
        """(count, untraced op time) of the `save_ops` ops in each [ev0, ev1)."""
        key = tuple(save_ops)
        if key not in self._kept_cum:         # once per save list: plan prices many mixes
            t = self.prep.timings
            hit = np.isin(t.op_kind, list(save_ops))
            self._kept_cum[key] = (
                np.concatenate([[0], np.cumsum(hit)]),
                np.concatenate([[0.0], np.cumsum(np.where(hit & self._op_known, t.op_ns, 0.0))]))
        cum_n, cum_ns = self._kept_cum[key]
        n = len(cum_n) - 1
        a, b = np.clip(ev0, 0, n), np.clip(ev1, 0, n)
        return cum_n[b] - cum_n[a], cum_ns[b] - cum_ns[a]

    def _sac_keep(self, probe: dict, c: Constants, i: int) -> float:
        """The cost per kept op that makes the op-time model give what the selective probe
        measured on its own regions (Note [Selective probe in context]): per region, the
        probe's selective minus checkpointed step = sac_op x (forward ops + re-run ops)
        - kept op time in the re-run + kept ops x sac_keep. A probe run with early stop
        re-runs what the replay's `rerun_end` says; one without re-ran whole regions."""
        p = self.prep
        if p.timings.probe_paths:
            got = self._probe_work(p, PolicyKind.SELECTIVE, probe["paths"])
            if got is None:
                return 0.0
            w, warm = got
            w = dataclasses.replace(w, save_ops=[tuple(probe["save_ops"])] * len(w.save_ops))
            kept_ns, n_kept = (x[warm] for x in self._kept(w))
            ops = ((w.ev1 - w.ev0) + (w.rerun_end - w.ev0))[warm]
        else:
            rows = np.flatnonzero(np.isin(p.scope_mod, probe["paths"]))
            steps = np.unique(p.scope_step[rows])
            warm_steps = steps[steps > 1] if (steps > 1).any() else steps
            rows = rows[np.isin(p.scope_step[rows], warm_steps)]
            ev0, ev1 = p.scope_ev0[rows], p.scope_ev1[rows]
            n_kept, kept_ns = self._kept_ops(ev0, ev1, probe["save_ops"])
            ops = 2 * (ev1 - ev0)
        if not len(ops) or not n_kept.sum():
            return 0.0
        modelled = (ops * c.sac_op - kept_ns).sum()
        return (probe["added"][i] * len(ops) - modelled) / n_kept.sum()

    def _tracer_ns_per_event(self, step_time_s: float | None) -> float:
        p = self.prep
        untraced = step_time_s * 1e9 if step_time_s else p.untraced_step_ns
        warm = slice(1, None) if len(p.step_ns) > 1 else slice(None)
        traced = float(np.median(p.step_ns[warm])) if len(p.step_ns) else 0.0
        ev = float(np.median(p.step_events[warm])) if len(p.step_events) else 0.0
        return max(0.0, traced - untraced) / ev if untraced and ev else 0.0

    # ---- per call -------------------------------------------------------------------------
    def _share(self, a: np.ndarray, b: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Share of the call [a, b) that [a, e) re-runs: by op time where every op of the
        call has one, else by events."""
        n = len(self._known_cum) - 1
        a, b, e = (np.clip(x, 0, n) for x in (a, b, e))
        full = self._op_cum[b] - self._op_cum[a]
        part = self._op_cum[e] - self._op_cum[a]
        known = (self._known_cum[b] - self._known_cum[a]) == (b - a)
        by_ev = (e - a) / np.maximum(b - a, 1)
        return np.where(known & (full > 0), part / np.where(full > 0, full, 1), by_ev)

    def _kept(self, work: Work) -> tuple[np.ndarray, np.ndarray]:
        """Per selective call: (untraced time of the save-list ops inside its re-run part,
        their count over the whole call: each is cached in forward)."""
        kept_ns, kept_ops = np.zeros(len(work.kind)), np.zeros(len(work.kind))
        for part in np.unique(work.part[work.kind == Kind.SELECTIVE]):
            i = np.flatnonzero((work.kind == Kind.SELECTIVE) & (work.part == part))
            ops = work.save_ops[part]
            kept_ops[i] = self._kept_ops(work.ev0[i], work.ev1[i], ops)[0]
            kept_ns[i] = self._kept_ops(work.ev0[i], work.rerun_end[i], ops)[1]
        return kept_ns, kept_ops

    def price(self, r: Replayed) -> AddedTime:
        w = r.work
        if w is None or not len(w.kind):
            return AddedTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        step = self.prep.scope_step[w.scope_row]
        warm_steps = np.unique(step)
        warm_steps = warm_steps[warm_steps > 1] if (warm_steps > 1).any() else warm_steps
        warm = np.isin(step, warm_steps)
        n_re = self._steps_rerun(w, step, warm)
        shared = (warm, max(len(warm_steps), 1), n_re, self._share(w.ev0, w.ev1, w.rerun_end),
                  *self._kept(w))
        vals = {which: self._price(w, which, *shared) for which in ("median", "lo", "hi")}
        rec, tr, mach = vals["median"]
        tot = {k: sum(v) / 1e9 for k, v in vals.items()}
        return AddedTime(seconds=tot["median"], lo=min(tot.values()), hi=max(tot.values()),
                         recompute_s=rec / 1e9, transfer_s=tr / 1e9, machinery_s=mach / 1e9)

    @staticmethod
    def _steps_rerun(w: Work, step: np.ndarray, warm: np.ndarray) -> int:
        """Warm steps that re-run anything: each pays the checkpointed step's own cost once
        (Note [A checkpointed step's own cost])."""
        re = ((w.kind == Kind.CHECKPOINT) | (w.kind == Kind.SELECTIVE)) & (w.saves > 0)
        return len(np.unique(step[warm & re]))

    def per_step(self, r: Replayed) -> tuple[float, float, float]:
        """(median, lo, hi) seconds of `price(r)` that are the checkpointed step's own cost,
        paid once per step however many regions re-run: what plan's per-block costs leave
        out and add back once (Note [Blocks add up], memledger/replay/plan.py)."""
        w = r.work
        if w is None or not len(w.kind):
            return 0.0, 0.0, 0.0
        step = self.prep.scope_step[w.scope_row]
        warm_steps = np.unique(step)
        warm_steps = warm_steps[warm_steps > 1] if (warm_steps > 1).any() else warm_steps
        share = self._steps_rerun(w, step, np.isin(step, warm_steps)) / max(len(warm_steps), 1)
        return tuple(share * self.consts[k].ckpt_step / 1e9 for k in ("median", "lo", "hi"))

    def _price(self, w: Work, which: str, warm: np.ndarray, n_warm: int, n_re: int,
               share: np.ndarray, kept: np.ndarray,
               kept_ops: np.ndarray) -> tuple[float, float, float]:
        c = self.consts[which]
        re = (w.kind == Kind.CHECKPOINT) | (w.kind == Kind.SELECTIVE)
        sel = w.kind == Kind.SELECTIVE
        fwd = self.fwd[which][w.scope_row]
        # per call, never below 0: a call cannot re-run for less than nothing
        recompute = np.maximum(0.0, np.where(re, c.factor * fwd * share, 0.0) - kept)
        machinery = np.where(re, c.ckpt_call + w.saves * c.ckpt_save, 0.0)
        machinery += np.where(sel, np.maximum(0.0, c.sac_call + ((w.ev1 - w.ev0) + (
            w.rerun_end - w.ev0)) * c.sac_op + kept_ops * c.sac_keep), 0.0)
        machinery += np.where(w.kind == Kind.OFFLOAD, w.saves * c.pack, 0.0)
        off_warm = warm[w.off_call] if len(w.off_call) else np.zeros(0, dtype=bool)
        nb = w.off_bytes[off_warm].astype(np.float64)
        transfer = float((c.file + nb * c.per_byte).sum())
        return (float(recompute[warm].sum()) / n_warm, transfer / n_warm,
                (float(machinery[warm].sum()) + n_re * c.ckpt_step) / n_warm)
