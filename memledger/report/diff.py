"""`memledger diff A B`: what grew between two ledgers, by category, module and tensor.

Everything is compared *at each ledger's own peak* (the moment that decides whether a run
fits), plus the allocator's measured peaks. Tensors are matched across runs by
(category, module, name-or-op): a tensor whose shape grew is "grown", one whose key is
absent from A is "new".
"""

from __future__ import annotations

import pandas as pd
from pydantic import ConfigDict, Field

from memledger.ledger.model import Ledger
from memledger.ledger.schema import CATEGORIES
from memledger.values import Value

DIFF_SCHEMA = "memledger.diff/1"


_M = Value   # memledger/values.py: the one frozen, key-strict base


class Delta(_M):
    a: int
    b: int
    delta: int = Field(description="b - a, bytes")


class ModuleDelta(Delta):
    module: str


class TensorDelta(_M):
    category: str
    module: str
    what: str = Field(description="parameter/buffer name, else the op that made it")
    shape: str = Field(description="shape of B's largest such tensor")
    dtype: str
    count_a: int
    count_b: int
    a: int
    b: int
    delta: int
    new: bool = Field(description="no tensor with this key was live at A's peak")
    gone: bool = Field(False, description="no tensor with this key was live at B's peak")


class Diff(_M):
    schema_: str = Field(DIFF_SCHEMA, alias="schema", serialization_alias="schema")
    a: str
    b: str
    peak: Delta
    measured: Delta | None = Field(description="allocator peaks; null unless both ledgers "
                                               "were measured")
    unmeasured: str = Field("", description="why `measured` is null: which ledger has no "
                            "allocator peak and why (a fake run, --no-measure)")
    at_peak: dict[str, Delta]
    by_module: list[ModuleDelta] = Field(description="live at the peak, by module, by |delta|")
    saved_by_module: list[ModuleDelta] = Field(description="saved for backward, by module")
    grown: list[TensorDelta] = Field(description="largest new or grown tensors, by delta")
    shrunk: list[TensorDelta] = Field(default_factory=list, description="largest gone or "
                                      "shrunk tensors, by |delta| (shape: A's)")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def _by(key: str, a: pd.DataFrame, b: pd.DataFrame, top: int) -> list[ModuleDelta]:
    sa, sb = a.groupby(key)["bytes"].sum(), b.groupby(key)["bytes"].sum()
    mods = sorted(set(sa.index) | set(sb.index))
    rows = [ModuleDelta(module=str(m), a=int(sa.get(m, 0)), b=int(sb.get(m, 0)),
                        delta=int(sb.get(m, 0)) - int(sa.get(m, 0))) for m in mods]
    rows = [r for r in rows if r.delta]
    rows.sort(key=lambda r: (-abs(r.delta), r.module))
    return rows[:top]


def _tensors(a: pd.DataFrame, b: pd.DataFrame, top: int) -> list[TensorDelta]:
    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        df = df.assign(what=df["name"].where(df["name"] != "", df["op"]))
        return df.sort_values("bytes", ascending=False, kind="stable")

    ka, kb = keyed(a), keyed(b)
    key = ["category", "module", "what"]
    ga = ka.groupby(key).agg(a=("bytes", "sum"), count_a=("bytes", "size"))
    gb = kb.groupby(key).agg(b=("bytes", "sum"), count_b=("bytes", "size"),
                             shape=("shape", "first"), dtype=("dtype", "first"))
    j = gb.join(ga, how="left")
    j["new"] = j["a"].isna()
    j = j.fillna({"a": 0, "count_a": 0})
    j["delta"] = j["b"] - j["a"]
    j = j[j["delta"] > 0].reset_index().sort_values(["delta", "category", "module", "what"],
                                                    ascending=[False, True, True, True])
    return [TensorDelta(category=r.category, module=r.module, what=r.what, shape=r.shape,
                        dtype=r.dtype, count_a=int(r.count_a), count_b=int(r.count_b),
                        a=int(r.a), b=int(r.b), delta=int(r.delta), new=bool(r.new))
            for r in j.head(top).itertuples(index=False)]


def _shrunk(a: pd.DataFrame, b: pd.DataFrame, top: int) -> list[TensorDelta]:
    """What grew from B to A, read the other way: gone or shrunk from A to B (what a
    category's net change hides when new tensors offset it)."""
    return [r.model_copy(update={"a": r.b, "b": r.a, "delta": -r.delta, "count_a": r.count_b,
                                 "count_b": r.count_a, "new": False, "gone": r.new})
            for r in _tensors(b, a, top)]


def _unmeasured(a: Ledger, b: Ledger, name_a: str, name_b: str) -> str:
    why = [f"{name} is a fake run" if led.header.get("fake") else
           f"{name} was traced with --no-measure"
           for name, led in ((name_a, a), (name_b, b)) if not led.measured]
    return "; ".join(why)


def diff_ledgers(a: Ledger, b: Ledger, name_a: str = "A", name_b: str = "B",
                 top: int = 10) -> Diff:
    pa, pb = a.peak(), b.peak()
    ca, cb = a.at_peak(), b.at_peak()
    measured = None
    if a.measured and b.measured:
        ma, mb = int(a.measured["peak_bytes"]), int(b.measured["peak_bytes"])
        measured = Delta(a=ma, b=mb, delta=mb - ma)
    la, lb = a.labelled(a.live_at(pa.event)), b.labelled(b.live_at(pb.event))
    sa, sb = a.labelled(a.saved_before_backward()[1]), b.labelled(b.saved_before_backward()[1])
    return Diff(
        a=name_a, b=name_b,
        peak=Delta(a=pa.bytes, b=pb.bytes, delta=pb.bytes - pa.bytes),
        measured=measured, unmeasured=_unmeasured(a, b, name_a, name_b),
        at_peak={c: Delta(a=ca.get(c, 0), b=cb.get(c, 0), delta=cb.get(c, 0) - ca.get(c, 0))
                 for c in CATEGORIES},
        by_module=_by("module", la, lb, top),
        saved_by_module=_by("saved_module", sa, sb, top),
        grown=_tensors(la, lb, top),
        shrunk=_shrunk(la, lb, top),
    )
