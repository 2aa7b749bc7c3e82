"""The ledger's untraced timings, laid onto its forward calls and events. No torch.

The allocator pass writes one `timing` record (memledger/trace/timing.py): the thread CPU
time of every module forward call over several untraced steps, and of every op over one.
Here they are matched to the traced ledger:

- a module call is matched by (path, occurrence within its step): the k-th call of
  `blocks.0.mlp` in a traced step is the k-th in every timed step (the same script, warm
  steps). Its cost is the median over the timed steps, with the 10th and 90th percentiles
  as its band.
- ops are matched by name along each traced step: an event that created a storage names
  its op (`addmm`), and the timed step's ops are walked in order to the next op of that
  name; the unnamed events between two matches (views, in-place ops) take the timed ops
  between them in order. The traced step has extra unnamed events the plain run does not
  have (autograd detaches each tensor it hands to a saved-tensor hook: 77 `detach` per
  tiny-GPT step), which get 0 ns. A step where a named op cannot be found (step 1 with
  its lazy optimizer state, a diverged run) keeps NaN from there on.

Example (tiny GPT, one thread): `blocks.0` is called once per step; timed over 7 steps at
1.41, 1.39, 1.44, 1.40, 1.52, 1.40, 1.41 ms: median 1.41 ms, band 1.39-1.47 ms, the same
for `blocks.0` in traced steps 1, 2 and 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class Timings:
    call_ns: np.ndarray     # float per forward scope: untraced median (NaN: unknown)
    call_lo: np.ndarray     # float: 10th percentile over timed steps
    call_hi: np.ndarray     # float: 90th percentile
    op_ns: np.ndarray       # float per event: untraced op time (NaN: unknown)
    op_kind: np.ndarray     # object per event: overload packet ("" unknown)
    source: str             # "untraced" | "" (no timing record)
    sac_op_ns: tuple = ()   # (median, lo, hi) of the model's own selective cost per op
    step_ns: float = 0.0    # median untraced step time on the timing clock (0: unknown)
    factor: tuple = ()      # (median, lo, hi) of the model's own recompute factor
    region_ns: tuple = ()   # (median, lo, hi): what a checkpointed region adds besides its
                            # re-run, measured in this model's own step (trace/timing.py)
    probe_saves: float = 0.0   # saves per region in that measurement
    step_ckpt_ns: tuple = ()   # (median, lo, hi): what a step with anything checkpointed
                               # pays once (Note [A checkpointed step's own cost])
    probe_paths: tuple = ()    # the regions the recompute probe checkpointed, when it ran
                               # early stop on: its factor is then over their re-run share
    selective: dict = None  # selective_probe: {"added": (median, lo, hi) ns per region over
                            # checkpoint, "paths", "save_ops"} (Note [Selective probe in
                            # context])
    offload_failed: str = ""   # why the offload probe could not run (a full disk), if so
    offload: dict = None    # offload_probe: {"added": (median, lo, hi) ns, "storages",
                            # "bytes", "saves", "where"} (Note [Offload probe in context])

    @classmethod
    def empty(cls, n_scopes: int, n_events: int) -> "Timings":
        nan = np.full(n_scopes, np.nan)
        return cls(nan, nan.copy(), nan.copy(), np.full(n_events, np.nan),
                   np.full(n_events, "", dtype=object), "")


def band(samples) -> tuple[float, float, float]:
    """(median, 10th, 90th percentile) of repeated readings: one preempted reading must not
    set the band."""
    return (float(np.median(samples)), float(np.percentile(samples, 10)),
            float(np.percentile(samples, 90)))


def bands(groups: dict) -> dict:
    """`band` of each group of readings, the groups of one length in one numpy call (a
    48-block GPT has 634 module calls a step: one call each took 40 ms)."""
    by_len: dict[int, list] = {}
    for k, v in groups.items():
        by_len.setdefault(len(v), []).append(k)
    out = {}
    for keys in by_len.values():
        a = np.array([groups[k] for k in keys], dtype=np.float64)
        med = np.median(a, axis=1)
        lo, hi = np.percentile(a, [10, 90], axis=1)
        out.update(zip(keys, zip(med.tolist(), lo.tolist(), hi.tolist())))
    return out


def timing_record(led) -> dict | None:
    """The ledger's last `timing` record for its own device (None: none)."""
    timing = [r for r in led.extra.get("timing", []) if r.get("device", led.device) == led.device]
    return timing[-1] if timing else None


