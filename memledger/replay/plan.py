"""`memledger plan`: the cheapest policy whose predicted peak fits a budget.

No torch here: candidates are built from the ledger's module scopes and judged by replay.

# Note [Plan candidates]
Memory policies pay off on the model's repeated blocks (`blocks.0` ... `blocks.N-1`, the
children of one ModuleList/Sequential with numbered names). For N blocks the candidates are

    none
    checkpoint on the first k blocks             k = 1..N
    selective  on the first k blocks             k = 1..N
    offload    on the first k blocks             k = 1..N
    checkpoint on the first k, offload the next j        k, j >= 1, k + j <= N

(the first blocks' activations live longest, from early forward to late backward). Each is
replayed; among those whose predicted peak fits, the least added time wins, then the lowest
peak. Example: 4 blocks give 1 + 3·4 + 6 = 19 candidates, replayed in milliseconds.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from memledger.errors import PolicyError
from memledger.ledger.model import Ledger
from memledger.replay.policies import Policy, parse_policy
from memledger.replay.predict import PolicyPrediction, predict

PLAN_SCHEMA = "memledger.plan/1"
_NUMBERED = re.compile(r"^(?P<prefix>.+)\.(?P<index>\d+)$")


class PlanReport(BaseModel):
    """The `memledger.plan/1` contract."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(PLAN_SCHEMA, alias="schema")
    budget_bytes: int
    baseline_peak_bytes: int
    fits: bool = Field(description="some candidate's predicted peak is within the budget")
    policy: str = Field(description="the chosen policy ('' when nothing fits)")
    predicted_peak_bytes: int = Field(description="of the chosen policy, else the lowest seen")
    predicted_added_time_s: float
    blocks: list[str] = Field(description="the repeated blocks the candidates act on")
    candidates: list[PolicyPrediction] = Field(description="every candidate, best first")
    time_model: str = Field("traced", description="as predict's: 'traced' or how modelled")

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def repeated_blocks(led: Ledger) -> list[str]:
    """The numbered children of the module list that holds the most saved activations."""
    paths = list(dict.fromkeys(str(m) for m in led.scopes["mod"])) if len(led.scopes) else []
    groups: dict[str, list[tuple[int, str]]] = {}
    for p in paths:
        m = _NUMBERED.match(p)
        if m:
            groups.setdefault(m["prefix"], []).append((int(m["index"]), p))
    groups = {k: v for k, v in groups.items() if len(v) >= 2}
    if not groups:
        return []
    saved = led.storages[led.storages["category"] == "activation"]

    def saved_bytes(prefix: str) -> int:
        mods = saved["saved_module"].astype(str)
        return int(saved.loc[mods.str.startswith(prefix + "."), "bytes"].sum())

    best = max(groups, key=lambda k: (saved_bytes(k), len(groups[k])))
    return [p for _, p in sorted(groups[best])]


def _selector(blocks: list[str], all_blocks: list[str]) -> str:
    """`blocks.*` for all of them, `blocks.[0-2]` for a run of single digits, else one each."""
    prefix = blocks[0].rpartition(".")[0]
    idx = [int(b.rpartition(".")[2]) for b in blocks]
    if blocks == all_blocks:
        return f"{prefix}.*"
    if len(blocks) == 1:
        return blocks[0]
    if idx == list(range(idx[0], idx[-1] + 1)) and idx[-1] <= 9:
        return f"{prefix}.[{idx[0]}-{idx[-1]}]"
    return ""


def _part(kind: str, blocks: list[str], all_blocks: list[str]) -> str:
    sel = _selector(blocks, all_blocks)
    return f"{kind}:{sel}" if sel else "+".join(f"{kind}:{b}" for b in blocks)


def candidates(blocks: list[str]) -> list[Policy]:
    """See Note [Plan candidates]."""
    texts = ["none"]
    n = len(blocks)
    for kind in ("checkpoint", "selective", "offload"):
        texts += [_part(kind, blocks[:k], blocks) for k in range(1, n + 1)]
    for k in range(1, n):
        for j in range(1, n - k + 1):
            texts.append(_part("checkpoint", blocks[:k], blocks) + "+"
                         + _part("offload", blocks[k:k + j], blocks))
    return [parse_policy(t) for t in texts]


def plan(led: Ledger, budget_bytes: int, step_time_s: float | None = None,
         bandwidth: float | None = None, flops: float | None = None) -> PlanReport:
    blocks = repeated_blocks(led)
    if not blocks:
        raise PolicyError("plan found no repeated blocks (numbered children such as blocks.0, "
                          "blocks.1) in the ledger's modules; use `memledger predict` with "
                          "your own --policy instead")
    report = predict(led, candidates(blocks), step_time_s=step_time_s, bandwidth=bandwidth,
                     flops=flops)
    ranked = sorted(report.policies, key=lambda p: (p.peak_bytes > budget_bytes,
                                                    p.added_time_s if p.peak_bytes <= budget_bytes
                                                    else p.peak_bytes, p.peak_bytes))
    best = ranked[0]
    fits = best.peak_bytes <= budget_bytes
    return PlanReport(budget_bytes=budget_bytes, baseline_peak_bytes=report.baseline_peak_bytes,
                      fits=fits, policy=best.policy if fits else "",
                      predicted_peak_bytes=best.peak_bytes,
                      predicted_added_time_s=best.added_time_s, blocks=blocks,
                      candidates=ranked, time_model=report.time_model)
