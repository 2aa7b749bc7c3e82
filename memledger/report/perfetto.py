"""Perfetto / Chrome trace JSON: open in ui.perfetto.dev or chrome://tracing.

# Note [Events as trace time]
A ledger counts events (ops), not microseconds: the op times it has are per module scope,
not per op. The export puts event `e` at `ts = e` (the trace format's unit is 1 µs), so the
time axis of the viewer reads as "event index": 1 µs on the axis is one event, "1 ms" is
1,000 events. No `displayTimeUnit` is declared (it would claim a unit of real time that
the axis does not have). Tracks (one process, "memledger"):
  - a counter track per category, `live <category>`: a sample wherever that category's live
    bytes change (a counter holds its value until the next sample, so the value at the peak
    is the last sample at or before the peak's ts);
  - thread 1 "phases": one slice per phase run (forward, backward, optimizer, ...);
  - thread 2 "modules": module forward scopes as nested slices (they nest by construction:
    a parent's scope contains its children's);
  - thread 3 "steps": one slice per optimizer step;
  - thread 4 "modules (backward)": runs of backward events attributed to one module (the
    module whose saved tensors backward unpacked most recently, as the ledger records it;
    see Ledger's known limitations), one slice per run of storages made in backward;
  - the peak as a global instant event with the category breakdown in its args.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from memledger.outputs import open_atomic
from memledger.ledger.model import Ledger
from memledger.report.html_data import phase_spans

PID = 1
TID_PHASES, TID_MODULES, TID_STEPS, TID_BACKWARD = 1, 2, 3, 4


def _meta(name: str, tid: int | None, value: str) -> dict[str, Any]:
    ev = {"ph": "M", "pid": PID, "name": name, "args": {"name": value}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def trace_events(led: Ledger) -> list[dict[str, Any]]:
    """The `traceEvents` list (see Note [Events as trace time])."""
    out: list[dict[str, Any]] = [
        _meta("process_name", None, f"memledger {led.header.get('script', '')}".strip()),
        _meta("thread_name", TID_PHASES, "phases"),
        _meta("thread_name", TID_MODULES, "modules"),
        _meta("thread_name", TID_STEPS, "steps"),
        _meta("thread_name", TID_BACKWARD, "modules (backward)"),
    ]
    cats = led.curve_by_category()
    for c in cats.columns:
        v = cats[c].to_numpy(dtype=np.int64)
        if not v.any():
            continue
        change = np.flatnonzero(np.diff(v, prepend=v[0] - 1))   # first event, then changes
        out.extend({"ph": "C", "pid": PID, "name": f"live {c}", "ts": int(e),
                    "args": {"bytes": int(v[e])}} for e in change)
    for ev0, ev1, phase, step in phase_spans(led):
        out.append({"ph": "X", "pid": PID, "tid": TID_PHASES, "name": phase, "cat": "phase",
                    "ts": ev0, "dur": ev1 - ev0, "args": {"step": step}})
    # Parents first at equal start, so viewers nest children inside them.
    scopes = led.scopes.assign(span=led.scopes["ev1"] - led.scopes["ev0"]).sort_values(
        ["ev0", "span"], ascending=[True, False], kind="stable")
    for s in scopes.itertuples(index=False):
        out.append({"ph": "X", "pid": PID, "tid": TID_MODULES, "name": str(s.mod),
                    "cat": "module", "ts": int(s.ev0), "dur": max(int(s.ev1) - int(s.ev0), 0),
                    "args": {"step": int(s.step), "phase": str(s.ph),
                             "wall_ns": int(s.ns) if s.ns == s.ns else 0}})
    out.extend(_backward_slices(led))
    prev = 0
    for s in led.steps.itertuples(index=False):
        end = int(s.ev) + 1                              # step ended after event s.ev
        out.append({"ph": "X", "pid": PID, "tid": TID_STEPS, "name": f"step {int(s.step)}",
                    "cat": "step", "ts": prev, "dur": end - prev})
        prev = end
    pk = led.peak()
    out.append({"ph": "i", "s": "g", "pid": PID, "tid": TID_PHASES, "name": "peak",
                "ts": pk.event, "args": {"bytes": pk.bytes, "step": pk.step, "phase": pk.phase,
                                         "op": pk.op, "module": pk.module,
                                         # as `show` has it: with `workspace`, the
                                         # allocator bytes no storage explains
                                         "by_category": led.at_peak(),
                                         **({"allocator_bytes": int(
                                             led.measured["peak_bytes"])}
                                            if led.measured else {})}})
    return out


def _backward_slices(led: Ledger) -> list[dict[str, Any]]:
    """Backward by module: consecutive storages made in backward with one module form a
    slice from the first one's event to the next run's first event (within the step).
    Example: grads made at events 900, 903 by blocks.1.mlp and 910 by blocks.1.attn give
    slices blocks.1.mlp [900, 910) and blocks.1.attn [910, 911)."""
    st = led.storages
    bw = st[(st["phase"] == "backward") & (st["module"] != "")].sort_values("created",
                                                                             kind="stable")
    out: list[dict[str, Any]] = []
    runs: list[list] = []   # [module, ev0, last ev, step]
    for mod, ev, step in zip(bw["module"], bw["created"], bw["step"]):
        if runs and runs[-1][0] == mod and runs[-1][3] == step:
            runs[-1][2] = int(ev)
        else:
            runs.append([str(mod), int(ev), int(ev), int(step)])
    for i, (mod, ev0, last, step) in enumerate(runs):
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        end = nxt[1] if nxt is not None and nxt[3] == step else last + 1
        out.append({"ph": "X", "pid": PID, "tid": TID_BACKWARD, "name": mod,
                    "cat": "module,backward", "ts": ev0, "dur": max(end - ev0, 1),
                    "args": {"step": step, "phase": "backward"}})
    return out


def write_perfetto(led: Ledger, out: str | Path) -> Path:
    out = Path(out)
    doc = {"traceEvents": trace_events(led),
           "otherData": {"source": "memledger", "time_axis": "event index (1 event = 1 us)",
                         "device": led.device}}
    with open_atomic(out, "Perfetto export") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    return out