def match_timings(record: dict | None, scopes: pd.DataFrame, steps: pd.DataFrame,
                  n_events: int, made_ev: np.ndarray | None = None,
                  made_op: np.ndarray | None = None) -> Timings:
    """Lay a `timing` record onto `scopes` (forward scopes, in ledger order) and events."""
    out = Timings.empty(len(scopes), n_events)
    if not record or not record.get("modules"):
        return out
    out.source = "untraced"
    sac = record.get("sac_op_ns") or []
    if sac:
        out.sac_op_ns = (float(np.median(sac)), float(np.min(sac)), float(np.max(sac)))
    fac = record.get("recompute_factor") or []
    if fac:
        out.factor = (float(np.median(fac)), float(np.min(fac)), float(np.max(fac)))
    reg = record.get("ckpt_region_ns") or []
    if reg:
        # 10th and 90th percentiles: one preempted repetition (7 ms among 1 ms ones, seen
        # at load 5) must not set the band
        out.region_ns = band(reg)
        out.probe_saves = float(record.get("ckpt_probe_saves") or 0.0)
        if record.get("ckpt_step_ns"):
            out.step_ckpt_ns = band(record["ckpt_step_ns"])
        if record.get("ckpt_early_stop"):
            out.probe_paths = tuple(str(x) for x in record.get("ckpt_probe_paths") or ())
    sel = record.get("selective_probe") or {}
    if sel.get("region_ns") and sel.get("paths"):
        a = sel["region_ns"]
        out.selective = {"added": band(a),
                         "paths": [str(x) for x in sel["paths"]],
                         "save_ops": [str(x) for x in sel.get("save_ops", [])]}
    off = record.get("offload_probe") or {}
    out.offload_failed = str(off.get("failed", ""))
    if off.get("added_ns") and off.get("storages"):
        a = off["added_ns"]
        out.offload = {"added": band(a),
                       **{k: off.get(k, 0) for k in ("storages", "bytes", "saves")},
                       "where": str(off.get("where", ""))}
    if record.get("step_ns"):
        out.step_ns = float(np.median(record["step_ns"]))
    per_key: dict[tuple[str, int], list[int]] = {}
    for step in record["modules"]:
        seen: dict[str, int] = {}
        for path, ns in step:
            k = seen.get(path, 0)
            seen[path] = k + 1
            per_key.setdefault((path, k), []).append(ns)
    stats = bands(per_key)
    if len(scopes):
        order = scopes.assign(_i=np.arange(len(scopes))).sort_values(["step", "ev0"],
                                                                     kind="stable")
        occ = order.groupby(["step", "mod"]).cumcount().to_numpy()
        for i, mod, k in zip(order["_i"].to_numpy(), order["mod"].astype(str), occ):
            s = stats.get((mod, int(k)))
            if s is not None:
                out.call_ns[i], out.call_lo[i], out.call_hi[i] = s
    ops = record.get("ops") or []
    if ops and len(steps) and made_ev is not None and len(made_ev):
        ev, first = np.unique(made_ev, return_index=True)
        names = np.asarray(made_op, dtype=object)[first]
        ends = steps["ev"].to_numpy(dtype=np.int64)
        starts = np.concatenate([[0], ends[:-1] + 1])
        for a, b in zip(starts, ends + 1):
            lo, hi = np.searchsorted(ev, [a, b])
            _walk(ops, int(a), int(b), ev[lo:hi], names[lo:hi], out)
    return out


def _walk(ops: list, a: int, b: int, anchors: np.ndarray, names: np.ndarray,
          out: Timings) -> None:
    """Match the timed ops to events [a, b) of one traced step; see the module docstring."""
    j, prev = 0, a
    for e, name in zip(anchors.tolist(), names.tolist()):
        k = j
        while k < len(ops) and ops[k][0] != name:
            k += 1
        if k == len(ops):
            return                                    # diverged: the rest stays NaN
        gap = list(range(prev, e))
        for i, ev in enumerate(gap):                  # unnamed events take the ops between
            out.op_ns[ev] = float(ops[j + i][1]) if j + i < k else 0.0
            out.op_kind[ev] = ops[j + i][0] if j + i < k else ""
        if k - j > len(gap) and gap:                  # more ops than events: the rest on the last
            out.op_ns[gap[-1]] += float(sum(o[1] for o in ops[j + len(gap):k]))
        out.op_ns[e], out.op_kind[e] = float(ops[k][1]), name
        j, prev = k + 1, e + 1
    for i, ev in enumerate(range(prev, b)):
        out.op_ns[ev] = float(ops[j + i][1]) if j + i < len(ops) else 0.0
        out.op_kind[ev] = ops[j + i][0] if j + i < len(ops) else ""
