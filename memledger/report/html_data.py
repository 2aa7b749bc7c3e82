"""What the HTML report draws, as one JSON-able dict (the page's only data).

Kept apart from the page itself so that tests check the numbers without a browser, and the
browser test checks that the page shows those same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memledger.ledger.model import Ledger
from memledger.report.defaults import MAX_POINTS
from memledger.report.downsample import downsample
from memledger.report.palette import CATEGORY_COLORS, PHASE_STYLES
from memledger.report.terminal import summary_notes
from memledger.units import format_bytes

TOP_TENSORS = 20    # rows in the peak panel
MAX_TENSORS = 20_000   # storages sent to the page for "live at the clicked event", largest first


def phase_spans(led: Ledger) -> list[list[Any]]:
    """[[ev0, ev1, phase, step], ...]: maximal runs of one phase, ev1 exclusive."""
    ph = led.phases
    if not len(ph):
        return [[0, led.n_events, "setup", 1]]
    evs = ph["ev"].to_numpy().tolist() + [led.n_events]
    spans: list[list[Any]] = []
    for i, (phase, step) in enumerate(zip(ph["phase"], ph["step"])):
        ev0, ev1 = int(evs[i]), int(evs[i + 1])
        if ev1 <= ev0:
            continue
        if spans and spans[-1][2] == phase and spans[-1][3] == int(step):
            spans[-1][1] = ev1
        else:
            spans.append([ev0, ev1, str(phase), int(step)])
    return spans


def _rows(df, cols: list[str]) -> list[dict[str, Any]]:
    out = []
    for r in df[cols].itertuples(index=False):
        d = {c: (int(v) if isinstance(v, (int, np.integer)) else str(v)) for c, v in zip(cols, r)}
        d["human"] = format_bytes(d["bytes"])
        out.append(d)
    return out


def tensor_columns(led: Ledger, limit: int = MAX_TENSORS) -> dict[str, Any]:
    """The storages the page lists when a point is clicked, as columns (compact JSON):
    created, freed (exclusive), bytes, category, module, shape, dtype, what (name or op).
    The `limit` largest are kept; `smallest_bytes` says below which size rows are missing."""
    st = led.on_device().sort_values("bytes", ascending=False, kind="stable")
    kept = led.labelled(st.head(limit))
    what = [n if n else o for n, o in zip(kept["name"].astype(str), kept["op"].astype(str))]
    return {"created": kept["created"].astype(int).tolist(),
            "freed": kept["freed"].astype(int).tolist(),
            "bytes": kept["bytes"].astype(int).tolist(),
            "category": kept["category"].astype(str).tolist(),
            "module": kept["module"].astype(str).tolist(),
            "shape": kept["shape"].astype(str).tolist(),
            "dtype": kept["dtype"].astype(str).tolist(), "what": what,
            "complete": len(kept) == len(st),
            "smallest_bytes": int(kept["bytes"].min()) if len(kept) else 0}


def where_at(led: Ledger, events: np.ndarray) -> tuple[list[str], list[str]]:
    """For each event: the op that made the largest storage there ('' when it made none) and
    the innermost module forward scope running (else the module recorded on that storage,
    which is how backward events are attributed)."""
    st = led.on_device()
    made = st.sort_values("bytes", ascending=False, kind="stable").drop_duplicates("created")
    by_ev = dict(zip(made["created"].astype(int), zip(made["op"].astype(str),
                                                      made["module"].astype(str))))
    sc = led.scopes
    ev0, ev1 = sc["ev0"].to_numpy(), sc["ev1"].to_numpy()
    span = ev1 - ev0
    mods = sc["mod"].astype(str).to_numpy()
    ops, modules = [], []
    for e in events.tolist():
        op, mod = by_ev.get(int(e), ("", ""))
        inside = np.flatnonzero((ev0 <= e) & (e < ev1) & (mods != ""))
        if len(inside):
            mod = str(mods[inside[np.argmin(span[inside])]])
        ops.append(op.removesuffix(".default"))
        modules.append(mod)
    return ops, [str(m) for m in led.module_labels(modules, events)]


def report_data(led: Ledger, source: str = "", max_points: int = MAX_POINTS) -> dict[str, Any]:
    """Everything the page shows. Byte counts are exact ints; `human` fields are for reading."""
    s = led.summary(top=TOP_TENSORS)
    by_cat = led.curve_by_category()
    drawn = [c for c in by_cat.columns if by_cat[c].to_numpy().any()]
    keep, values = downsample(by_cat[drawn], max_points)
    pk = s.peak
    live = led.labelled(led.live_at(pk.event).head(TOP_TENSORS))
    idle = led.idle_offenders(12)          # the same tensor of every step folded, as `show`
    meas = led.measured
    x_op, x_module = where_at(led, keep)
    return {
        "title": source or "memledger report",
        "device": s.device,
        "steps_traced": s.steps_traced,
        "complete": s.complete,
        "n_events": int(led.n_events),
        "categories": drawn,
        "colors": {c: CATEGORY_COLORS[c][0] for c in CATEGORY_COLORS},
        "phase_colors": {p: v[0] for p, v in PHASE_STYLES.items()},
        "x": keep.tolist(),
        "series": {c: values[c].to_numpy().tolist() for c in drawn},
        "phases": phase_spans(led),
        "step_ends": [int(e) for e in led.steps["ev"]],
        "peak": {"event": pk.event, "bytes": pk.bytes, "human": format_bytes(pk.bytes),
                 "step": pk.step, "phase": pk.phase, "op": pk.op, "module": pk.module},
        "measured": None if meas is None else {
            "peak_bytes": int(meas["peak_bytes"]), "source": str(meas["source"]),
            "human": format_bytes(int(meas["peak_bytes"]))},
        "at_peak": {c: int(b) for c, b in s.at_peak.items()},
        "top": _rows(live, ["bytes", "category", "module", "shape", "dtype", "op", "name",
                            "created", "last_use", "freed"]),
        "activations": {"saved_bytes": s.activations.saved_bytes,
                        "by_module": [[m, int(b)] for m, b in s.activations.by_module.items()]},
        "idle": _rows(idle, ["bytes", "category", "module", "shape", "op", "name", "count",
                             "idle_events", "idle_byte_events"]),
        "by_phase_peak": s.by_phase_peak,
        "x_op": x_op, "x_module": x_module,       # under the cursor, per drawn point
        "tensors": tensor_columns(led),          # live at any clicked event
        "notes": [t.plain for t in summary_notes(s)],   # as `show` prints them
    }
