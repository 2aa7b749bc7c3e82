"""The ledger in memory: one row per storage plus the event stream's marks, and the queries.

Every query answers from two numpy passes at most (bincount + cumsum), so a ledger of a
million events is read in well under a second. No torch import.

# Note [Storage identity and views]
A row is an untyped *storage*, never a tensor: `x`, `x.view(...)`, `x.t()` and the pieces
of `x.split(...)` share one storage and one row, so bytes never double count. Example:
qkv = x @ W (B=2, T=8, 3C=96, fp32) is one storage of 2*8*96*4 = 6144 bytes; q, k, v from
`qkv.split(32, dim=2)` add no row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from memledger.errors import LedgerFormatError
from memledger.ledger.carried import carried_names, carried_until
from memledger.ledger.held_roles import (dropped_spans, held_as_items, kept_across_a_step,
                                         optimizer_copies, past_gradients)
from memledger.ledger.names import model_forward
from memledger.ledger.reader import group_records, read_records
from memledger.ledger.schema import (CATEGORIES, GENERATOR_STATE_OPS, PHASES, ROLE_PRIORITY,
                                     WRAPPED_NUMBER_OP)
from memledger.ledger.step_marks import StepMarks, step_marks
from memledger.ledger.writer import Record

STORAGE_COLUMNS = [
    "sid", "bytes", "device", "dtype", "shape", "op", "module", "phase", "step",
    "created", "last_use", "freed", "category", "name", "saved_module", "saved_ev",
    "unpack_ev", "pre", "saved_last_ev", "unpack_first_ev", "saves", "shard", "unpack_end_ev",
    "unpacks", "unpack_pass1_end_ev", "unpack_pass2_ev", "unpack_rel_ev", "external",
    "gc_freed", "garbage_at_end",
    # until event `cat_until` (-1: never) the storage read `cat_before`, named `name_before`
    # and made in `module_before` (Note [A copy the optimizer keeps, then the parameter] in
    # ledger/held_roles.py): `live_at` and `curve_by_category` read them
    "cat_until", "cat_before", "name_before", "module_before",
]


@dataclass
class Ledger:
    """A traced run. Build with `Ledger.load(path)` or `Ledger.from_records(records)`.

    Example usage::

        led = Ledger.load("gpt.ledger")
        led.peak().bytes, led.at_peak()["activation"], led.live_at(1234)

    Known limitations: the module of a backward event is the module whose saved tensors
    backward unpacked most recently (autograd does not say which module a node belongs to).
    """

    header: dict[str, Any]
    storages: pd.DataFrame          # one row per storage, columns STORAGE_COLUMNS, index sid
    phases: pd.DataFrame            # ev, phase, step: the phase from `ev` on
    scopes: pd.DataFrame            # mod, ev0, ev1, ph, step, ns: module forward scopes
    steps: pd.DataFrame             # step, ev, ns: optimizer step `step` ended after event ev
    n_events: int
    measurements: list[dict[str, Any]] = field(default_factory=list)  # allocator, per device
    end: dict[str, Any] | None = None
    truncated: bool = False
    extra: dict[str, list[Record]] = field(default_factory=dict)   # kinds queries don't use
    # every save (sid, ev, mod) and unpack (sid, ev, end) record, as read: the replay
    # matches each save to the unpack that reads it back (replay/prepared.py `_packs`)
    saves: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["sid", "ev", "mod"]))
    unpacks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["sid", "ev", "end"]))
    # sids no free record ends: still held when the trace closed (Note [Resident at the end])
    held_at_close: frozenset = frozenset()

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, data: bytes | None = None) -> "Ledger":
        """The ledger at `path` (`data`: its bytes, when the caller read them already)."""
        records, truncated = read_records(path, data)
        led = cls.from_records(records, source=repr(str(path)))
        led.truncated = truncated
        return led

    @classmethod
    def from_records(cls, records: list[Record], source: str = "ledger") -> "Ledger":
        by_kind = group_records(records, source)
        header = by_kind.pop("header", [{}])[0]
        storages, saves, unpacks = _storages(by_kind)
        phases = pd.DataFrame(by_kind.pop("phase", []), columns=["ev", "ph", "step"]).rename(
            columns={"ph": "phase"})
        scopes = pd.DataFrame(by_kind.pop("scope", []),
                              columns=["mod", "ev0", "ev1", "ph", "step", "ns", "cls", "nograd",
                                       "stats", "unowned"])
        scopes["cls"] = scopes["cls"].fillna("").astype(str)  # class name (newer ledgers)
        # called without gradients (an evaluation): newer ledgers write it, only when true
        # (`== True`, not fillna(False): an all-missing column is float64, and pandas warns
        # about a bool fill there, which fails projects that run pytest with -W error)
        scopes["nograd"] = (scopes["nograd"] == True).to_numpy(dtype=bool)  # noqa: E712
        # a module no top-level module holds, made in a forward (Note [Modules the model
        # makes in its forward], trace/collector.py): newer ledgers, only when true
        scopes["unowned"] = (scopes["unowned"] == True).to_numpy(dtype=bool)  # noqa: E712
        # a training BatchNorm's running statistics (newer ledgers, only where non-zero)
        scopes["stats"] = scopes["stats"].fillna(0).to_numpy(dtype=np.int64)
        steps = pd.DataFrame(by_kind.pop("step", []), columns=["step", "ev", "ns"])
        ends = by_kind.pop("end", [])
        measured = by_kind.pop("measured", [])
        for m in measured:   # a budget is checked against it: a bad one must not pass CI
            peak = m.get("peak_bytes")
            if isinstance(peak, bool) or not isinstance(peak, int) or peak < 0:
                raise LedgerFormatError(f"{source}: its allocator measurement has peak_bytes "
                                        f"{peak!r}, not a byte count; the ledger is corrupt")
        if ends:  # the writer's own count of events
            last_ev = int(ends[-1]["ev"]) - 1
        elif len(storages):  # cut short: the last event any record mentions
            last_ev = max(int(storages["created"].max()), int(storages["last_use"].max()),
                          int(storages["freed"].max()) - 1)
        else:
            last_ev = 0
        n_events = last_ev + 1
        _check_events(storages, n_events, len(records), source)
        freed = storages["freed"].to_numpy()
        storages["freed"] = np.where(freed < 0, n_events, freed)  # still live: until the end
        return cls(
            header=header, storages=storages, phases=phases, scopes=scopes, steps=steps,
            n_events=max(n_events, 1), measurements=measured,
            end=ends[-1] if ends else None, extra=by_kind, saves=saves, unpacks=unpacks,
            held_at_close=frozenset(storages["sid"].to_numpy()[freed < 0].tolist()),
        )

    # ---- basic facts --------------------------------------------------------------------
    @property
    def device(self) -> str:
        """Where the model lives: the device holding most parameter bytes (else most bytes)."""
        if "_device" not in self.__dict__:
            st = self.storages
            params = st[st["category"] == "parameter"]
            rows = params if len(params) else st
            by_dev = rows.groupby("device")["bytes"].sum()
            self.__dict__["_device"] = str(by_dev.idxmax()) if len(by_dev) else "cpu"
        return self.__dict__["_device"]

    @property
    def measured(self) -> dict[str, Any] | None:
        """The allocator's independent measurement for the ledger's device, if any."""
        mine = [m for m in self.measurements if m.get("device", self.device) == self.device]
        return mine[-1] if mine else None

    @property
    def complete(self) -> bool:
        """The run ended cleanly and the file holds all it wrote (a cut last line is not)."""
        return self.end is not None and self.end.get("status") == "ok" and not self.truncated

    @property
    def steps_traced(self) -> int:
        return int(len(self.steps))

    def on_device(self, device: str | None = None) -> pd.DataFrame:
        """Storages of one device (default: the ledger's device) that its allocator holds:
        memory torch did not allocate (`torch.from_numpy`) is left out (Note [Memory
        torch's allocator did not hand out] in trace/external.py)."""
        dev = device or self.device
        st = self.storages
        return st[(st["device"] == dev) & ~st["external"]]

    # ---- curves -------------------------------------------------------------------------
    def curve(self, rows: pd.DataFrame | None = None) -> np.ndarray:
        """Live bytes after each event (int64, length n_events) of `rows` (default: device)."""
        rows = self.on_device() if rows is None else rows
        n = self.n_events
        size = rows["bytes"].to_numpy(dtype=np.float64)
        delta = np.bincount(rows["created"].to_numpy(), weights=size, minlength=n + 1)
        delta -= np.bincount(rows["freed"].to_numpy(), weights=size, minlength=n + 1)
        # float64 sums are exact below 2**53 bytes (8 PiB)
        return np.rint(np.cumsum(delta[:n])).astype(np.int64)

    def kernel_scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """`_kernel_scratch()`, read once per Ledger (a ledger is not changed after it is
        made; the summary, the curve and the replay each ask): read-only arrays."""
        memo = self.__dict__.get("_scratch_memo")
        if memo is None:
            memo = self._kernel_scratch()
            for a in memo:
                a.flags.writeable = False
            self.__dict__["_scratch_memo"] = memo
        return memo

    def _kernel_scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """(event, bytes) of kernel scratch on the ledger's device: the k-th call of an op in
        the allocator pass is the k-th event that op created storages at in the ledger
        (memledger/trace/allocator.py, Note [Kernel scratch]). An op whose call counts differ
        is skipped (the runs diverged). The outputs of an op a checkpoint re-run stopped in
        (`stopped` records) are taken off its scratch: the ledger holds them already.
        The Python numbers ops were handed as tensors are added at their ops (Note [Wrapped
        scalars] in trace/scalars.py), and so are the copies ops made of mixed-dtype inputs
        (Note [Inputs an op casts]), taken off a matched op's scratch, which holds them."""
        none = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        recs = [r for r in self.extra.get("opscratch", [])
                if r.get("device", "cpu") == self.device]
        wrapped = self._wrapped_scalars()
        if not recs:
            return wrapped if len(wrapped[0]) else none
        # where the allocator matched the op's calls, its scratch holds the input casts
        # (Note [Inputs an op casts] in trace/scalars.py) and the wrapped numbers' casts
        # (Note [Small scratch] in trace/allocator.py), which `wrapped` counts already
        numbers_at: dict[int, int] = {}
        for e, b in zip(*(x.tolist() for x in wrapped)):
            numbers_at[e] = numbers_at.get(e, 0) + b
        st = self.on_device()
        # the events each op created storages at, grouped once: with scratch of any size
        # (Note [Small scratch]) the record names most of the ops a step runs
        code, names = pd.factorize(st["op"].astype(str).str.split(".").str[0])
        code_of = {n: i for i, n in enumerate(names)}
        order = np.argsort(code, kind="stable")
        bounds = np.searchsorted(code[order], np.arange(len(names) + 1))
        created = st["created"].to_numpy(dtype=np.int64)[order]
        # outputs a checkpoint re-run's early stop freed inside their op: the allocator
        # pass measured them as that op's scratch, and they are in the ledger already
        # (Note [The script's own checkpoint], 3, in trace/script_checkpoint.py)
        stopped = self.extra.get("stopped", [])
        ours = [r["sid"] for r in stopped if r["sid"] in st.index]
        taken = st.loc[ours].groupby("created")["bytes"].sum() if ours else None
        evs, sizes = [], []
        bare = recs[-1].get("bare", {})
        inside = recs[-1].get("inside", {})
        idle = self._made_nothing()   # Note [Ops that made nothing, placed] (trace/collector.py)
        seen_ops = set(code_of) | set(idle)
        none_ev = np.zeros(0, dtype=np.int64)
        nested = recs[-1].get("nested", {})
        made_at = None   # {event: {op name: bytes made}}, read where `nested` needs it
        for op, scratch in recs[-1].get("ops", {}).items():
            k = code_of.get(op)
            made = none_ev if k is None else np.unique(created[bounds[k]:bounds[k + 1]])
            hidden = _hidden_calls(inside.get(op, ()), seen_ops)
            placed = None
            places = list(range(len(scratch)))   # matched to events, then read back
            if op in idle:   # Note [Ops that made nothing, placed] (trace/collector.py)
                placed = _calls_placed(places, made, idle[op], set(bare.get(op, ())), hidden)
            if placed is not None:
                ev, per_call = placed
            else:   # a ledger written before `bare` records, or no such event matched
                ev = made
                per_call = _calls_the_ledger_saw(places, len(ev), set(bare.get(op, ())),
                                                 hidden)
            if not len(ev) or per_call is None:
                continue
            own = {int(p): inner for p, inner in nested.get(op, ())}
            if own and made_at is None:
                made_at = _made_at(st)
            b = np.asarray([_scratch_past_calls_before(made_at, int(e), own[p], scratch[p])
                            if p in own else scratch[p]
                            for e, p in zip(ev.tolist(), per_call)], dtype=np.int64)
            if taken is not None:
                b = np.maximum(b - taken.reindex(ev).fillna(0).to_numpy(dtype=np.int64), 0)
            if numbers_at:
                b = np.maximum(b - np.array([numbers_at.get(int(e), 0) for e in ev],
                                            dtype=np.int64), 0)
            evs.append(ev[b > 0])
            sizes.append(b[b > 0])
        evs.append(wrapped[0])
        sizes.append(wrapped[1])
        return np.concatenate(evs), np.concatenate(sizes)

    def _made_nothing(self) -> dict[str, np.ndarray]:
        """{op name as the allocator pass names it: sorted events at which the op made no
        storage and was no view} (`bare` records; Note [Ops that made nothing, placed] in
        trace/collector.py). Empty for ledgers written before them."""
        by_op: dict[str, list] = {}
        for r in self.extra.get("bare", ()):
            by_op.setdefault(str(r["op"]).split(".")[0], []).append(r["ev"])
        return {op: np.unique(np.concatenate([np.asarray(e, dtype=np.int64) for e in evs]))
                for op, evs in by_op.items()}

    def _wrapped_scalars(self) -> tuple[np.ndarray, np.ndarray]:
        """(event, bytes) of the Python numbers ops were handed as 0-dim CPU tensors, with
        their casts (`scalars` records; Note [Wrapped scalars] in trace/scalars.py)."""
        recs = [r for r in self.extra.get("scalars", [])
                if r.get("device", "cpu") == self.device]
        if not recs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        ev = np.concatenate([np.asarray(r["ev"], dtype=np.int64) for r in recs]
                            + [np.asarray(r.get("cev", []), dtype=np.int64) for r in recs])
        b = np.concatenate([np.asarray(r["bytes"], dtype=np.int64) for r in recs]
                           + [np.asarray(r.get("cbytes", []), dtype=np.int64) for r in recs])
        return ev[b > 0], b[b > 0]

    def rewrapped_numbers(self) -> tuple[np.ndarray, np.ndarray]:
        """(event, bytes) per op: the Python numbers torch wrapped before the op for its
        Tensor arguments, which a Python dispatch mode wraps again when it calls the op
        (`wev`, `wbytes` of the `scalars` records; Note [Numbers wrapped again under a
        dispatch mode] in trace/scalars.py). Empty for ledgers written before them."""
        recs = [r for r in self.extra.get("scalars", [])
                if r.get("device", "cpu") == self.device and r.get("wev")]
        if not recs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return (np.concatenate([np.asarray(r["wev"], dtype=np.int64) for r in recs]),
                np.concatenate([np.asarray(r["wbytes"], dtype=np.int64) for r in recs]))

    def curve_with_scratch(self) -> np.ndarray:
        """`curve()` with the kernel scratch the allocator pass measured per op added where
        the op ran (what replay starts from, and what `show` compares with the allocator)."""
        curve = self.curve()
        ev, b = self.kernel_scratch()
        if len(ev) and len(curve):
            curve = curve.copy()
            np.add.at(curve, np.minimum(ev, len(curve) - 1), b)
        return curve

    def peak_with_scratch(self) -> int:
        """The ledger's peak with the kernel scratch the allocator pass measured per op."""
        curve = self.curve_with_scratch()
        return int(curve.max()) if len(curve) else 0

    def curve_by_category(self) -> pd.DataFrame:
        """Live bytes per category after each event: one column per category."""
        rows = self.on_device()
        if "cat_until" in rows and (early := (rows["cat_until"] > rows["created"])).any():
            # Note [A copy the optimizer keeps, then the parameter]: its earlier category
            # until `cat_until`, its own from there
            before = rows[early].assign(freed=rows.loc[early, "cat_until"],
                                        category=rows.loc[early, "cat_before"])
            after = rows[early].assign(created=rows.loc[early, "cat_until"])
            rows = pd.concat([rows[~early], before, after])
        spans = self.category_spans()
        if len(spans) and len(sp := spans[spans["sid"].isin(rows["sid"])]):
            # Note [A gradient dropped from .grad, then put back]: the span's category in,
            # the one it would read there out
            nb = self.storages.loc[sp["sid"], "bytes"].to_numpy(dtype=np.int64)
            span = pd.DataFrame({"created": sp["ev0"].to_numpy(), "freed": sp["ev1"].to_numpy()})
            rows = pd.concat([rows, span.assign(bytes=nb, category=sp["cat"].to_numpy()),
                              span.assign(bytes=-nb, category=sp["was"].to_numpy())])
        return pd.DataFrame(
            {c: self.curve(rows[rows["category"] == c]) for c in CATEGORIES if c != "workspace"}
        )

    def phase_of_events(self) -> tuple[np.ndarray, np.ndarray]:
        """(phase name, step) of every event, from the phase marks."""
        phase, step, _ = self._phases_of_events(self.phases["phase"].to_numpy(dtype=object)
                                                if len(self.phases) else None)
        return phase, step

    def reported_phase_of_events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(phase name, step, in a pass outside a step) of every event as reports name them:
        a backward pass outside the training step takes the phase it began in (Note [A
        backward pass outside the step])."""
        if not len(self.phases):
            return self._phases_of_events(None)
        names, outside = self._passes_outside_steps()
        return self._phases_of_events(names, outside)

    def _phases_of_events(self, names: np.ndarray | None, outside: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self.n_events
        if names is None:
            return np.full(n, "setup", dtype=object), np.ones(n, dtype=np.int64), \
                np.zeros(n, dtype=bool)
        evs = self.phases["ev"].to_numpy()
        idx = np.searchsorted(evs, np.arange(n), side="right") - 1
        st = self.phases["step"].to_numpy()
        at = np.maximum(idx, 0)
        phase = np.where(idx >= 0, names[at], "setup")
        step = np.where(idx >= 0, st[at], 1)
        out = (idx >= 0) & outside[at] if outside is not None else np.zeros(n, dtype=bool)
        return phase, step, out

    # Note [A backward pass outside the step]
    # The phases say where in the training step an event happened (schema.py `Phase`), and
    # a backward pass is "backward" wherever it runs (the autograd engine's entry points
    # mark it: design.md). flow_matching's `ODESolver.compute_likelihood`, run in an
    # evaluation between steps, takes `autograd.grad` of the divergence eight times a step
    # (tests/clients/train_flow_matching.py --model tf --eval-every 1 --likelihood
    # --scheduler cosine, 2 steps): those passes made the run's peak, and `show` read
    # "Peak 302.3 KiB at step 2 · backward · mm in blocks.1.ff.2", `by_phase_peak`
    # {"backward": 309,552}, where the step's own backward peaked at 301,904 B: a user
    # reads the training backward, which the script ran, but not there. A pass is the
    # step's when it begins inside the step (in its forward or loss: a gradient penalty,
    # a Jacobian, the loss's `backward()`) or when an optimizer step follows it before the
    # model's next forward (an LR finder's or pyro's passes, begun in setup or between
    # steps because the model ran inside a parameterless module); one begun in setup or
    # between steps (`other`) that no optimizer step follows (an evaluation's
    # `autograd.grad`, a probe, a warm-up whose gradients are zeroed) is outside the step,
    # and reports (`show`'s peak and peak by phase, predict's "peak at", `check`'s phase
    # limits, the timeline's strip) name its events by the phase it began in, saying at
    # the peak that it is a backward pass. A ledger with no optimizer phase (`--steps-by
    # forward`, updates by hand) has no step to tell them from: none moves. The event
    # stream keeps "backward": the replay's mechanics read passes as passes.
    def _passes_outside_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """Per phase row: its name as reports give it, and whether it is a backward pass
        outside the step (Note [A backward pass outside the step])."""
        names = self.phases["phase"].to_numpy(dtype=object).copy()
        outside = np.zeros(len(names), dtype=bool)
        if not (names == "optimizer").any():
            return names, outside
        after = ""   # the next forward, loss or optimizer row's phase, walking back
        for i in range(len(names) - 1, -1, -1):
            ph = names[i]
            if ph in ("forward", "loss", "optimizer"):
                after = ph
            elif ph == "backward" and after != "optimizer":
                began = names[i - 1] if i else "setup"
                if began in ("setup", "other"):
                    names[i], outside[i] = began, True
        return names, outside

    # ---- queries ------------------------------------------------------------------------
    def module_labels(self, paths, events) -> np.ndarray:
        """Module paths for reports (ledger/names.py): a path "" at an event inside the
        model's own forward becomes '(GPT.forward)', and so does a backward op whose node
        unpacked a storage saved there; "" elsewhere (the script) stays ""."""
        out = np.asarray(paths, dtype=object).copy()
        sc = self.scopes
        root = sc[sc["mod"].astype(str) == ""].sort_values("ev0", kind="stable")
        blank = np.flatnonzero(out == "")
        if not len(root) or not len(blank):
            return out
        ev0, ev1 = root["ev0"].to_numpy(np.int64), root["ev1"].to_numpy(np.int64)
        ev = np.asarray(events, dtype=np.int64)[blank]
        i = np.searchsorted(ev0, ev, side="right") - 1
        inside = (i >= 0) & (ev < ev1[np.maximum(i, 0)])
        labels = [model_forward(c) for c in root["cls"].astype(str)]
        out[blank[inside]] = [labels[j] for j in i[inside]]
        self._label_root_backward(out, blank[~inside], np.asarray(events, dtype=np.int64)
                                  [blank[~inside]], ev0, ev1, labels)
        return out

    # Note [A save just after the model's forward returned]
    # A `saved` record's `ev` is the last event before the save (autograd packs an op's
    # inputs before the op allocates its output), so the loss's save of the model's output,
    # `F.mse_loss(model(x), y)`, has the event of the forward's last allocation: inside the
    # model's forward scope [ev0, ev1) by events alone, and `show` listed the loss's saves
    # (and the loss's backward ops, which unpack them) under "(SetTransformer.forward)"
    # instead of the script. The event cannot tell the two apart (a save at the very end of
    # the model's own forward has the same one), so the collector says which it was: a save
    # made while no module's forward ran is written with `"script": 1` and stays the
    # script's, whatever its event. Older ledgers lack it and keep the event rule.
    def _label_root_backward(self, out, rows, ev, ev0, ev1, labels) -> None:
        """Backward ops carry the module that saved what their node unpacked (the latest
        unpack's storage, trace/collector.py `_unpack`); a save in the model's own forward
        (a transformers model's `self.loss_function`, ModernBERT's, Llama's) has path "" like
        the script's, so the peak of a masked LM, in the loss's backward, read "in the script
        (outside any module)". Where that save was inside the model's forward scope, it is
        labelled by the model's class as the forward ops are."""
        un, sv = self.unpacks, self.saves
        if not len(rows) or not len(un) or not len(sv):
            return
        phase, _ = self.phase_of_events()
        back = (ev >= 0) & (ev < len(phase))
        back[back] = phase[ev[back]] == "backward"
        rows, ev = rows[back], ev[back]
        if not len(rows):
            return
        un = un.sort_values("ev", kind="stable")
        u_ev, u_sid = un["ev"].to_numpy(np.int64), un["sid"].to_numpy(np.int64)
        j = np.searchsorted(u_ev, ev, side="right") - 1
        ok = j >= 0
        sid, at = u_sid[np.maximum(j, 0)], u_ev[np.maximum(j, 0)]
        # the storage's last save before that unpack: one sorted key per (sid, event)
        span = int(max(self.n_events, u_ev.max(), sv["ev"].max())) + 1
        sv = sv.assign(key=sv["sid"].to_numpy(np.int64) * span + sv["ev"].to_numpy(np.int64))
        sv = sv.sort_values("key", kind="stable")
        keys = sv["key"].to_numpy(np.int64)
        k = np.searchsorted(keys, sid * span + at, side="right") - 1
        s_sid, s_ev = keys[np.maximum(k, 0)] // span, keys[np.maximum(k, 0)] % span
        s_mod = sv["mod"].astype(str).to_numpy(dtype=object)[np.maximum(k, 0)]
        ok &= (k >= 0) & (s_sid == sid) & (s_mod == "")
        if "script" in sv:   # Note [A save just after the model's forward returned]
            ok &= ~sv["script"].fillna(0).astype(bool).to_numpy()[np.maximum(k, 0)]
        i = np.searchsorted(ev0, s_ev, side="right") - 1
        ok &= (i >= 0) & (s_ev < ev1[np.maximum(i, 0)])
        out[rows[ok]] = [labels[x] for x in i[ok]]

    def labelled(self, rows: pd.DataFrame) -> pd.DataFrame:
        """`rows` with `module` (by `created`) and `saved_module` (by `saved_ev`) as reports
        name them (`module_labels`)."""
        if not len(rows):
            return rows
        rows = rows.copy()
        rows["module"] = self.module_labels(rows["module"].astype(str), rows["created"])
        if "saved_module" in rows:
            mods = self.module_labels(rows["saved_module"].astype(str), rows["saved_ev"])
            sv = self.saves
            if len(sv) and "script" in sv:   # Note [A save just after the model's forward
                first = sv.drop_duplicates("sid", keep="first")   # returned]
                script = set(first["sid"][first["script"].fillna(0).astype(bool)].tolist())
                if script:
                    mods[np.isin(rows.index.to_numpy(), list(script))] = ""
            rows["saved_module"] = mods
        return rows

    def live_at(self, ev: int, rows: pd.DataFrame | None = None) -> pd.DataFrame:
        """Storages live right after event `ev`, largest first."""
        rows = self.on_device() if rows is None else rows
        live = rows[(rows["created"] <= ev) & (rows["freed"] > ev)]
        if "cat_until" in live and (early := (live["cat_until"] > ev).to_numpy()).any():
            live = live.copy()   # Note [A copy the optimizer keeps, then the parameter]
            for col in ("category", "name", "module"):
                live.loc[early, col] = live.loc[early, f"{col}_before" if col != "category"
                                                else "cat_before"]
        spans = self.category_spans()
        if len(spans):   # Note [A gradient dropped from .grad, then put back]
            hit = spans[(spans["ev0"] <= ev) & (spans["ev1"] > ev)
                        & spans["sid"].isin(live["sid"])]
            if len(hit):
                live = live.copy()
                live.loc[hit["sid"].to_numpy(), "category"] = hit["cat"].to_numpy()
                live.loc[hit["sid"].to_numpy(), "name"] = hit["name"].to_numpy()
        return live.sort_values("bytes", ascending=False, kind="stable")

    def category_spans(self) -> pd.DataFrame:
        """(sid, ev0, ev1, cat, name, was): storages that read `cat` under `name` over
        [ev0, ev1), where they would read `was`: a gradient no `.grad` held from a drop to
        the take-back that says when it was a `.grad` again (Note [A gradient dropped from
        .grad, then put back], trace/dropped_grads.py). Empty for most ledgers."""
        memo = self.__dict__.get("_spans_memo")
        if memo is None:
            memo = self.__dict__["_spans_memo"] = self._category_spans()
        return memo

    def _category_spans(self) -> pd.DataFrame:
        cols = ["sid", "ev0", "ev1", "cat", "name", "was"]
        spans = dropped_spans(self.extra.get("ungrad", ()))
        st = self.storages
        rows = []
        for sid, ev0, ev1 in spans:
            if sid not in st.index:
                continue
            r = st.loc[sid]
            cut = int(r["cat_until"]) if "cat_until" in st else -1
            before = str(r["cat_before"]) if cut > int(r["created"]) else ""
            if "gradient" not in (r["category"], before):
                continue
            end = int(r["freed"]) if int(r["freed"]) >= 0 else self.n_events
            ev0, ev1 = max(ev0, int(r["created"])), min(ev1, end)
            was = before if cut > ev0 else r["category"]
            if ev1 <= ev0 or was == "other":
                continue
            grad = str(r["name_before"]) if before == "gradient" else str(r["name"])
            rows.append((sid, ev0, ev1, "other", f"{grad} (a past gradient)".lstrip(), was))
        return pd.DataFrame(rows, columns=cols).astype(
            {"sid": np.int64, "ev0": np.int64, "ev1": np.int64})

    def peak(self) -> "PeakPoint":
        """The first event at which live bytes are highest, and where it happened."""
        c = self.curve()
        ev = int(np.argmax(c)) if len(c) else 0
        return self._point(ev, int(c[ev]) if len(c) else 0)

    def peak_with_scratch_point(self) -> "PeakPoint":
        """`peak()` of the curve with the kernel scratch (Note [The peak with the scratch,
        elsewhere] in ledger/summary.py)."""
        c = self.curve_with_scratch()
        ev = int(np.argmax(c)) if len(c) else 0
        return self._point(ev, int(c[ev]) if len(c) else 0)

    def _point(self, ev: int, nbytes: int) -> "PeakPoint":
        """`nbytes` at event `ev`, and where it happened: the op that made the largest
        storage there, or the op that ran there and made none (`bare` records)."""
        phase, step, outside = self.reported_phase_of_events()
        made_here = self.on_device()
        made_here = made_here[made_here["created"] == ev].sort_values("bytes", ascending=False)
        if len(made_here):
            op = str(made_here["op"].iloc[0])
        else:
            op = next((str(r["op"]) for r in self.extra.get("bare", ())
                       if ev in r.get("ev", ())), "")
        module = str(self.module_labels(made_here["module"].iloc[:1].astype(str), [ev])[0]) \
            if len(made_here) else ""
        return PeakPoint(bytes=nbytes, event=ev, step=int(step[ev]) if len(step) else 1,
                         phase=str(phase[ev]) if len(phase) else "setup", op=op, module=module,
                         backward_outside_step=bool(outside[ev]) if len(outside) else False)

    def by_category(self, ev: int, rows: pd.DataFrame | None = None) -> dict[str, int]:
        """Bytes live right after `ev`, per category (every category present, 0 if none)."""
        live = self.live_at(ev, rows)
        sums = live.groupby("category")["bytes"].sum()
        return {c: int(sums.get(c, 0)) for c in CATEGORIES}

    def live_by(self, ev: int, key: str) -> dict[Any, int]:
        """Bytes live right after `ev`, grouped by a storage column: `module`, `phase` (where
        each was made), `step`, `category`, `dtype`, ... Largest first."""
        sums = self.live_at(ev).groupby(key)["bytes"].sum().sort_values(ascending=False)
        return {k: int(v) for k, v in sums.items()}

    def at_peak(self) -> dict[str, int]:
        """Category breakdown at the ledger peak, with `workspace` = measured − ledger peak."""
        pk = self.peak()
        out = self.by_category(pk.event)
        out["workspace"] = self.workspace_bytes(pk.bytes)
        # The collectives' own buffers (gloo) are communication the ledger cannot see: they
        # move from workspace to communication (trace/allocator.py, Note [Collective scratch]).
        coll = min(int((self.measured or {}).get("collective_at_peak_bytes", 0)), out["workspace"])
        out["workspace"] -= coll
        out["communication"] += coll
        return out

    def workspace_bytes(self, ledger_peak: int | None = None) -> int:
        """Allocator bytes at the peak that no tracked storage explains (0 when unmeasured)."""
        if not self.measured:
            return 0
        lp = self.peak().bytes if ledger_peak is None else ledger_peak
        return max(0, int(self.measured["peak_bytes"]) - lp)

    def peak_by(self, key: str) -> dict[Any, int]:
        """Highest live bytes within each phase (`key='phase'`) or step (`key='step'`)."""
        c = self.curve()
        phase, step, _ = self.reported_phase_of_events()   # Note [A backward pass outside
        labels = phase if key == "phase" else step            # the step]
        s = pd.Series(c).groupby(pd.Series(labels)).max()
        if key == "phase":
            return {p: int(s[p]) for p in PHASES if p in s.index}
        return {int(k): int(v) for k, v in s.items()}

    # Note [A backward pass resumed after an update]
    # An optimizer stepped inside backward (optimi's gradient release) has its own phase
    # rows inside the pass: backward, optimizer, backward, optimizer, ... (Note [An update
    # inside backward is the optimizer's], trace/collector.py). The event "just before the
    # last step's backward" was read before the last backward row, the pass resumed after
    # the last parameter's update, when autograd had let go of nearly every save: `show`
    # read 0 B "saved for backward" on tests/clients/train_optimi.py `--opt adamw --bf16
    # --release`, where 109,324 B are (the same loop stepped after backward). A backward
    # row right after an optimizer row that itself follows a backward row resumes a pass;
    # a pass begun after a step has the row backward's end writes between (`other`, or the
    # forward or loss it returns to).
    #
    # Note [Held for backward, saved only in it]
    # An activation live as backward begins whose first save comes inside backward was
    # saved by nothing yet: a custom autograd Function keeps it on `ctx` as an attribute,
    # and a node saves it when it runs forward again in backward. performer-pytorch's (and
    # reformer-pytorch's) `_ReversibleFunction` keeps the last block's output as `ctx.y`;
    # its backward hands a chunk of it to block 1's `g` under grad, whose LayerNorm saves
    # it. `show` listed those 16,384 B as "saved for backward ... by the module that saved
    # it" under `net.performer.net.blocks.1.g.net.norm`, a module that ran under no_grad in
    # forward and saved nothing there (tests/clients/train_performer.py --mode rev). Such
    # a storage is now listed under the module whose forward made it
    # (`net.performer.net.blocks.1`, the `cat` that ends the block), what holds it for
    # backward; its bytes count as before.
    #
    # Note [The saves the step's backward reads]
    # "Saved for backward" is what the last step's backward pass reads, held at once just
    # before it begins. It was every activation live there: a loop that keeps its
    # validation loss (`val_loss = loss_fn(model(x_val), y)`, logged later) keeps that
    # forward's graph, and the activations it saved, until the next evaluation replaces
    # it, through the next step's backward, which never reads them. tests/clients/
    # train_eval_after.py `--eval kept` (2 steps, an evaluation batch 4x the training one)
    # read 15,360 B (`--where before_step`) and 15,872 B (`after_step`), where the step's
    # backward reads 3,072 B (12,288 B were the evaluation's graph; the 512 B more are the
    # batch: Note [A batch made after an evaluation], trace/collector.py). The pass is the
    # last one the step runs (a pass outside the step, Note [A backward pass outside the
    # step], is an evaluation's), and an activation counts when that pass reads it (an
    # unpack at or after its start), frees it (its graph let go), or saves it (Note [Held
    # for backward, saved only in it]); a graph no backward reads stays out, whatever
    # kept it. An evaluation's own pass run inside the step is no step's pass either:
    # Note [The pass that writes the gradients].
    #
    # Note [The pass that writes the gradients]
    # A step's pass is one that writes the parameters' gradients. `torch.autograd.grad` of a
    # validation loss with respect to its input, run inside the step after its backward
    # and before its optimizer step (tests/clients/train_eval_after.py `--eval input_grad
    # --where before_step`, 2 steps), was the last pass begun in the step, and "saved for
    # backward" read its saves: 12,288 B, the evaluation batch's (32 rows), where the
    # step's backward reads 3,072 B. By the ledger alone it looks like a second
    # micro-batch's pass, which accumulates. The trace tells them apart where a pass ends:
    # the parameters' `.grad` (storage and version counter) as it began and as it ended;
    # a pass that accumulates into any (a new storage, stolen or summed out of place, or
    # `+=` in place, which bumps the version) writes a `wrote_grads` record (`ev`: its
    # end; where `opt.step()` or a `record_function` comes right after the pass, before
    # any op switches the phase, there: an accumulating loop's last micro-batch, tests/
    # clients/train_loops.py `--loop accumulate`, is marked as its first). The step's pass is the last one begun in the step whose span holds such a
    # record; where none does (older ledgers; an update inside backward that clears each
    # gradient as it is made, leaving nothing changed at the end) the last one, as before.
    # After: 3,072 B. Cost: one walk over the parameters (storage, version) as each pass
    # begins and ends, about 1 us a parameter.
    def saved_before_backward(self) -> tuple[int, pd.DataFrame]:
        """(event, activations live there that the pass reads): the event just before the
        last step's backward, when everything it reads is held at once (Note [The saves the
        step's backward reads])."""
        names = self.phases["phase"].tolist()
        begins = [i for i, n in enumerate(names) if n == "backward" and not (
            i >= 2 and names[i - 1] == "optimizer" and names[i - 2] == "backward")]
        if not begins:
            return -1, self.storages.iloc[0:0]
        _, outside = self._passes_outside_steps()
        row = next((i for i in reversed(begins) if not outside[i]), begins[-1])
        # Note [The pass that writes the gradients]: of the step's passes, the last that did
        wrote = np.array(sorted(int(r["ev"]) for r in self.extra.get("wrote_grads", ())),
                         dtype=np.int64)
        if len(wrote):
            evs = self.phases["ev"].tolist()
            step = self.phases["step"].tolist()
            mine = [i for i in begins if not outside[i] and step[i] == step[row] and i <= row]
            row = next((i for i in reversed(mine) if _holds(wrote, evs[i], self._pass_end(i))),
                       row)
        ev = int(self.phases["ev"].iloc[row]) - 1
        end = self._pass_end(row)
        live = self.live_at(ev)
        live = live[(live["category"] == "activation") & (
            (live["unpack_ev"] > ev) | (live["saved_ev"] > ev)
            | ((live["freed"] > ev) & (live["freed"] <= end)))]
        # Note [Held for backward, saved only in it]
        later = (live["saved_ev"] > ev).to_numpy()
        if later.any():
            live = live.copy()
            live.loc[later, "saved_module"] = live.loc[later, "module"]
            live.loc[later, "saved_ev"] = live.loc[later, "created"]
        return ev, live

    def _pass_end(self, row: int) -> int:
        """The event at which the backward pass begun at phase row `row` ends (a pass an
        update inside backward resumes runs on: Note [A backward pass resumed after an
        update])."""
        names = self.phases["phase"].tolist()
        evs = self.phases["ev"].tolist()
        i = row + 1
        while i < len(names) and (names[i] == "backward" or (
                names[i] == "optimizer" and i + 1 < len(names) and names[i + 1] == "backward")):
            i += 1
        return int(evs[i]) if i < len(names) else self.n_events

    def idle(self, top: int | None = 10) -> pd.DataFrame:
        """Idle residency: bytes × events held between last use and free, largest first.

        Parameters, buffers and optimizer state are resident by design and left out; what is
        left is memory a program could have given back sooner (a gradient kept across
        zero_grad, a loss kept in a Python list, ...).
        """
        rows = self.on_device()
        # a generator state's read is never seen, so when it went idle is unknown (Note [A
        # generator state's read is never seen])
        rows = rows[~rows["category"].isin(["parameter", "buffer", "optimizer_state"])
                    & ~rows["op"].isin(GENERATOR_STATE_OPS)].copy()
        idle_events = (rows["freed"] - 1 - self._last_read(rows)).clip(lower=0)
        rows["idle_events"] = idle_events
        rows["idle_byte_events"] = idle_events * rows["bytes"]
        rows = rows[rows["idle_byte_events"] > 0].sort_values(
            "idle_byte_events", ascending=False, kind="stable")
        return rows if top is None else rows.head(top)

    # Note [A generator state's read is never seen]
    # A CPU generator state (`torch.get_rng_state()`, GENERATOR_STATE_OPS) is kept to be
    # handed back to `torch.set_rng_state`, which is no op: the trace never sees it read, and
    # its last use stays the event it was made at. `show`'s "Held after last use" read every
    # one as idle from its making to its free: on axial-attention's reversible image
    # transformer (tests/clients/train_axial.py, 2 layers, 2 steps) each `Deterministic`
    # records the state in forward and restores it for its re-run in backward, under a
    # `fork_rng` whose own copy is restored as the re-run ends; 7 of the table's first 8 rows
    # (5,056 B x 4, 3,515 to 3,899 idle events each) were those 8 wrappers' states, read in
    # the very backward the table said they idled through. When a state is read is unknown,
    # so none is reported idle (nor is a state a script keeps and never hands back, the one
    # case where the row was true). Report-only: replay reads `last_use` as it was.
    # Note [A saved number read by its node]
    # A wrapped number autograd saves (`x / 3.0` keeps its divisor: Note [Wrapped scalars
    # saved for backward], trace/scalars.py) is read by its node's backward (`grad /
    # other`), which the dispatch mode is handed as a Python float: no use is recorded, and
    # its last use stayed the forward op that made it. `show`'s "Held after last use" read
    # every such number as held idle from its forward to its backward, the very span a save
    # is meant to be held: on CoLT5-attention's autoregressive block (tests/clients/
    # train_colt5.py `--mode ar --rotary`, 2 steps), whose coordinate descent divides and
    # multiplies by Python floats in each of its 20 iterations, 518 numbers (492 of them the
    # six routers', 82 each over 2 steps), and the rows of the first block's q and kv
    # routers (2,816,016 and 2,431,600 byte-events) ranked third and fifth, above every
    # gradient kept past its use. Its node frees it as its backward returns, so a number
    # freed inside a backward pass was read at the event before its free; one freed
    # elsewhere (a graph the script dropped, or kept, without a backward) keeps its forward
    # op as its last use, and is as idle as it reads. Report-only: replay reads `last_use`
    # as it was (a number no policy moves, Note [Wrapped scalars saved for backward]).
    def _last_read(self, rows: pd.DataFrame) -> pd.Series:
        """`last_use` of `rows`, a saved wrapped number freed in backward read just before
        its free (Note [A saved number read by its node])."""
        last = rows["last_use"].copy()
        freed = rows["freed"].to_numpy(dtype=np.int64)
        cand = ((rows["op"] == WRAPPED_NUMBER_OP) & (rows["category"] == "activation")).to_numpy() \
            & (freed >= 0) & (freed < self.n_events)
        if cand.any():
            phase, _ = self.phase_of_events()
            hit = np.flatnonzero(cand)
            hit = hit[phase[freed[hit]] == "backward"]
            last.iloc[hit] = np.maximum(freed[hit] - 1, last.iloc[hit].to_numpy())
        return last

    def idle_offenders(self, top: int | None = 10) -> pd.DataFrame:
        """`idle()` with the same tensor of every step folded into one row.

        A row is (category, module, shape, dtype, op, name); `count` says how many storages
        (usually one per step) it stands for, `idle_events` and `idle_byte_events` are sums.
        """
        keys = ["category", "module", "shape", "dtype", "op", "name"]
        rows = self.labelled(self.idle(top=None))
        if not len(rows):
            return rows.assign(count=pd.Series(dtype=np.int64))
        grouped = rows.groupby(keys, sort=False, dropna=False).agg(
            bytes=("bytes", "max"), count=("sid", "size"), idle_events=("idle_events", "sum"),
            idle_byte_events=("idle_byte_events", "sum")).reset_index()
        grouped = grouped.sort_values("idle_byte_events", ascending=False, kind="stable")
        return grouped if top is None else grouped.head(top)

    # Note [Resident at the end]
    # The last step ends in its optimizer's post-hook, after `step()` returned, and what
    # step() made for itself is freed at that return, after its last op: those frees carry
    # the event after the last, as a storage still held does once filled in. Read at the
    # last event, `resident` counted them: schedulefree's AdamW keeps `denom` (a
    # `_foreach_div` of every `exp_avg_sq`) to its return, and read 53,016 B of
    # "temporary" resident at the end of a residual MLP whose own temporaries were 24 B
    # (tests/clients/train_optimizers.py --opt sf_adamw). Resident is what has no free
    # record: the collector writes none once the last step has ended (the script then
    # unwinds from the stop, and frees its model and optimizer before the close), and says
    # so in its end record (`held`); a ledger without it (older, or a block that ended on
    # its own) is read at its last event, as before.
    def resident_at_end(self) -> dict[str, int]:
        end = self.n_events - 1
        if not (self.end or {}).get("held"):
            return self.by_category(end)
        rows = self.on_device()
        rows = rows[(rows["freed"] <= end) | rows["sid"].isin(self.held_at_close)]
        # a copy an optimizer's step made its parameter at the step's last free (the event
        # after the last) is the parameter at the close (Note [A copy the optimizer keeps,
        # then the parameter] in ledger/held_roles.py)
        return self.by_category(end, rows.assign(cat_until=-1) if "cat_until" in rows
                                else rows)

    def latest_map(self, kind: str, key: str) -> dict[str, str]:
        """The `key` mapping of the latest `kind` record written since the model was last
        renamed (`model` record): `aliases`, `classes`; {} where there is none."""
        start = max((int(r["ev"]) for r in self.extra.get("model", [])), default=0)
        out: dict[str, str] = {}
        for r in self.extra.get(kind, []):
            if int(r.get("ev", 0)) >= start:
                out = {str(k): str(v) for k, v in r[key].items()}
        return out

    def summary(self, top: int = 10):
        """The `memledger.summary/1` contract (a pydantic `Summary`)."""
        from memledger.ledger.summary import summarize  # summary is built on this model

        return summarize(self, top)


@dataclass(frozen=True)
class PeakPoint:
    bytes: int
    event: int
    step: int
    phase: str
    op: str
    module: str
    # in a backward pass outside the step, named by the phase it began in (Note [A
    # backward pass outside the step])
    backward_outside_step: bool = False


# Note [Event indices are checked on load]
# Queries allocate arrays of n_events entries (8 bytes each), so a crafted `"ev": 1e12`
# would ask for 8 TB. A trace writes phase, step and storage records as it goes: far more
# than one per EVENTS_PER_RECORD events, so a ledger claiming more events than that (and
# over a million) is refused, as is an index below 0 or past the end.
EVENTS_PER_RECORD = 64
MIN_EVENTS_ALLOWED = 1_000_000


def _made_at(st: pd.DataFrame) -> dict[int, dict[str, int]]:
    """{event: {op name: bytes of the storages it made there}} of the ledger's storages."""
    names = st["op"].astype(str).str.split(".").str[0]
    sums = st.assign(name=names).groupby(["created", "name"])["bytes"].sum()
    out: dict[int, dict[str, int]] = {}
    for (e, name), b in sums.items():
        out.setdefault(int(e), {})[name] = int(b)
    return out


def _scratch_past_calls_before(made_at: dict[int, dict[str, int]], ev: int, inner,
                               scratch: int) -> int:
    """The op's scratch at `ev` without the first k of the calls `inner` ([name, bytes
    kept, scratch without it and those before it], in order) the profiler listed inside its
    call, for the largest k whose calls are the ledger's k events just before `ev` (the
    dispatch mode saw them as ops of their own; Note [Inputs a fallback copies before the
    op] in trace/allocator.py); `scratch` where none is."""
    for k in range(len(inner), 0, -1):
        if all(made_at.get(ev - k + j, {}).get(str(inner[j][0])) == int(inner[j][1])
               for j in range(k)):
            return int(inner[k - 1][2])
    return scratch


def _hidden_calls(inside, ledger_ops) -> set[int]:
    """The places of an op's calls made inside an op the ledger records (Note [Calls inside
    another op] in trace/allocator.py): the dispatch mode never saw them."""
    return {int(place) for place, outer in inside if any(o in ledger_ops for o in outer)}


def _calls_placed(per_call: list[int], made: np.ndarray, idle: np.ndarray, bare: set[int],
                  hidden: set[int]) -> tuple[np.ndarray, list[int]] | None:
    """(events, scratch per event) of an op's calls, with the events at which it made
    nothing (`idle`) as well as those at which it made storages (`made`); None where they
    do not match the calls (Note [Ops that made nothing, placed] in trace/collector.py).

    Every call an event, in order, where the counts agree. Otherwise the calls that made
    something (not in `bare`) go to `made` in order, and the calls that made nothing go to
    the ledger's events that made nothing between the same two events that made
    something, where their counts agree there: a call the dispatch mode never saw (a
    checkpoint re-run's early stop raised from a pack hook of the op's inputs, before its
    kernel: the profiler lists an `mm` that allocated nothing) is left out with its gap."""
    for skip in (set(), hidden):
        calls = [i for i in range(len(per_call)) if i not in skip]
        if len(calls) == len(made) + len(idle):
            return np.union1d(made, idle), [per_call[i] for i in calls]
    for skip in (set(), hidden):
        calls = [i for i in range(len(per_call)) if i not in skip]
        full = [i for i in calls if i not in bare]
        if len(full) != len(made):
            continue
        gap_calls: dict[int, list[int]] = {}   # gap: the number of full calls before it
        k = 0
        for i in calls:
            if i in bare:
                gap_calls.setdefault(k, []).append(i)
            else:
                k += 1
        gap_events: dict[int, list[int]] = {}
        for e, g in zip(idle.tolist(), np.searchsorted(made, idle).tolist()):
            gap_events.setdefault(g, []).append(e)
        evs, sizes = made.tolist(), [per_call[i] for i in full]
        for g, es in gap_events.items():
            cs = gap_calls.get(g, [])
            if len(cs) == len(es):
                evs += es
                sizes += [per_call[i] for i in cs]
        order = np.argsort(evs, kind="stable")
        return np.asarray(evs, dtype=np.int64)[order], [sizes[i] for i in order]
    return None


def _calls_the_ledger_saw(per_call: list[int], n_events: int, bare: set[int],
                          hidden: set[int]) -> list[int] | None:
    """An op's scratch per call, matched to its `n_events` ledger events: all its calls, or
    those left without the calls that made nothing (Note [Calls that made nothing]), the
    hidden calls, or both; None where no choice matches (the runs diverged)."""
    for skip in (set(), bare, hidden, bare | hidden):
        kept = [b for i, b in enumerate(per_call) if i not in skip]
        if len(kept) == n_events:
            return kept
    return None


def _check_events(storages: pd.DataFrame, n_events: int, n_records: int, source: str) -> None:
    limit = max(MIN_EVENTS_ALLOWED, EVENTS_PER_RECORD * n_records)
    if n_events > limit:
        raise LedgerFormatError(f"ledger {source} claims {n_events:,} events in {n_records:,} "
                                "records; an event index is corrupt (re-trace, or check "
                                "where the file came from)")
    for col in ("created", "last_use", "freed"):
        v = storages[col].to_numpy()
        if len(v) and (v.min() < (-1 if col == "freed" else 0) or v.max() > n_events):
            raise LedgerFormatError(f"ledger {source}: a storage's {col} event is outside "
                                    f"0..{n_events}; the ledger is corrupt")


def _holds(evs: np.ndarray, lo: int, hi: int) -> bool:
    """Whether sorted `evs` has one in [lo, hi]."""
    i = int(np.searchsorted(evs, lo, side="left"))
    return i < len(evs) and int(evs[i]) <= hi


def _table(records: list[Record], columns: dict[str, Any]) -> pd.DataFrame:
    """Records of one kind as columns, with a default for each optional field."""
    df = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    for col, default in columns.items():
        if col not in df:
            df[col] = default
        elif default is not None:
            df[col] = df[col].fillna(default) if df[col].isna().any() else df[col]
    return df


def _check_required(kind: str, df: pd.DataFrame, fields: tuple[str, ...]) -> None:
    for f in fields:
        if len(df) and (f not in df or df[f].isna().any()):
            raise LedgerFormatError(f"ledger: {kind} records lack {f!r}; the ledger is corrupt")


def _held_by_new_graph(up: pd.DataFrame, again: list[Record], freed: np.ndarray,
                       df: pd.DataFrame) -> None:
    """Note [Saved again by a graph-building backward] (trace/collector.py): what a node
    read back and its ops saved again is held by the graph that backward built, until that
    save's alias went (`again` records: `sid`, `uev`, `ev`), or the storage's free if it
    outlived the trace; the unpack's `end` and `rel` say so."""
    flagged = (up["again"] == 1).to_numpy()
    last = int(max(df["created"].max(), up["ev"].max())) + 1
    f = up["sid"].map(pd.Series(freed, index=df.index)).fillna(-1).to_numpy(np.int64)
    until = np.where(flagged, np.where(f < 0, last, f), -1)
    if again:
        gone = pd.DataFrame(again, columns=["sid", "uev", "ev"]).groupby(
            ["sid", "uev"])["ev"].max()
        key = pd.MultiIndex.from_arrays([up["sid"].to_numpy(), up["ev"].to_numpy()])
        seen = gone.reindex(key).to_numpy()
        until = np.where(flagged & ~np.isnan(seen), np.nan_to_num(seen, nan=-1), until)
    until = until.astype(np.int64)
    up["end"] = np.where(flagged, np.maximum(up["end"].to_numpy(np.int64), until), up["end"])
    up["rel"] = np.where(flagged, np.maximum(up["rel"].to_numpy(np.int64), until), up["rel"])


def _storages(by_kind: dict[str, list[Record]]) -> tuple[pd.DataFrame, pd.DataFrame,
                                                          pd.DataFrame]:
    """One row per storage from the alloc/free/live/role/saved/unpack records (vectorised:
    a million-event ledger has hundreds of thousands of these), and the saved and unpack
    records themselves as tables."""
    a = _table(by_kind.pop("alloc", []), {"sid": None, "ev": None, "bytes": None, "dev": "cpu",
                                          "dtype": "", "shape": None, "op": "", "mod": "",
                                          "ph": "setup", "step": 1, "pre": False,
                                          "external": False})
    _check_required("alloc", a, ("sid", "ev", "bytes"))
    if len(a) and a["sid"].duplicated().any():
        raise LedgerFormatError(f"ledger: storage {int(a['sid'][a['sid'].duplicated()].iloc[0])} "
                                "is allocated twice; the ledger is corrupt")
    df = pd.DataFrame({
        "sid": a["sid"].astype(np.int64), "bytes": a["bytes"].astype(np.int64),
        "device": a["dev"].astype(str), "dtype": a["dtype"].astype(str),
        "shape": ["x".join(map(str, s)) if isinstance(s, list) else "" for s in a["shape"]],
        "op": a["op"].astype(str), "module": a["mod"].astype(str), "phase": a["ph"].astype(str),
        "step": a["step"].astype(np.int64), "created": a["ev"].astype(np.int64),
        "pre": a["pre"].astype(bool),
        # Note [Memory torch's allocator did not hand out] in trace/external.py
        "external": a["external"].astype(bool),
    })
    df.index = pd.Index(df["sid"].to_numpy(), name="sid")
    pos = pd.Series(np.arange(len(df)), index=df.index)  # sid -> row
    # made by an op the untraced run calls in place (Note [In place but for the mode] in
    # trace/collector.py): named as it is there
    # (kept in `extra` too: the replay unfolds the fold where a mode runs, Note [A Linear's
    # bias, added in place but for the mode])
    renamed = [r for r in by_kind.get("inplace", []) if r.get("sid") in pos.index]
    if renamed:
        df.iloc[pos.loc[[r["sid"] for r in renamed]].to_numpy(), df.columns.get_loc("op")] = \
            [str(r["op"]) for r in renamed]

    # a fake CUDA run's optimizer step counter, which CUDA keeps on the host (Note [Fake
    # runs], Rule 8, in trace/fake.py): on `cpu`, at its own size
    host = [r for r in by_kind.pop("host", []) if r.get("sid") in pos.index]
    if host:
        at = pos.loc[[r["sid"] for r in host]].to_numpy()
        df.iloc[at, df.columns.get_loc("device")] = "cpu"
        df.iloc[at, df.columns.get_loc("bytes")] = [int(r["bytes"]) for r in host]

    def rows_of(events: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
        events = events[events["sid"].isin(df.index)]
        return pos.loc[events["sid"]].to_numpy(), events

    last_use = df["created"].to_numpy().copy()
    freed = np.full(len(df), -1, dtype=np.int64)
    by_gc = np.zeros(len(df), dtype=bool)
    # the storage its last read wrote in place (Note [Written in place from the step
    # before], ledger/held_roles.py), as a row; -1: none, or a ledger written before
    into = np.full(len(df), -1, dtype=np.int64)

    def wrote_into(idx: np.ndarray, recs: pd.DataFrame) -> None:
        w = recs["into"].to_numpy(dtype=np.int64)
        ok = w >= 0
        if ok.any():
            into[idx[ok]] = df.index.get_indexer(w[ok])

    f = _table(by_kind.pop("free", []), {"sid": None, "ev": None, "last": None, "gc": 0,
                                         "into": -1})
    _check_required("free", f, ("sid", "ev"))
    if len(f):
        idx, f = rows_of(f)
        freed[idx] = f["ev"].to_numpy(dtype=np.int64)
        last_use[idx] = f["last"].fillna(f["ev"] - 1).to_numpy(dtype=np.int64)
        by_gc[idx] = f["gc"].astype(bool).to_numpy()   # trace/gc_window.py
        wrote_into(idx, f)
    lv = _table(by_kind.pop("live", []), {"sid": None, "last": -1, "into": -1})
    _check_required("live", lv, ("sid",))
    if len(lv):
        idx, lv = rows_of(lv)
        last_use[idx] = lv["last"].to_numpy(dtype=np.int64)
        wrote_into(idx, lv)
    df["last_use"] = np.maximum(last_use, df["created"].to_numpy())
    df["freed"] = freed
    df["gc_freed"] = by_gc
    # live at the end as unreachable garbage (a `garbage` record: trace/gc_window.py)
    at_end = {int(s) for r in by_kind.get("garbage", []) for s in r.get("sids", ())}
    df["garbage_at_end"] = df.index.isin(list(at_end)) & (freed < 0)

    # `sparse`: 1 where the saved tensor was a sparse one, saved by its values (older
    # ledgers lack it: 0; Note [A sparse save stays on the device] in replay/engine.py)
    # `script`: 1 where no module's forward was running at the save (older ledgers lack it:
    # 0; Note [A save just after the model's forward returned])
    sv = _table(by_kind.pop("saved", []), {"sid": None, "ev": None, "mod": "", "sparse": 0,
                                           "script": 0})
    _check_required("saved", sv, ("sid", "ev"))
    df["saved_module"], df["saved_ev"], df["saved_last_ev"] = "", -1, -1
    if len(sv):
        first = sv.drop_duplicates("sid", keep="first")
        idx, first = rows_of(first)
        df.iloc[idx, df.columns.get_loc("saved_module")] = first["mod"].astype(str).to_numpy()
        df.iloc[idx, df.columns.get_loc("saved_ev")] = first["ev"].to_numpy(dtype=np.int64)

        idx, last = rows_of(sv.drop_duplicates("sid", keep="last"))
        df.iloc[idx, df.columns.get_loc("saved_last_ev")] = last["ev"].to_numpy(dtype=np.int64)
    # a Python number autograd saved, which no hook saw (no `saved` record): the module of
    # the op that saved it (Note [Wrapped scalars saved for backward] in trace/scalars.py)
    wrapped = (df["op"] == WRAPPED_NUMBER_OP).to_numpy()
    if wrapped.any():
        df.loc[wrapped, "saved_module"] = df.loc[wrapped, "module"].astype(str)
    # saves per storage (one per pack: q, k, v of one qkv storage are three); the time model
    # charges checkpoint's per-save work by it
    counts = sv["sid"].value_counts() if len(sv) else pd.Series(dtype=np.int64)
    df["saves"] = df["sid"].map(counts).fillna(0).to_numpy(dtype=np.int64)
    # `end`: when the node that unpacked it returned (Note [When an unpacked tensor goes] in
    # trace/collector.py); -1 in ledgers written before it was recorded
    up = _table(by_kind.pop("unpack", []), {"sid": None, "ev": None, "end": -1, "rel": -1,
                                            "val": -1, "sev": -1, "g": 0, "nth": 0})
    _check_required("unpack", up, ("sid", "ev"))
    if len(up) and "again" in up and (up["again"] == 1).any():
        _held_by_new_graph(up, by_kind.pop("again", []), freed, df)
    df["unpack_ev"], df["unpack_first_ev"], df["unpack_end_ev"] = -1, -1, -1  # a storage
    df["unpack_rel_ev"] = -1
    # unpacks per storage: more than its saves when two backward passes read them
    # (`retain_graph=True`, a gradient penalty)
    ucount = up["sid"].value_counts() if len(up) else pd.Series(dtype=np.int64)
    df["unpacks"] = df["sid"].map(ucount).fillna(0).to_numpy(dtype=np.int64)
    df["unpack_pass1_end_ev"], df["unpack_pass2_ev"] = -1, -1
    if len(up) and (df["unpacks"] > df["saves"]).any():
        _second_pass(df, up, rows_of, by_kind.get("phase", []))
    if len(up):                                             # saved by several ops: all three
        idx, last = rows_of(up.drop_duplicates("sid", keep="last"))
        df.iloc[idx, df.columns.get_loc("unpack_ev")] = last["ev"].to_numpy(dtype=np.int64)
        df.iloc[idx, df.columns.get_loc("unpack_end_ev")] = last["end"].to_numpy(np.int64)
        df.iloc[idx, df.columns.get_loc("unpack_rel_ev")] = last["rel"].to_numpy(np.int64)
        idx, first = rows_of(up.drop_duplicates("sid", keep="first"))
        df.iloc[idx, df.columns.get_loc("unpack_first_ev")] = first["ev"].to_numpy(np.int64)
        # better, the first unpack in the step of its last save: a storage saved step
        # after step (a module's plain tensor attribute, as peft's FourierFT keeps its
        # `indices`) is read back for this step's backward, not from the first step's on;
        # a step's own re-saves (the script's checkpoint, in backward) stay in that step
        step_of = _step_of_events(by_kind.get("phase", []))
        last_save = up["sid"].map(df["saved_last_ev"]).fillna(-1).to_numpy(np.int64)
        late = up[step_of(up["ev"].to_numpy(np.int64)) >= step_of(last_save)]
        idx, first = rows_of(late.drop_duplicates("sid", keep="first"))
        df.iloc[idx, df.columns.get_loc("unpack_first_ev")] = first["ev"].to_numpy(np.int64)

    roles = _table(by_kind.pop("role", []), {"sid": None, "role": None, "name": "", "shard": ""})
    _check_required("role", roles, ("sid", "role"))
    marks = step_marks(by_kind.get("phase", []), by_kind.get("step", []))
    df["category"], df["name"], df["shard"] = _categories(df, roles, sv, marks, into,
                                                          by_kind.get("holders", []))
    _earlier_roles(df, roles, by_kind.get("phase", []), by_kind.get("step", []),
                   by_kind.get("ungrad", []),   # kept in `extra`: `category_spans`
                   marks, by_kind.pop("holders", []))
    # A parameter or buffer belongs to the module that owns it, whatever op made its storage.
    # So does a named `other` (a module the script never calls: Note [Modules never called])
    owned = df["category"].isin(["parameter", "buffer", "other"]).to_numpy() & \
        (df["name"] != "").to_numpy() & \
        ~df["cat_before"].isin(["activation", "temporary"]).to_numpy()
    # (a carried state's name is the script's variable, no module's path: its module stays
    # the op's, Note [A carried state, named by its holder] in ledger/carried.py)
    df.loc[owned, "module"] = [n.rpartition(".")[0] for n in df.loc[owned, "name"]]
    for col in ("saved_ev", "unpack_ev", "saved_last_ev", "unpack_first_ev", "unpack_end_ev",
                "unpack_pass1_end_ev", "unpack_pass2_ev", "unpack_rel_ev"):
        df[col] = df[col].astype(np.int64)
    return df[STORAGE_COLUMNS], sv, up


def _step_of_events(phases: list[Record]):
    """A function from event numbers (an array) to the step each lies in, from the ledger's
    phase records (step 1 before the first)."""
    ph = sorted((int(r["ev"]), int(r.get("step", 1))) for r in phases)
    ev = np.array([e for e, _ in ph], dtype=np.int64)
    step = np.array([s for _, s in ph] or [1], dtype=np.int64)

    def step_of(events: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ev, events, side="right") - 1
        return np.where(i >= 0, step[np.maximum(i, 0)], 1)
    return step_of


def _second_pass(df: pd.DataFrame, up: pd.DataFrame, rows_of,
                 phases: list[Record] = ()) -> None:
    """A storage read by two backward passes (`retain_graph=True`, a gradient penalty): the
    first pass is its first `saves` unpacks. When that pass's last unpacking node returned
    (`unpack_pass1_end_ev`) and the second pass's first unpack (`unpack_pass2_ev`): an
    offloaded copy is read back once per pass (memledger/measure/offload.py)."""
    saves = up["sid"].map(df.set_index("sid")["saves"]).fillna(0).to_numpy(dtype=np.int64)
    n = up.groupby("sid").cumcount().to_numpy()
    saves = _first_read_again(up, n, saves, phases)
    end = np.where(up["end"].to_numpy(dtype=np.int64) >= 0, up["end"].to_numpy(dtype=np.int64),
                   up["ev"].to_numpy(dtype=np.int64) + 1)
    up = up.assign(n=n, saves=saves, pass_end=end)
    last1 = up[(up["saves"] > 0) & (up["n"] == up["saves"] - 1)]
    first2 = up[(up["saves"] > 0) & (up["n"] == up["saves"])]
    idx, first2 = rows_of(first2)
    df.iloc[idx, df.columns.get_loc("unpack_pass2_ev")] = first2["ev"].to_numpy(np.int64)
    idx, last1 = rows_of(last1[last1["sid"].isin(first2["sid"])])
    df.iloc[idx, df.columns.get_loc("unpack_pass1_end_ev")] = last1["pass_end"].to_numpy(
        np.int64)


def _first_read_again(up: pd.DataFrame, n: np.ndarray, saves: np.ndarray,
                      phases: list[Record] = ()) -> np.ndarray:
    """Per unpack: the number of its storage's unpacks in the first pass. Where a save is
    read again within one backward phase (a backward a custom backward runs inside it),
    the second pass begins at that read, not after `saves` unpacks: a storage saved
    twice, one save read twice and the other once (reformer-pytorch's encoder-decoder: the
    token batch, saved by the encoder's embedding and read by the backward each decoder
    layer's reversible backward runs through the encoder, and by the decoder's, read
    once) had its second pass start at the decoder's read, and the encoder's first
    read-back copy under `offload:enc` held across both (528 B over measured). Passes in
    phases of their own (a force field's `autograd.grad`, then the loss's backward) keep
    the count: by the first re-read, e3nn's `offload:blocks.0`, exact by the count, read
    7,240 B under (tests/clients/train_e3nn.py --mode forces, 2 x 8 atoms, mul 4)."""
    if "sev" not in up:
        return saves
    sev = up["sev"].fillna(-1).to_numpy(dtype=np.int64)
    nth = up["nth"].fillna(0).to_numpy(dtype=np.int64) if "nth" in up else 0
    ph = np.array(sorted(int(r["ev"]) for r in phases), dtype=np.int64)
    phase = np.searchsorted(ph, up["ev"].to_numpy(dtype=np.int64), side="right")
    # Note [Two saves at one event, read in one pass]
    # Saves are recorded at the event of the op before the one that saves them when that op
    # saves its inputs before it runs: a `tanh` output saved by TanhBackward (after the
    # tanh, at its event) and by the `h * scale` that follows (before the mul: at the
    # tanh's event too), told apart by `nth`. Read by (sid, sev) alone, the mul's unpack
    # in the first backward read as a second read of the tanh's save: the second pass
    # began there, and under offload the first read-back copy was held over both passes
    # (two backward passes through a residual block's (40, 64) fp32 tanh output:
    # `offload:blocks.*` 10,240 B over measured; recurrent-memory-transformer's memory
    # replay, whose hyper-connections save their `Tanh` outputs so, 4,416 B).
    again = pd.DataFrame({"sid": up["sid"].to_numpy(), "sev": sev, "nth": nth,
                          "phase": phase}).duplicated() & (sev >= 0)
    first = pd.Series(n[again.to_numpy()], index=up["sid"].to_numpy()[again.to_numpy()])
    first = first[~first.index.duplicated()]
    k = up["sid"].map(first).to_numpy()
    return np.where(np.isnan(k.astype(float)), saves, k).astype(np.int64)


def _earlier_roles(df: pd.DataFrame, roles: pd.DataFrame, phases: list[Record] = (),
                   steps: list[Record] = (), ungrad: list[Record] = (),
                   marks: StepMarks | None = None, holders: list[Record] = ()) -> None:
    """The `cat_until`, `cat_before`, `name_before`, `module_before` columns (Note [A copy
    the optimizer keeps, then the parameter] and [A gradient the script keeps past its
    step] in ledger/held_roles.py, [A state carried into the next step] in
    ledger/carried.py); `module` is still the op's here."""
    n = len(df)
    until = np.full(n, -1, dtype=np.int64)
    before, name, module = (np.full(n, "", dtype=object) for _ in range(3))

    def read_before(rows: pd.DataFrame, category: str) -> np.ndarray:
        """`rows` read `category` under their earlier name until their `until` event."""
        at = df.index.get_indexer(rows.index)
        until[at] = rows["until"].to_numpy(dtype=np.int64)
        before[at] = category
        name[at] = rows["name"].astype(str).to_numpy()
        module[at] = df["module"].to_numpy()[at]
        return at

    copies = optimizer_copies(df, roles, df["category"].to_numpy()) if len(roles) else ()
    if len(copies):
        read_before(copies, "optimizer_state")
    # Note [A gradient the script keeps past its step]: `other` from its parameter's next
    # gradient on, the gradient before (a row the rule above took is no gradient)
    # (or from the event no `.grad` held it: Note [A gradient dropped from .grad])
    past = past_gradients(df, roles, df["category"].to_numpy(), phases, steps, ungrad) \
        if len(roles) else ()
    if len(past):
        at = read_before(past, "gradient")
        df.iloc[at, df.columns.get_loc("category")] = "other"
        df.iloc[at, df.columns.get_loc("name")] = [f"{n} (a past gradient)".lstrip()
                                                   for n in past["name"].astype(str)]
    # Note [A state carried into the next step] (ledger/carried.py): `other` from its step's
    # end, the activation before
    # Note [A state no op saved] (ledger/carried.py): an unsaved one, `temporary` before
    cat = df["category"].to_numpy()
    unsaved = np.isin(cat, ("temporary", "other")) & (df["name"] == "").to_numpy() & \
        (df["phase"] != "setup").to_numpy() & ~df["pre"].to_numpy(dtype=bool) & (until < 0)
    carried = carried_until(
        df, (cat == "activation") & (until < 0),
        step_marks(phases, steps) if marks is None else marks, holders, unsaved,
        _read_in_forward(df, phases) if unsaved.any() else None)
    if (at := np.flatnonzero(carried >= 0)).size:
        until[at] = carried[at]
        before[at] = np.where(cat[at] == "activation", "activation", "temporary")
        name[at], module[at] = df["name"].to_numpy()[at], df["module"].to_numpy()[at]
        df.iloc[at, df.columns.get_loc("category")] = "other"
        # Note [A carried state, named by its holder] (ledger/carried.py)
        held = carried_names(df.index, carried, holders)
        if (by := np.flatnonzero(held != "")).size:
            df.iloc[by, df.columns.get_loc("name")] = held[by]
    df["cat_until"], df["cat_before"], df["name_before"], df["module_before"] = \
        until, before, name, module


def _read_in_forward(df: pd.DataFrame, phases: list[Record]) -> np.ndarray:
    """Per storage: its last use fell in a forward phase (the phase records' last at or
    before it; Note [A state no op saved] in ledger/carried.py)."""
    recs = sorted((int(r["ev"]), r.get("ph") == "forward") for r in phases)
    if not recs or "last_use" not in df:
        return np.zeros(len(df), dtype=bool)
    evs = np.array([e for e, _ in recs], dtype=np.int64)
    fwd = np.array([f for _, f in recs], dtype=bool)
    i = np.searchsorted(evs, df["last_use"].to_numpy(dtype=np.int64), side="right") - 1
    return (i >= 0) & fwd[np.maximum(i, 0)]


def _categories(df: pd.DataFrame, roles: pd.DataFrame, saved: pd.DataFrame,
                marks: StepMarks, into: np.ndarray | None = None, holders: list = ()):
    """Each storage's category: its highest-priority role (see ROLE_PRIORITY), else by when
    it was made: during the run, a temporary, or other where the script kept it over a
    whole step or the next step read it (Notes [Kept by the script across a step] and
    [Read by the next step] in ledger/held_roles.py); while
    setting up (or already there when tracing began), other. `marks`: the ledger's step
    bounds (ledger/step_marks.py). Returns (categories, names, shards)."""
    rank = {r: i for i, r in enumerate(ROLE_PRIORITY)}
    parts = []
    if len(roles):
        r = roles[roles["role"].isin(list(rank))]
        parts.append(pd.DataFrame({"sid": r["sid"].to_numpy(), "role": r["role"].to_numpy(),
                                   "name": r["name"].fillna("").astype(str).to_numpy(),
                                   "shard": r["shard"].fillna("").astype(str).to_numpy()}))
    if len(saved):
        parts.append(pd.DataFrame({"sid": saved["sid"].to_numpy(), "role": "activation",
                                   "name": "", "shard": ""}))
    made_in_run = (df["phase"] != "setup").to_numpy() & ~df["pre"].to_numpy(dtype=bool)
    created = df["created"].to_numpy(dtype=np.int64)
    last = df["last_use"].to_numpy(dtype=np.int64) if "last_use" in df else created
    items = held_as_items(df.index, holders, int(marks.ends[-1])) \
        if len(holders) and len(marks.ends) else None   # Note [A history the script keeps]
    kept = kept_across_a_step(created, df["freed"].to_numpy(dtype=np.int64), last,
                              marks, into, items)
    cats = pd.Series(np.where(made_in_run & ~kept, "temporary", "other"), index=df.index,
                     dtype=object)
    names = pd.Series("", index=df.index, dtype=object)
    shards = pd.Series("", index=df.index, dtype=object)
    if parts:
        allr = pd.concat(parts, ignore_index=True)
        allr["rank"] = allr["role"].map(rank)
        # of one role, the last record names it: a top-level module renamed (Note [The
        # model] in trace/roots.py) writes its parameters' roles again
        best = allr.sort_values(["sid", "rank"], kind="stable").drop_duplicates(
            ["sid", "rank"], keep="last").drop_duplicates("sid")
        best = best[best["sid"].isin(df.index)].set_index("sid")
        cats.loc[best.index] = best["role"]
        names.loc[best.index] = best["name"]
        shards.loc[best.index] = best["shard"]
    return cats.to_numpy(), names.to_numpy(), shards.to_numpy()
