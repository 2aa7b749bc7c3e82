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

from memledger.ledger.reader import read_records
from memledger.ledger.schema import CATEGORIES, PHASES, ROLE_PRIORITY
from memledger.ledger.writer import Record

STORAGE_COLUMNS = [
    "sid", "bytes", "device", "dtype", "shape", "op", "module", "phase", "step",
    "created", "last_use", "freed", "category", "name", "saved_module", "saved_ev",
    "unpack_ev", "pre", "saved_last_ev", "unpack_first_ev",
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

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> "Ledger":
        records, truncated = read_records(path)
        led = cls.from_records(records)
        led.truncated = truncated
        return led

    @classmethod
    def from_records(cls, records: list[Record]) -> "Ledger":
        by_kind: dict[str, list[Record]] = {}
        for r in records:
            by_kind.setdefault(r["k"], []).append(r)
        header = by_kind.pop("header", [{}])[0]
        storages = _storages(by_kind)
        phases = pd.DataFrame(by_kind.pop("phase", []), columns=["ev", "ph", "step"]).rename(
            columns={"ph": "phase"})
        scopes = pd.DataFrame(by_kind.pop("scope", []),
                              columns=["mod", "ev0", "ev1", "ph", "step", "ns", "cls"])
        scopes["cls"] = scopes["cls"].fillna("").astype(str)  # class name (newer ledgers)
        steps = pd.DataFrame(by_kind.pop("step", []), columns=["step", "ev", "ns"])
        ends = by_kind.pop("end", [])
        measured = by_kind.pop("measured", [])
        if ends:  # the writer's own count of events
            last_ev = int(ends[-1]["ev"]) - 1
        elif len(storages):  # cut short: the last event any record mentions
            last_ev = max(int(storages["created"].max()), int(storages["last_use"].max()),
                          int(storages["freed"].max()) - 1)
        else:
            last_ev = 0
        n_events = last_ev + 1
        freed = storages["freed"].to_numpy()
        storages["freed"] = np.where(freed < 0, n_events, freed)  # still live: until the end
        return cls(
            header=header, storages=storages, phases=phases, scopes=scopes, steps=steps,
            n_events=max(n_events, 1), measurements=measured,
            end=ends[-1] if ends else None, extra=by_kind,
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
        return self.end is not None and self.end.get("status") == "ok"

    @property
    def steps_traced(self) -> int:
        return int(len(self.steps))

    def on_device(self, device: str | None = None) -> pd.DataFrame:
        """Storages of one device (default: the ledger's device)."""
        dev = device or self.device
        return self.storages[self.storages["device"] == dev]

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

    def curve_by_category(self) -> pd.DataFrame:
        """Live bytes per category after each event: one column per category."""
        rows = self.on_device()
        return pd.DataFrame(
            {c: self.curve(rows[rows["category"] == c]) for c in CATEGORIES if c != "workspace"}
        )

    def phase_of_events(self) -> tuple[np.ndarray, np.ndarray]:
        """(phase name, step) of every event, from the phase marks."""
        n = self.n_events
        if not len(self.phases):
            return np.full(n, "setup", dtype=object), np.ones(n, dtype=np.int64)
        evs = self.phases["ev"].to_numpy()
        idx = np.searchsorted(evs, np.arange(n), side="right") - 1
        ph = self.phases["phase"].to_numpy(dtype=object)
        st = self.phases["step"].to_numpy()
        phase = np.where(idx >= 0, ph[np.maximum(idx, 0)], "setup")
        step = np.where(idx >= 0, st[np.maximum(idx, 0)], 1)
        return phase, step

    # ---- queries ------------------------------------------------------------------------
    def live_at(self, ev: int, rows: pd.DataFrame | None = None) -> pd.DataFrame:
        """Storages live right after event `ev`, largest first."""
        rows = self.on_device() if rows is None else rows
        live = rows[(rows["created"] <= ev) & (rows["freed"] > ev)]
        return live.sort_values("bytes", ascending=False, kind="stable")

    def peak(self) -> "PeakPoint":
        """The first event at which live bytes are highest, and where it happened."""
        c = self.curve()
        ev = int(np.argmax(c)) if len(c) else 0
        phase, step = self.phase_of_events()
        made_here = self.on_device()
        made_here = made_here[made_here["created"] == ev].sort_values("bytes", ascending=False)
        op = str(made_here["op"].iloc[0]) if len(made_here) else ""
        module = str(made_here["module"].iloc[0]) if len(made_here) else ""
        return PeakPoint(bytes=int(c[ev]) if len(c) else 0, event=ev, step=int(step[ev]),
                         phase=str(phase[ev]), op=op, module=module)

    def by_category(self, ev: int) -> dict[str, int]:
        """Bytes live right after `ev`, per category (every category present, 0 if none)."""
        live = self.live_at(ev)
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
        phase, step = self.phase_of_events()
        labels = phase if key == "phase" else step
        s = pd.Series(c).groupby(pd.Series(labels)).max()
        if key == "phase":
            return {p: int(s[p]) for p in PHASES if p in s.index}
        return {int(k): int(v) for k, v in s.items()}

    def saved_before_backward(self) -> tuple[int, pd.DataFrame]:
        """(event, activations live there): the event just before the last step's backward,
        when everything saved for backward is held at once."""
        ph = self.phases
        back = ph[ph["phase"] == "backward"]
        if not len(back):
            return -1, self.storages.iloc[0:0]
        ev = int(back["ev"].iloc[-1]) - 1
        live = self.live_at(ev)
        return ev, live[live["category"] == "activation"]

    def idle(self, top: int | None = 10) -> pd.DataFrame:
        """Idle residency: bytes × events held between last use and free, largest first.

        Parameters, buffers and optimizer state are resident by design and left out; what is
        left is memory a program could have given back sooner (a gradient kept across
        zero_grad, a loss kept in a Python list, ...).
        """
        rows = self.on_device()
        rows = rows[~rows["category"].isin(["parameter", "buffer", "optimizer_state"])].copy()
        idle_events = (rows["freed"] - 1 - rows["last_use"]).clip(lower=0)
        rows["idle_events"] = idle_events
        rows["idle_byte_events"] = idle_events * rows["bytes"]
        rows = rows[rows["idle_byte_events"] > 0].sort_values(
            "idle_byte_events", ascending=False, kind="stable")
        return rows if top is None else rows.head(top)

    def idle_offenders(self, top: int | None = 10) -> pd.DataFrame:
        """`idle()` with the same tensor of every step folded into one row.

        A row is (category, module, shape, dtype, op, name); `count` says how many storages
        (usually one per step) it stands for, `idle_events` and `idle_byte_events` are sums.
        """
        keys = ["category", "module", "shape", "dtype", "op", "name"]
        rows = self.idle(top=None)
        if not len(rows):
            return rows.assign(count=pd.Series(dtype=np.int64))
        grouped = rows.groupby(keys, sort=False, dropna=False).agg(
            bytes=("bytes", "max"), count=("sid", "size"), idle_events=("idle_events", "sum"),
            idle_byte_events=("idle_byte_events", "sum")).reset_index()
        grouped = grouped.sort_values("idle_byte_events", ascending=False, kind="stable")
        return grouped if top is None else grouped.head(top)

    def resident_at_end(self) -> dict[str, int]:
        return self.by_category(self.n_events - 1)

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


def _storages(by_kind: dict[str, list[Record]]) -> pd.DataFrame:
    """One row per storage from the alloc/free/live/role/saved/unpack records."""
    allocs = by_kind.pop("alloc", [])
    df = pd.DataFrame.from_records(
        [(a["sid"], a["bytes"], a.get("dev", "cpu"), a.get("dtype", ""),
          "x".join(str(d) for d in a.get("shape", [])) if a.get("shape") else "",
          a.get("op", ""), a.get("mod", ""), a.get("ph", "setup"), a.get("step", 1), a["ev"],
          bool(a.get("pre", False)))
         for a in allocs],
        columns=["sid", "bytes", "device", "dtype", "shape", "op", "module", "phase", "step",
                 "created", "pre"],
    ).set_index("sid", drop=False)
    df["last_use"] = df["created"]
    df["freed"] = -1
    frees = by_kind.pop("free", [])
    if frees:
        sid = [f["sid"] for f in frees]
        df.loc[sid, "freed"] = [f["ev"] for f in frees]
        df.loc[sid, "last_use"] = [f.get("last", f["ev"] - 1) for f in frees]
    lives = by_kind.pop("live", [])
    if lives:
        df.loc[[r["sid"] for r in lives], "last_use"] = [r.get("last", -1) for r in lives]
    df["last_use"] = np.maximum(df["last_use"].to_numpy(), df["created"].to_numpy())

    saved = by_kind.pop("saved", [])
    df["saved_module"] = ""
    df["saved_ev"] = -1
    df["saved_last_ev"] = -1  # the last save (a storage saved by several ops)
    if saved:
        first = pd.DataFrame(saved).drop_duplicates("sid", keep="first").set_index("sid")
        first = first[first.index.isin(df.index)]
        df.loc[first.index, "saved_module"] = first.get("mod", "").fillna("").astype(str)
        df.loc[first.index, "saved_ev"] = first["ev"]
        last_save = pd.DataFrame(saved).drop_duplicates("sid", keep="last").set_index("sid")
        last_save = last_save[last_save.index.isin(df.index)]
        df.loc[last_save.index, "saved_last_ev"] = last_save["ev"]
    unpacks = by_kind.pop("unpack", [])
    df["unpack_ev"] = -1
    df["unpack_first_ev"] = -1  # the first unpack (a storage saved by several ops)
    if unpacks:
        last = pd.DataFrame(unpacks).drop_duplicates("sid", keep="last").set_index("sid")
        last = last[last.index.isin(df.index)]
        df.loc[last.index, "unpack_ev"] = last["ev"]
        first_un = pd.DataFrame(unpacks).drop_duplicates("sid", keep="first").set_index("sid")
        first_un = first_un[first_un.index.isin(df.index)]
        df.loc[first_un.index, "unpack_first_ev"] = first_un["ev"]

    df["category"], df["name"] = _categories(df, by_kind.pop("role", []), saved)
    # A parameter or buffer belongs to the module that owns it, whatever op made its storage.
    owned = df["category"].isin(["parameter", "buffer"]).to_numpy() & (df["name"] != "").to_numpy()
    df.loc[owned, "module"] = [n.rpartition(".")[0] for n in df.loc[owned, "name"]]
    for col in ("created", "last_use", "freed", "saved_ev", "unpack_ev", "bytes", "step",
                "saved_last_ev", "unpack_first_ev"):
        df[col] = df[col].astype(np.int64)
    return df[STORAGE_COLUMNS]


def _categories(df: pd.DataFrame, roles: list[Record], saved: list[Record]):
    """Resolve each storage's category: its highest-priority role, else by when it was made."""
    rank = {r: i for i, r in enumerate(ROLE_PRIORITY)}
    best: dict[int, tuple[int, str]] = {}
    names: dict[int, str] = {}
    for r in roles:
        k = rank.get(r["role"])
        if k is None:
            continue
        sid = r["sid"]
        if sid not in best or k < best[sid][0]:
            best[sid] = (k, r["role"])
            if r.get("name"):
                names[sid] = r["name"]
    for s in saved:
        k = rank["activation"]
        if s["sid"] not in best or k < best[s["sid"]][0]:
            best[s["sid"]] = (k, "activation")
    # Made during the run and in no role: a temporary. Made while setting up (or already
    # there when tracing began) and in no role: other.
    made_in_run = (df["phase"] != "setup").to_numpy() & ~df["pre"].to_numpy(dtype=bool)
    default = np.where(made_in_run, "temporary", "other")
    cats = [best[sid][1] if sid in best else d for sid, d in zip(df.index, default)]
    return cats, [names.get(sid, "") for sid in df.index]

