"""`memledger plan`: the policy with the least added time whose predicted peak fits a budget.

No torch here. The search is exact under the cost model: every per-block assignment of
none / checkpoint / offload / selective (with ranked save lists, memledger/replay/
block_options.py) on the ledger's repeated blocks, and on the modules beside them that save
a tenth of the model's activations (Note [Modules that are not blocks], memledger/replay/
lone_modules.py), is considered, not a fixed family.

# Note [Blocks add up]
Replay maps every policy onto one axis of two slots per original event (engine.py
`slot_curve`). Plan replays each (block, option) alone and keeps what it changes,
delta[b, o, s] = slots(block b under o) - slots(baseline), and its added time cost[b, o].
The assumption that makes blocks independent: **the live bytes of a mix are the baseline
plus the sum of each block's delta, and its added time the sum of each block's cost.** It
holds when each storage's fate depends only on the block that saved it (a block's drop,
offload, recompute segment and RNG state touch only its own storages; a segment inserted
before event e sees every other block as it is just before e). It fails when a storage
is saved by two selected blocks (replay then keeps it: neither block owns it). The repeated
blocks of a model do not do that under none / checkpoint / offload / selective with the
default save list; an op-level save list that keeps `add` does (a block's residual output,
which the next block saves as its input: selective:blocks.0:save=add,native_layer_norm +
offload:blocks.[1-2] on the tiny GPT summed 24,360,892 B where the full replay says
24,623,036 B). tests/unit/test_plan_exact.py checks it: on traced GPT and CNN ledgers,
replaying random mixes of the first four options gives exactly the summed curve. Plan
replays its answer in full; where it disagrees, it tightens the budget by the difference
and solves again (`assumption_held` says whether it had to).

One part of the time does not add up per block and is handled exactly beside it: a step
that re-runs anything pays a fixed cost once (Note [A checkpointed step's own cost],
memledger/trace/timing.py; ~0.05-0.3 ms on the MLP example). The table's costs leave it
out, `BlockTable.total` adds it once where any block re-runs, and `BlockTable.solve` takes
the cheaper of the best assignment overall (with it) and the best that re-runs no block
(without it): exact, because only an assignment that re-runs something pays it.

With the assumption, the peak constraint is linear in the choice and the cheapest choice is
an exact search (memledger/replay/solve.py, Note [Exact block choice]). Example (4 GPT
blocks, 7 options each): 28 replays, 7^4 = 2,401 assignments scored at once.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from memledger.errors import PolicyError
from memledger.ledger.model import Ledger
from memledger.ledger.names import numbered_layers
from memledger.replay.block_options import Option, block_options
from memledger.replay.costs import CostModel
from memledger.replay.engine import CPU_RNG_STATE_BYTES, movable, packs_of, replay
from memledger.replay.fake_time import prepare
from memledger.replay.lone_modules import MODULE_SHARE, lone_modules, saves_counter
from memledger.replay.lone_modules import related as _related
from memledger.replay.policies import parse_policy
from memledger.replay.predict import PolicyPrediction, cost_model, predict, time_caveats
from memledger.replay.prepared import Prepared, model_calls
from memledger.replay.solve import EXHAUSTIVE_MAX, Steps, reduce_steps, solve

PLAN_SCHEMA = "memledger.plan/1"
FRONT_POINTS = 16   # Pareto points listed at most (Note [Pareto front])
# a numbered module's container and index; a top-level one's container is '' (Note [A
# model that is itself a Sequential])
_NUMBERED = re.compile(r"^(?:(?P<prefix>.+)\.)?(?P<index>\d+)$")


class FrontPoint(BaseModel):
    """One point of the Pareto front: the least added time at this peak."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    peak_bytes: int
    added_time_s: float
    added_time_lo_s: float
    added_time_hi_s: float
    knee: bool = Field(False, description="the front's knee (docs/policies.md)")


class MeasuredChoice(BaseModel):
    """`plan --measure`: one policy run for real."""

    model_config = ConfigDict(extra="forbid")

    policy: str
    role: str = Field(description="chosen | runner-up")
    predicted_peak_bytes: int
    measured_peak_bytes: int
    predicted_added_time_s: float
    measured_added_time_s: float
    fits: bool = Field(description="measured peak within the budget")
    measured_added_interval_s: list[float] | None = Field(
        None, description="90 % bootstrap interval of measured_added_time_s "
        "(memledger/measure/interval.py)")
    measured_added_resolved: bool | None = Field(
        None, description="whether that interval lies within +-15 % of the measured time "
        "(false with fewer than 3 timed steps)")


class PlanReport(BaseModel):
    """The `memledger.plan/1` contract."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(PLAN_SCHEMA, alias="schema")
    budget_bytes: int
    baseline_peak_bytes: int
    fits: bool = Field(description="some assignment's predicted peak is within the budget")
    policy: str = Field(description="the chosen policy ('' when nothing fits)")
    predicted_peak_bytes: int = Field(description="of the chosen policy, else the lowest seen")
    predicted_added_time_s: float
    added_time_lo_s: float = 0.0
    added_time_hi_s: float = 0.0
    blocks: list[str] = Field(description="the repeated blocks the search acts on")
    modules: list[str] = Field(default_factory=list, description="the modules beside the "
                               "blocks the search acts on, each selected by its path (Note "
                               "[Modules that are not blocks])")
    left_out: list[str] = Field(default_factory=list, description="repeated blocks that save "
                                "nothing for backward in their calls, left out of the search: "
                                "no option on them changes the peak (Note [Blocks that save "
                                "nothing])")
    units: list[list[str]] = Field(default_factory=list, description="blocks searched as "
                                   "one, with one option (they save the same storages: Note "
                                   "[Blocks that share a save]); [] when each is its own")
    choice: list[str] = Field(default_factory=list, description="the option per block, "
                              "then per module")
    options: list[str] = Field(default_factory=list, description="the options per block")
    method: str = Field("", description="exhaustive | dp (both exact)")
    assignments: float = Field(0, description="options ** units (blocks): the space "
                               "searched")
    assumption_held: bool = Field(True, description="the full replay of the answer agreed "
                                  "with the summed block effects (Note [Blocks add up])")
    runner_up: str = Field("", description="the best fitting policy without the chosen "
                           "plan's costliest option kind")
    candidates: list[PolicyPrediction] = Field(description="chosen, runner-up, then the "
                                               "front, best first")
    front: list[FrontPoint] = Field(default_factory=list, description="Pareto front: peak "
                                    "vs least added time, lowest peak first")
    front_complete: bool = Field(True, description="every point of the front is listed; "
                                 "false: thinned (endpoints and knee kept)")
    measured: list[MeasuredChoice] = Field(default_factory=list)
    time_model: str = Field("traced", description="as predict's: 'traced' or how modelled")
    refused: dict[str, str] = Field(default_factory=dict, description="options replay "
                                    "refused on some block, with the first reason (the KV "
                                    "cache a block writes: checkpoint and selective)")
    refused_on: dict[str, list[str]] = Field(
        default_factory=dict, description="the blocks an option in `refused` was refused on, "
        "where it was refused on some blocks only (Note [Options refused on some blocks])")
    time_caveats: list[str] = Field(default_factory=list, description="why the predicted "
                                    "added times may be far off, a line each (as predict "
                                    "and compare say them); [] when this model's own probes "
                                    "priced them on a quiet machine")

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True)


def repeated_blocks(led: Ledger, prep: Prepared | None = None) -> list[str]:
    """The numbered children of the model's module list that holds the most saved
    activations (not another top-level module's: policies act on the model only).
    `prep`: the ledger's (built here where the ledger has save records and none is given)."""
    sc = led.scopes
    if len(sc):
        sc = sc[model_calls(sc, led)]
    paths = list(dict.fromkeys(str(m) for m in sc["mod"])) if len(sc) else []
    groups: dict[str, list[tuple[int, str]]] = {}
    for p in paths:
        m = _NUMBERED.match(p)
        if m:
            groups.setdefault(m["prefix"] or "", []).append((int(m["index"]), p))
    if "" in groups and "cls" in sc:   # Note [A model that is itself a Sequential]
        pipeline = numbered_layers(zip(sc["mod"].astype(str), sc["cls"].astype(str)))
        groups[""] = [(i, p) for i, p in groups[""] if p not in pipeline]
    groups = {k: v for k, v in groups.items() if len(v) >= 2}
    calls = _CallSpans(sc)
    through = _through_uncalled(paths, calls)
    # Note [One item's parts are no stack]
    parts = {p for group in through.values() for _, p in group}
    groups = {k: v for k, v in groups.items() if not all(p in parts for _, p in v)}
    if not groups and not through:
        return []
    count = saves_counter(led, prep)   # Note [A block's saves, by its calls]

    def saved_bytes(members: list[tuple[int, str]]) -> int:
        return count([m for _, m in members])

    candidates = [*groups.values(), *through.values()]
    best = max(candidates, key=lambda v: (saved_bytes(v), len(v)))
    stacks = _sibling_stacks(best, candidates, sc, saved_bytes)
    taken = [p for group in (best, *stacks) for _, p in group]
    parts = [part for group in (best, *stacks)   # Note [Parts of the stacks beside]
             for part in _other_parts(group, through, saved_bytes, taken)]
    return [p for _, p in sorted(best)] + [
        p for p in dict.fromkeys(   # a group both ways found is listed once
            p for group in [*stacks, *parts] for _, p in sorted(group))]


# Note [One item's parts are no stack]
# Where a list's items never run and their parts do (Note [Items called in parts]), each
# item's parts are also a numbered group of their own (`layers.0.0`, `layers.0.1`,
# `layers.0.2`: prefix `layers.0`), and that group competed with the groups across the
# items (`layers.*.0`, ...). With few items and several parts one item's parts save the
# most, and plan searched that one item: on iTransformer2D (tests/clients/
# train_itransformer.py --model 2d --revin, two layers of [gate loop, causal time block,
# variate block], 2 steps) its blocks were `layers.0.0-2` (and a prediction head),
# `layers.1.*` never searched, and its front ended at 1,731,948 B (`offload:layers.0.*`)
# where `offload:layers.*.*` is predicted and measured 780,156 B of 2,966,124. A numbered
# group whose members all sit in groups across the items is one item's parts, no stack:
# it is left out, and the groups across the items (each part's stack, the others beside
# it by Note [Parts of the stacks beside]) take all of them. A list of one item has no
# group across the items, and its parts stay its blocks.


# Note [A model that is itself a Sequential]
# mlp-mixer-pytorch's `MLPMixer(...)` returns an `nn.Sequential` (Rearrange, Linear, the
# blocks, LayerNorm, Reduce, Linear), so its blocks are the top-level modules `2`, `3`, ...
# A numbered group needed a container's name before the index, so these were no group: on
# tests/clients/train_mlp_mixer.py (2 steps) plan took the two halves of block `2` (`2.0`,
# `2.1`) as the model's blocks and never block `3`: at 80 % of the 213,364 B peak it chose
# `offload:2.*` (159,104 B) and its front knew nothing lower, where offloading both
# blocks (`offload:[2-3]`) is predicted and measured 152,928 B. The top-level modules are a
# group now, less the pipeline's layers between the blocks (`numbered_layers`: the patch
# embedding, the final norm, the head, as `show`'s per-block table reads them), and the
# selectors write their indices (`[2-3]`): a bare `*` would select those layers too.
#
# Note [Items called in parts]
# An item that never runs may hold several modules that do, each the outermost call at
# its place (Note [Blocks inside items that never run]): performer-pytorch's
# `SequentialSequence` keeps each layer as a `ModuleList([attn, ff])` and calls the two
# halves itself, so `layers.{i}` never runs and `layers.{i}.0`, `layers.{i}.1` do. Each
# half is a group of its own (prefix `layers`, suffix `0` or `1`), and plan took the one
# that saves most, the attention halves, as the blocks: on tests/clients/
# train_performer.py --mode lm (2 steps) `plan --budget 540KiB` said "no candidate fits;
# the lowest predicted peak is 579.0 KiB (592,916 bytes)" where `offload:` on both halves
# is predicted and measured 535,284 B. So the other groups under the same items (same
# prefix, another suffix) that save activations in their calls and neither hold nor sit
# inside a block already taken are blocks too, a stack each (`_stacks`: `layers.*.0`,
# `layers.*.1`; their paths starred share one pattern, `layers.*.*`, so a stack is told
# by the segment its blocks differ in, the others kept).
#
# Note [Parts of the stacks beside]
# The other parts were looked for beside the chosen group only, not beside the stacks
# found next to it (Note [Stacks beside the blocks]), and a stack's other parts share its
# starred path (`layers.*.*`), so they were no stack of their own either.
# hourglass-transformer-pytorch's nested hourglass holds a `Transformer` at each place
# (`pre_transformer`, `post_transformer`, `valley_transformer.pre_transformer`, ...),
# each with its layers as `ModuleList([attn, ff])` items called in halves: plan took
# `post_transformer.layers.*.1` (the feed-forward halves), its attention halves, and the
# feed-forward halves of every other Transformer, but none of their attention halves,
# 20 blocks of 28: on tests/clients/train_hourglass.py --batch 16 (1 step) `plan` said
# "no candidate fits; the lowest predicted peak is 988,876 bytes" where offloading all 28
# is predicted and measured 754,632 B. So each stack taken has its other parts too;
# `taken` (every block so far, extended here) keeps a part from being taken twice.
def _other_parts(best: list[tuple[int, str]],
                 through: dict[tuple[str, str], list[tuple[int, str]]],
                 saved_bytes, taken: list[str]) -> list[list[tuple[int, str]]]:
    """The groups of the other modules called inside the items `best` is a part of
    (Note [Items called in parts]), most saved first; [] unless `best` is such a group.
    Those not related to a path in `taken`, which grows by the groups returned."""
    key = next((k for k, v in through.items() if v is best), None)
    if key is None:
        return []
    out = []
    for (prefix, _), group in sorted(((k, g) for k, g in through.items()
                                      if k[0] == key[0] and k != key),
                                     key=lambda kg: -saved_bytes(kg[1])):
        paths = [p for _, p in group]
        if any(_related(p, t) for p in paths for t in taken) or saved_bytes(group) <= 0:
            continue
        out.append(group)
        taken += paths
    return out


# Note [Stacks beside the blocks]
# An encoder-decoder holds its blocks in two module lists (T5's `encoder.block` and
# `decoder.block`, the same class). Plan took the one holding the most saved activations
# as the blocks and never looked at the other: on chronos-forecasting's original Chronos
# (tests/clients/train_chronos.py --mode chronos, a T5 over tokenized series, 1 step)
# `plan` at 238,548 B said "no candidate fits; the lowest predicted peak is 364,606 B"
# (`offload:encoder.block.*`) while `offload:encoder.block.*+offload:decoder.block.*` is
# predicted and measured 238,548 B. So the other numbered groups of the model whose
# members are of the same classes as the chosen group's, that save activations in their
# calls and neither hold nor sit inside a block already taken, are blocks too, each
# stack in its own selectors (`_selectors` splits the blocks by their paths' pattern;
# a stack whose pattern is already taken is left out, so the split stays exact). A group
# of another class is a stack too where each group is of one class and the two sit at the
# same place of two branches, their paths one named segment apart (BART's
# `model.encoder.layers.*` of BartEncoderLayer and `model.decoder.layers.*` of
# BartDecoderLayer: `plan --budget 60%` on a 3 + 3-layer BART said no candidate fits,
# the lowest 7.0 MiB with the decoder's offloaded, while both offloaded are 5.0 MiB;
# tests/clients/test_hf_seq2seq_clients.py). The two may be of mixed classes each: a UNet's
# down blocks (DownBlock2D, AttnDownBlock2D) and up blocks, `down_blocks.*` and
# `up_blocks.*`; plan at 80 % of UNet2DModel's peak said no candidate fits (the up blocks
# alone, 3.5 MiB) where both offloaded are 3,389,528 B (tests/clients/
# test_diffusers_clients.py). Groups of mixed classes elsewhere (a resnet list inside one
# block beside the model's blocks) are not added: which of a model's many numbered groups
# are its stacks is then a guess. The blocks may sit in items that never run (Note [Blocks
# inside items that never run]): x-unet's `XUnet` keeps each stage as a ModuleList
# (`downs.{i}` = [ResnetBlock, blocks, attention, downsample]), so its blocks are the group
# `downs.*.0`, and the stacks beside it were never looked for (only a numbered group of
# calls had them): `plan` at 1,100,000 B on tests/clients/train_xunet.py `--xattnres`
# (16 x 16, 1 step) said no candidate fits, the lowest 1,207,452 B (`offload:downs.*.0`),
# where `offload:downs.0.0+offload:consolidator.fmap_convs.*` (ResnetBlocks too) is
# predicted and measured 1,080,700 B. Such a group now has its stacks beside it as well,
# and those may be groups inside items that never run too (`ups.*.0`).
# Note [Options refused on some blocks]
# An option replay refuses on one block (checkpoint on a T5 decoder block that writes the
# EncoderDecoderCache) stays open to the others (the encoder's blocks, Note [Stacks beside
# the blocks]). `plan` printed "checkpoint, selective ruled out: each would re-run
# decoder.block.0, ..." as if the search had not used them at all; it says which blocks
# now ("ruled out on decoder.block.*"), and `refused_on` in the JSON lists them.
def _sibling_stacks(best: list[tuple[int, str]], groups: list[list[tuple[int, str]]],
                    sc, saved_bytes) -> list[list[tuple[int, str]]]:
    """The groups (numbered, or inside items that never run) beside `best` that are stacks
    of the same blocks (Note [Stacks beside the blocks]), most saved first."""
    if not len(sc) or "cls" not in sc:
        return []
    cls = dict(zip(sc["mod"].astype(str), sc["cls"].astype(str)))
    classes = {cls.get(p, "") for _, p in best}
    if "" in classes:
        return []
    taken = [p for _, p in best]
    patterns = {_pattern(taken[0])}
    out = []
    for group in sorted((g for g in groups if g is not best),
                        key=lambda g: -saved_bytes(g)):
        paths = [p for _, p in group]
        mine = {cls.get(p, "") for p in paths}
        alike = mine == classes or ("" not in mine and _one_branch_apart(paths[0], taken[0]))
        if not alike or _pattern(paths[0]) in patterns \
                or any(_related(p, t) for p in paths for t in taken) \
                or saved_bytes(group) <= 0:
            continue
        out.append(group)
        taken += paths
        patterns.add(_pattern(paths[0]))
    return out


def _one_branch_apart(a: str, b: str) -> bool:
    """Blocks at the same place of two branches (`model.encoder.layers.0`,
    `model.decoder.layers.0`): their starred paths differ in one named segment only
    (Note [Stacks beside the blocks])."""
    pa, pb = _pattern(a).split("."), _pattern(b).split(".")
    return len(pa) == len(pb) and sum(x != y for x, y in zip(pa, pb)) == 1 and \
        pa[-1] == pb[-1] == "*"


def _pattern(path: str) -> str:
    """A block's path with every index starred: the same for every block of one stack."""
    return ".".join("*" if x.isdigit() else x for x in path.split("."))


class _CallSpans:
    """The model's module calls by path: (ev0, ev1) spans, sorted by start."""

    def __init__(self, sc) -> None:
        self._at: dict[str, tuple[int, int]] = {}   # path -> its rows in the sorted arrays
        self._ev0 = self._ev1 = np.zeros(0, dtype=np.int64)
        if not len(sc):
            return
        codes, names = pd.factorize(sc["mod"].astype(str))
        order = np.lexsort((sc["ev1"].to_numpy(), sc["ev0"].to_numpy(), codes))
        self._ev0, self._ev1 = sc["ev0"].to_numpy()[order], sc["ev1"].to_numpy()[order]
        sorted_codes = codes[order]
        firsts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        lasts = np.r_[firsts[1:], len(order)]
        self._at = dict(zip(names[sorted_codes[firsts]].tolist(),
                            zip(firsts.tolist(), lasts.tolist())))

    def _spans(self, path: str) -> tuple[np.ndarray, np.ndarray] | None:
        at = self._at.get(path)
        return None if at is None else (self._ev0[at[0]:at[1]], self._ev1[at[0]:at[1]])

    def inside(self, path: str, events: np.ndarray) -> np.ndarray:
        """Which `events` fall within a call of `path` (the latest call begun by then; a
        call's ops have events ev0 <= e < ev1)."""
        spans = self._spans(path)
        out = np.zeros(len(events), dtype=bool)
        if spans is None or not len(events):
            return out
        i = np.searchsorted(spans[0], events, side="right") - 1
        ok = i >= 0
        out[ok] = events[ok] < spans[1][i[ok]]
        return out

    def encloses(self, outer: str, path: str) -> bool:
        """Does some call of `outer` contain a call of `path`? (Plain Python: called once
        per path and ancestor, on a few calls each.)"""
        spans, around = self._spans(path), self._spans(outer)
        if spans is None or around is None:
            return False
        starts, ends = around[0].tolist(), around[1].tolist()
        for a, b in zip(spans[0].tolist(), spans[1].tolist()):
            i = bisect.bisect_right(starts, a) - 1
            if i >= 0 and b <= ends[i]:
                return True
        return False


# Note [A block's saves, by its calls]
# A candidate group is ranked by the activations its members save. Read by the saving
# module's path, a module that two paths reach counted under the first only:
# reformer-pytorch's `ReversibleSequence` holds each layer's attention and feed-forward
# twice, as `blocks.{i}.f.net` (inside the reversible wrappers, the path `named_modules()`
# gives) and as the `f` and `g` of `irrev_blocks.{i}`, the blocks the irreversible path
# calls. `irrev_blocks.*` read as saving nothing of their own, and plan's blocks were the
# attention halves alone, `blocks.{i}.f.net`: "no candidate fits 950KiB; the lowest
# predicted peak is 1.0 MiB" where `offload:...irrev_blocks.*` is predicted and measured
# 902.4 KiB (tests/clients/train_reformer.py --mode plain). And a block a custom backward
# calls again (the reversible path's `blocks.{i}`, called under no_grad in forward) took
# the saves of its calls in backward, where no policy acts. So a group's saves are those
# made inside its members' forward calls under gradients, whoever made them.
# Which call holds a save is the replay's own count (`packs_of`, replay/engine.py: Rule 5,
# as `_pack_call` reads it for every policy and predict for its "saved nothing"): a save
# is recorded one event before the op that saves its input, so a call on [ev0, ev1) holds
# the saves on [ev0 - 1, ev1 - 1], a boundary save by the module that saved. Read on the
# call's own events [ev0, ev1), a block whose first op saves its input (a matmul, an
# embedding, a conv: no `t` op before it) lost that save, and took the save of its output
# by the next call's first op: in a chain of blocks, the first block's input swapped for
# the last block's output, and a group of blocks whose first ops save their wide inputs
# read as saving nothing. tests/clients/train_plan_saves.py --case rank (3 x `downs.{i}`,
# wide to narrow, each followed by `tower.ups.{i}`, narrow to wide; 2 steps): `tower.ups.*`
# read as saving every wide (64, 256) fp32 tensor (393,216 B) and `downs.*` none, where
# the replay gives `downs.*` those 393,216 B and `tower.ups.*` their narrow inputs
# (12,288 B); `plan --budget 300000` searched `tower.ups.*` and said "no candidate fits;
# the lowest predicted peak is 397,060 B" (the baseline) where `offload:downs.[0-1]` is
# predicted and measured 265,988 B.
# Note [Blocks inside items that never run]
# A module list whose items never run as module calls (normflows' `flows`: each flow layer
# runs through its `inverse` when the model is fitted by `forward_kld`, Note [Modules run
# through another method] in replay/policies.py) has no numbered children among the calls;
# the numbered group left was one MLP's own layers (`flows.4.flows.1.param_map.net.0-4`),
# and `plan` said "no candidate fits 150KiB; the lowest predicted peak is 164.5 KiB" where
# `checkpoint:flows.*.flows.1.param_map` is predicted 120.8 KiB (tests/clients/
# train_normflows.py, realnvp). The blocks there are the outermost modules called inside
# each item, at one path under it: `flows.{i}.flows.1.param_map`, selected as
# `flows.*.flows.1.param_map`. Such groups are candidates beside the numbered children;
# where the items themselves are calls (a transformer's `h.{i}`), there are none.
#
# Note [Blocks whose work runs outside their calls]
# An item may run as a call that does none of its work: zuko's lazy transforms
# (`transform.transforms.{i}`, a `MaskedAutoregressiveTransform`) return a torch
# `Transform` from `forward(c)`, and their `hyper` network runs later, inside `log_prob`,
# outside any call of the item. The numbered items were the blocks (their saves counted by
# path), every option on them saved nothing, and `plan --budget 90%` said "no candidate
# fits" where `checkpoint:transform.transforms.*.hyper` is predicted and measured 378,396 B
# of 427,932 (tests/clients/train_zuko.py, nsf). So an item counts as running around a
# module only where one of its calls contains one of the module's (and, Note [A block's
# saves, by its calls], a group is ranked by the saves made inside its members' calls).
def _through_uncalled(paths: list[str], calls: _CallSpans) -> dict[tuple[str, str],
                                                                list[tuple[int, str]]]:
    """{(prefix, suffix): [(index, path)]}: called modules at `prefix.{index}.suffix`, where
    no call of `prefix.{index}` nor of any module between it and the called one contains a
    call of it, for at least two indices (Notes [Blocks inside items that never run],
    [Blocks whose work runs outside their calls])."""
    out: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for p in paths:
        parts = p.split(".")
        for j in range(len(parts) - 2, -1, -1):
            above = ".".join(parts[:j + 1])
            if calls.encloses(above, p):
                break   # an item that runs around it, or a call between: not outermost
            if parts[j].isdigit() and j > 0 and not any(
                    calls.encloses(".".join(parts[:k]), p) for k in range(j + 2, len(parts))):
                out.setdefault((".".join(parts[:j]), ".".join(parts[j + 1:])), []).append(
                    (int(parts[j]), p))
    return {k: v for k, v in out.items() if len(v) >= 2}


# Note [Blocks that save nothing]
# A repeated block may save nothing for backward in its calls: MEGABYTE-pytorch's
# `to_next_transformer_projections` holds a projection per stage and an `nn.Identity` for
# the last, which runs no op. Its options (checkpoint, offload, selective) change nothing,
# yet the exact search took each: 4 options more per such block, the states multiplied by
# 4 (tests/clients/train_plan_saves.py --case identity: 64 assignments on 3 blocks, 16 on
# the 2 that save). A block none of whose calls holds a `saved` record, counted as the
# replay counts them (`packs_of`, Rule 5: the same count as Note [A block's saves, by its
# calls] and predict's "saved nothing"), is left out of the search and listed in the
# report (`left_out`), and the selectors of the policy plan writes leave it out too
# (`blocks.[0-1]`, not `blocks.*`). A ledger without save records searches every block.
# Where no block saves anything, they are all searched, as before: the answer is the
# baseline, fitting the budget or not (exit 0 or 1, as for any plan), and the command says
# why where it knows: blocks the script checkpoints itself save nothing in their calls (the
# checkpoint holds their inputs), and `plan --budget` there had said "the script
# checkpoints 2 module(s) itself ... turn its checkpointing off" (exit 1) where a refusal
# (exit 2) that blocks "save nothing" now stood (tests/integration/test_script_checkpoint.py).
def saving_blocks(prep: Prepared, blocks: list[str]) -> tuple[list[str], list[str]]:
    """(the blocks whose calls save something, those that save nothing), each in block
    order (Note [Blocks that save nothing]); every block searched where none saves."""
    if prep.pack_ev is None or not len(prep.pack_ev):
        return blocks, []
    empty = {b for b in blocks if not packs_of(prep, [b]).any()}
    if len(empty) == len(blocks):
        return blocks, []
    return [b for b in blocks if b not in empty], [b for b in blocks if b in empty]


# Note [Blocks that share a save]
# Note [Blocks add up] holds for blocks that own what they save. Numbered children that are
# layers rather than blocks do not: in `nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)`
# the ReLU's output is saved by the ReLU (for its backward) and by the next Linear (its
# input). Offloading either alone leaves it where it is (the other still holds it), both
# together move it: the mix saves more than the sum of its parts. Stable-Baselines3's
# policies are such Sequentials (`q_net.0-4`, `critic.qf0.0-4`,
# `mlp_extractor.policy_net.0-3`): plan searched "1,024 assignments (4 options on 5
# blocks, exhaustive, exact)" of DQN's `q_net.*` and said "no candidate fits 39,700 bytes;
# the lowest predicted peak is 40,000", while predict gives `offload:q_net.*` 39,620
# (and measure the same). So blocks any storage is saved by two of are planned as one unit,
# one option for all of them (`units`); blocks that share nothing, a transformer's or a
# CNN's, are each a unit as before. Found from the ledger's `saved` records. Only a save of
# a storage a policy can move joins two blocks (`movable`, replay/engine.py): a parameter
# stays on the device whoever saves it. sinabs' neurons take their `spike_threshold`
# Parameter from one default-argument tensor, `torch.tensor(1.0)`, so every LIF of a
# model holds that one storage, and each saves it (the reset's `spikes * threshold`);
# the two LIFs of tests/clients/train_sinabs.py `--mode dense` were one unit, and so
# neither was searched beside the blocks (Note [Modules that are not blocks], rule 4):
# plan searched the two Linears after them only and at 75 % of the 22,504 B
# baseline said "no candidate fits; the lowest predicted peak is 20,968 bytes", where
# `offload:*` is predicted and measured 15,344 B.
def block_units(prep: Prepared, blocks: list[str]) -> list[list[int]]:
    """`blocks` (indices) grouped into units, in block order: two blocks that save one
    storage are in one unit (Note [Blocks that share a save])."""
    parent = list(range(len(blocks)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    names = prep.pack_mod_names if prep.pack_mod_names is not None else np.array([], object)
    member = np.array([next((b for b, block in enumerate(blocks)
                             if str(n) == block or str(n).startswith(block + ".")), -1)
                       for n in names], dtype=np.int64)
    if len(member) and prep.pack_row is not None and len(prep.pack_row):
        who = member[prep.pack_mod_code]
        ok = (who >= 0) & movable(prep)[prep.pack_row]
        first: dict[int, int] = {}
        for row, b in zip(prep.pack_row[ok].tolist(), who[ok].tolist()):
            a = first.setdefault(row, b)
            if a != b:
                parent[root(b)] = root(a)
    units: dict[int, list[int]] = {}
    for b in range(len(blocks)):
        units.setdefault(root(b), []).append(b)
    return sorted(units.values())


def _selectors(blocks: list[str], all_blocks: list[str]) -> list[str]:
    """Short globs that select exactly `blocks`: `blocks.*` for all of them, else one per
    run of indices sharing all but the last digit: `blocks.[0-2]`, `blocks.[0245]`,
    `blocks.1[0146]`, a single block by its path; per stack where the blocks are several
    (Note [Stacks beside the blocks]: `encoder.block.*`, `decoder.block.[0-1]`)."""
    stacks = _stacks(all_blocks)
    if len(stacks) > 1:
        return [sel for stack in stacks.values()
                if (mine := [b for b in blocks if b in stack])
                for sel in _stack_selectors(mine, stack)]
    return _stack_selectors(blocks, all_blocks)


def _varying(split: list[list[str]]) -> int:
    """The segment the blocks' paths differ in first: the last one, or an index inside them
    (Note [Blocks inside items that never run]: `flows.{i}.flows.1.param_map`); -1 where
    their lengths differ."""
    return next((k for k in range(len(split[0])) if len({p[k] for p in split}) > 1),
                len(split[0]) - 1) if all(len(p) == len(split[0]) for p in split) else -1


def _stacks(all_blocks: list[str]) -> dict[str, list[str]]:
    """The blocks by stack: by their starred paths (Note [Stacks beside the blocks]), and
    within one such pattern by every segment but the one they differ in first (Note
    [Items called in parts]: `layers.{i}.0` and `layers.{i}.1` are two stacks)."""
    by_pattern: dict[str, list[str]] = {}
    for b in all_blocks:
        by_pattern.setdefault(_pattern(b), []).append(b)
    stacks: dict[str, list[str]] = {}
    for group in by_pattern.values():
        split = [b.split(".") for b in group]
        j = _varying(split)
        for b, parts in zip(group, split):
            key = ".".join("*" if k == j else x for k, x in enumerate(parts)) if j >= 0 \
                else _pattern(b)
            stacks.setdefault(key, []).append(b)
    return stacks


def _stack_selectors(blocks: list[str], all_blocks: list[str]) -> list[str]:
    """`_selectors` within one stack."""
    split = [b.split(".") for b in all_blocks]
    j = _varying(split)
    head = blocks[0].split(".")
    prefix, tail = ".".join(head[:j]), "".join("." + x for x in head[j + 1:]) if j >= 0 else ""
    if j < 0:
        prefix = blocks[0].rpartition(".")[0]
    dot = "." if prefix else ""   # a top-level block's path is its index alone
    if blocks == all_blocks and prefix:
        return [f"{prefix}.*{tail}"]
    # at the top level `*` would select the model's other children too (Note [A model that
    # is itself a Sequential]): the indices are written out
    by_tens: dict[str, list[str]] = {}
    for b in blocks:
        idx = b.split(".")[j]
        by_tens.setdefault(idx[:-1], []).append(idx[-1])
    out = []
    for tens, digits in by_tens.items():
        if len(digits) == 1:
            out.append(f"{prefix}{dot}{tens}{digits[0]}{tail}")
            continue
        d = sorted(int(x) for x in digits)
        cls = f"{d[0]}-{d[-1]}" if d == list(range(d[0], d[-1] + 1)) else "".join(map(str, d))
        out.append(f"{prefix}{dot}{tens}[{cls}]{tail}")
    return out


def unit_selectors(names: list[str], every: list[str], lone=()) -> list[str]:
    """Selectors of some of the names searched: the repeated blocks among them by
    `_selectors` over `every` (the repeated blocks, searched and left out), then each
    module beside them (`lone`, Note [Modules that are not blocks]) by its own path."""
    rep = [n for n in names if n not in lone]
    return (_selectors(rep, every) if rep else []) + [n for n in names if n in lone]


def policy_text(blocks: list[str], options: list[Option], choice,
                every: list[str] | None = None, lone=()) -> str:
    """The policy string of one option per block, parts in block order. `every`: the
    blocks the selectors tell them from (`blocks` and those left out of the search, Note
    [Blocks that save nothing]); `blocks` by default. `lone`: the names in `blocks` that
    are modules beside the blocks, selected by their paths (Note [Modules that are not
    blocks])."""
    groups: dict[int, list[str]] = {}
    for b, o in zip(blocks, choice):
        if options[o].kind != "none":
            groups.setdefault(int(o), []).append(b)
    every = every or [b for b in blocks if b not in lone]
    return "+".join(options[o].part(sel) for o, bs in groups.items()
                    for sel in unit_selectors(bs, every, lone)) or "none"


@dataclass
class BlockTable:
    """Each (block, option) replayed alone: its effect on the slot curve and its cost (Note
    [Blocks add up]), kept as solve.py's run columns: the budget check of column r is
    Σ_b delta[b, o_b, r] + floor[r] + workspace <= budget."""

    blocks: list[str]
    options: list[Option]
    delta: np.ndarray         # int64 (blocks, options, columns)
    floor: np.ndarray         # int64 (columns)
    cost: np.ndarray          # float seconds (blocks, options)
    lo: np.ndarray
    hi: np.ndarray
    workspace: int
    slots: int = 0            # slots before reduction
    refused: dict = field(default_factory=dict)   # option label -> first refusal, one line
    # option label -> the blocks it was refused on (Note [Options refused on some blocks])
    refused_on: dict = field(default_factory=dict)
    # Note [A checkpointed step's own cost]: paid once by a step that re-runs any block,
    # left out of `cost` (seconds: cost, lo, hi); `reruns`: per option, whether it re-runs
    step: dict = field(default_factory=lambda: {"cost": 0.0, "lo": 0.0, "hi": 0.0})
    reruns: np.ndarray = None
    # the search's units (Note [Blocks that share a save]): indices into `blocks`, one row
    # of delta and cost each; None: every block its own unit
    units: list[list[int]] = None
    # blocks left out of the search (Note [Blocks that save nothing]): selectors must not
    # take them in (`blocks.*` where `blocks.2` was left out is `blocks.[0-1]`)
    left_out: list[str] = field(default_factory=list)
    # the names in `blocks` that are modules beside the repeated blocks (Note [Modules
    # that are not blocks]): each selected by its path
    modules: list[str] = field(default_factory=list)

    def per_block(self, choice) -> list[int]:
        """A choice per unit as the option of each block."""
        if self.units is None:
            return [int(o) for o in choice]
        out = [0] * len(self.blocks)
        for members, o in zip(self.units, choice):
            for b in members:
                out[b] = int(o)
        return out

    def peak(self, choice) -> int:
        d = self.delta[np.arange(len(self.cost)), np.asarray(choice)].sum(axis=0)
        return int((d + self.floor).max()) + self.workspace

    def total(self, choice, which: str = "cost") -> float:
        c = np.asarray(choice)
        once = self.step[which] if self.reruns is not None and self.reruns[c].any() else 0.0
        return float(getattr(self, which)[np.arange(len(self.cost)), c].sum()) + once

    def solve(self, budget_bytes: int, allowed: np.ndarray | None = None,
              stats: dict | None = None):
        """The cheapest fitting assignment under the per-block costs plus the step's own
        cost once: the best of any assignment (the step's cost added if it re-runs) and the
        best that re-runs nothing; exact, since an assignment that re-runs nothing never
        pays it (Note [Blocks add up])."""
        cap = budget_bytes - self.workspace - self.floor
        merge = self.delta.shape[2] > 8 * len(self.cost)
        choice, _ = solve(self.delta, self.cost, cap, allowed, merge=merge, stats=stats)
        if choice is None or self.reruns is None or not self.step["cost"] \
                or not self.reruns[choice].any():
            return choice, (self.total(choice) if choice is not None else float("inf"))
        no_rerun = np.broadcast_to(~self.reruns, self.cost.shape)
        alt, _ = solve(self.delta, self.cost, cap, no_rerun if allowed is None
                       else allowed & no_rerun, merge=merge)
        if alt is not None and self.total(alt) < self.total(choice):
            choice = alt
        return choice, self.total(choice)

    def policy(self, choice) -> str:
        return policy_text(self.blocks, self.options, self.per_block(choice),
                           self.every(), self.modules)

    def every(self) -> list[str]:
        """The repeated blocks, searched and left out: what their selectors tell apart."""
        return [b for b in self.blocks if b not in self.modules] + self.left_out


def _block_storages(prep: Prepared, block: str) -> np.ndarray:
    """Storages whose fate the block's options can change: made during its calls or saved
    by them (a superset is harmless: what does not change cancels out)."""
    rows = np.flatnonzero(prep.scope_mod == block)
    keep = np.zeros(len(prep.created), dtype=bool)
    for e0, e1 in zip(prep.scope_ev0[rows], prep.scope_ev1[rows]):
        keep |= (prep.created >= e0) & (prep.created < e1)
        keep |= (prep.saved_first >= e0 - 1) & (prep.saved_first < e1)
        keep |= (prep.saved_last >= e0 - 1) & (prep.saved_last < e1)
    return keep


def _block_spans(prep: Prepared, names: list[str]) -> np.ndarray:
    """[ev0, ev1) of the blocks' calls, in event order: what their options may re-run."""
    rows = np.flatnonzero(np.isin(prep.scope_mod, names))
    rows = rows[np.argsort(prep.scope_ev0[rows], kind="stable")]
    return np.stack([prep.scope_ev0[rows], prep.scope_ev1[rows]], axis=1) if len(rows) \
        else np.zeros((0, 2), dtype=np.int64)


def _plain_slots(prep: Prepared) -> np.ndarray:
    """engine.slot_curve of the baseline without replaying it (no segments to insert)."""
    n = prep.n_events
    c = np.r_[prep.created, prep.scratch_ev]
    f = np.maximum(np.r_[prep.freed, prep.scratch_ev + 1], c)
    w = np.r_[prep.nbytes, prep.scratch_bytes].astype(np.float64)
    made = np.bincount(c, weights=w, minlength=n + 1)[:n]
    curve = np.cumsum(made - np.bincount(f, weights=w, minlength=n + 1)[:n])
    out = np.empty(2 * n)
    out[1::2], out[0::2] = curve, curve - made
    return out


def block_table(prep: Prepared, model: CostModel, blocks: list[str], rng: int,
                left_out: list[str] | None = None,
                modules: list[str] | None = None) -> BlockTable:
    """Replays each (block, option) on the block's own storages (Prepared.subset): the same
    slot effect as on the whole ledger, in a fraction of the time. `left_out`: repeated
    blocks not searched (Note [Blocks that save nothing]), which the selectors leave out.
    `modules`: modules searched beside the blocks, after them (Note [Modules that are not
    blocks]), with the blocks' options."""
    left_out, modules = list(left_out or []), list(modules or [])
    every = blocks + left_out
    options = block_options(prep, blocks or modules)
    blocks = blocks + modules
    units = block_units(prep, blocks)   # Note [Blocks that share a save]
    base = replay(prep, parse_policy("none"), rng_bytes=rng, slots=True).slots
    nb, no = len(units), len(options)
    steps: list[Steps] = []
    cost, lo, hi = np.zeros((nb, no)), np.zeros((nb, no)), np.zeros((nb, no))
    refused: dict[str, str] = {}
    refused_on: dict[str, list[str]] = {}
    step = (0.0, 0.0, 0.0)     # the checkpointed step's own cost, once (per block: the same)
    for b, members in enumerate(units):
        keep = np.zeros(len(prep.created), dtype=bool)
        for i in members:
            keep |= _block_storages(prep, blocks[i])
        sub = prep.subset(keep, _block_spans(prep, [blocks[i] for i in members]))
        own = _plain_slots(sub)
        sels = unit_selectors([blocks[i] for i in members], every, modules)
        rows = np.zeros((no, len(base)), dtype=np.int64)
        for o, opt in enumerate(options):
            if opt.kind == "none":
                continue
            try:
                r = replay(sub, parse_policy("+".join(opt.part(x) for x in sels)),
                           rng_bytes=rng, slots=True)
            except PolicyError as e:   # replay refuses it (a block that must not be re-run)
                cost[b, o] = lo[b, o] = hi[b, o] = np.inf
                refused.setdefault(opt.label(), str(e).removeprefix("memledger: "))
                refused_on.setdefault(opt.label(), []).extend(blocks[i] for i in members)
                continue
            rows[o] = np.rint(r.slots - own).astype(np.int64)
            t, once = model.price(r), model.per_step(r)
            cost[b, o], lo[b, o], hi[b, o] = t.seconds - once[0], t.lo - once[1], t.hi - once[2]
            step = max(step, once)
        steps.append(Steps.of(rows))
    d, floor = reduce_steps(steps, base)
    reruns = np.array([o.kind in ("checkpoint", "selective") for o in options])
    return BlockTable(blocks=blocks, options=options, delta=d, floor=floor, cost=cost,
                      lo=lo, hi=hi, workspace=prep.workspace, slots=len(base), refused=refused,
                      refused_on={k: sorted(v, key=blocks.index) for k, v in refused_on.items()
                                  if len(v) < len(blocks)},
                      step=dict(zip(("cost", "lo", "hi"), step)), reruns=reruns,
                      units=None if len(units) == len(blocks) else units, left_out=left_out,
                      modules=modules)


def _solve_checked(table: BlockTable, prep: Prepared, budget: int, rng: int,
                   allowed: np.ndarray | None = None):
    """Solve, then replay the answer in full; tighten and retry if the sum was wrong."""
    held, b = True, budget
    for _ in range(4):
        choice, _ = table.solve(b, allowed)
        if choice is None:
            return None, held
        real = replay(prep, parse_policy(table.policy(choice)), rng_bytes=rng).peak_bytes
        if real <= budget:
            return choice, held and real == table.peak(choice)
        held = False
        b -= real - budget
    return None, False


# Note [Pareto front]
# The front is peak vs least added time: for each peak, the cheapest assignment that stays
# at or under it. Small tables (exhaustive search) give the whole front at once: every
# assignment's peak and time, then a sweep. Beyond, each point costs one exact solve, and a
# 48-block GPT's front has hundreds of points (one per extra checkpointed block, per mix),
# so it is *thinned*: solved at `points` budgets evenly spaced between the lowest reachable
# peak and the baseline (both endpoints are on it), then twice more around the knee. Every
# point printed is exact; the points between them are left out, and the report says so
# (`front_complete: false`). The knee: the point farthest below the straight line from
# (lowest peak, its time) to (baseline, 0), both axes scaled to [0, 1] by the endpoints,
# where buying more memory starts costing disproportionately more time.
# Example (48-block tiny GPT, 176 MiB budget): walking down from the baseline one byte at a
# time, 16 solves reached only 223 MB of a front that goes down to 156 MB (offload every
# block); the plan's own answer (176 MiB) was not among them. Sampled: 16 budgets from
# 156 MB to 231 MB, one every 5 MB.
def _point(table: BlockTable, choice, knee: bool = False) -> FrontPoint:
    return FrontPoint(policy=table.policy(choice), peak_bytes=table.peak(choice),
                      added_time_s=table.total(choice),
                      added_time_lo_s=table.total(choice, "lo"),
                      added_time_hi_s=table.total(choice, "hi"), knee=knee)


def _sweep(points: list[FrontPoint]) -> list[FrontPoint]:
    """Lowest peak first; drop any point another beats on peak and time."""
    front, best = [], float("inf")
    for p in sorted(points, key=lambda p: (p.peak_bytes, p.added_time_s)):
        if p.added_time_s < best:        # equal time at a higher peak is not on the front
            front.append(p)
            best = p.added_time_s
    return front


def _knee(front: list[FrontPoint]) -> int:
    """Index of the knee (Note [Pareto front]); -1 for fewer than 3 points."""
    if len(front) < 3:
        return -1
    p = np.array([f.peak_bytes for f in front], dtype=np.float64)
    t = np.array([f.added_time_s for f in front], dtype=np.float64)
    span_p, span_t = p[-1] - p[0], t[0] - t[-1]
    if span_p <= 0 or span_t <= 0:
        return -1
    x, y = (p - p[0]) / span_p, (t - t[-1]) / span_t     # chord from (0, 1) to (1, 0)
    below = (1.0 - x) - y
    return int(np.argmax(below)) if below.max() > 0 else -1


def _exhaustive_front(table: BlockTable) -> list[FrontPoint]:
    nb, no = table.cost.shape
    combos = np.indices((no,) * nb).reshape(nb, -1).T
    ok = np.isfinite(table.cost[np.arange(nb), combos]).all(axis=1)
    combos = combos[ok]
    load = np.zeros((len(combos), table.delta.shape[2]), dtype=np.int64)
    for b in range(nb):
        load += table.delta[b][combos[:, b]]
    peak = (load + table.floor[None, :]).max(axis=1) if load.shape[1] else np.zeros(len(load))
    cost = table.cost[np.arange(nb), combos].sum(axis=1)
    if table.reruns is not None:          # the step's own cost, once where any block re-runs
        cost = cost + table.reruns[combos].any(axis=1) * table.step["cost"]
    order = np.lexsort((cost, peak))
    best, keep = float("inf"), []
    for i in order.tolist():
        if cost[i] < best:
            keep.append(i)
            best = cost[i]
    return [_point(table, combos[i]) for i in keep]


def pareto_front(table: BlockTable, points: int = FRONT_POINTS) -> list[FrontPoint]:
    """The front, lowest peak first (complete, or thinned: see `front_is_thinned`)."""
    return pareto_front_info(table, points)[0]


def pareto_front_info(table: BlockTable, points: int = FRONT_POINTS
                      ) -> tuple[list[FrontPoint], bool]:
    """(front, complete): Note [Pareto front]. The knee is flagged (`knee`); a thinned front
    keeps at most `points` points, always both endpoints and the knee."""
    nb, no = table.cost.shape
    if no ** nb <= EXHAUSTIVE_MAX:
        front, complete = _exhaustive_front(table), True
    else:
        top = table.peak([0] * nb)
        floor = min(table.peak([o] * nb) for o in range(no) if np.isfinite(table.cost[:, o]).all())
        found: dict[str, FrontPoint] = {}

        def at(budget: int) -> None:
            choice, _ = table.solve(int(budget))
            if choice is not None:
                pt = _point(table, choice)
                found.setdefault(pt.policy, pt)
        for b in np.unique(np.linspace(floor, top, max(points, 2)).round().astype(np.int64)):
            at(b)
        front = _sweep(list(found.values()))
        k = _knee(front)
        if 0 < k < len(front) - 1:       # two more solves between the knee and its neighbours
            for j in (k - 1, k + 1):
                at((front[k].peak_bytes + front[j].peak_bytes) // 2)
            front = _sweep(list(found.values()))
        complete = False
    k = _knee(front)
    if len(front) > points > 0:          # thin: endpoints and knee kept, the rest evenly
        keep = {0, len(front) - 1} | ({k} if k >= 0 else set())
        extra = points - len(keep)
        if extra > 0:
            keep |= set(np.linspace(0, len(front) - 1, extra + 2).round().astype(int)[1:-1])
        k = sorted(keep).index(k) if k >= 0 else -1
        front, complete = [front[i] for i in sorted(keep)], False
    if k >= 0:
        front[k] = front[k].model_copy(update={"knee": True})
    return front, complete


def searched(led: Ledger, prep: Prepared) -> tuple[list[str], list[str], list[str]]:
    """(the repeated blocks searched, those left out, the modules searched beside them):
    Notes [Blocks that save nothing], [Modules that are not blocks]."""
    blocks, left_out = saving_blocks(prep, repeated_blocks(led, prep))
    modules = lone_modules(led, prep, blocks, left_out)
    if modules:   # rule 4: one that saves a storage with another is not searched
        names = blocks + modules
        shared = {names[i] for u in block_units(prep, names) if len(u) > 1 for i in u}
        modules = [m for m in modules if m not in shared]
    return blocks, left_out, modules


def pareto_points(led: Ledger, points: int = FRONT_POINTS) -> list[dict]:
    """The ledger's Pareto front as plain dicts ([] with nothing to search)."""
    prep, _, bandwidth = prepare(led)   # fake: modelled (Note [Modelled time])
    blocks, left_out, modules = searched(led, prep)
    if not blocks and not modules:
        return []
    rng = CPU_RNG_STATE_BYTES if led.device == "cpu" else 0
    model, _ = cost_model(led, prep, bandwidth=bandwidth)
    return [p.model_dump() for p in pareto_front(block_table(prep, model, blocks, rng,
                                                             left_out, modules), points)]


def plan(led: Ledger, budget_bytes: int, step_time_s: float | None = None,
         bandwidth: float | None = None, front_points: int = FRONT_POINTS,
         flops: float | None = None, budget_share: Decimal | None = None) -> PlanReport:
    """`budget_share` (`--budget 80%`): the budget is that share of the baseline peak
    (rounded down to a byte), and `budget_bytes` is not read."""
    prep, time_model, bandwidth = prepare(led, None, flops, bandwidth)   # fake: modelled
    blocks, left_out, modules = searched(led, prep)
    if not blocks and not modules:
        raise PolicyError(f"plan found no repeated blocks (numbered children such as blocks.0, "
                          f"blocks.1) in the ledger's modules, and no module that saves "
                          f"1/{MODULE_SHARE} of the model's activations; use `memledger "
                          f"predict` with your own --policy instead")
    if budget_share is not None:   # the baseline predict reports, exactly
        budget_bytes = int(budget_share * (prep.baseline_ledger_peak + prep.workspace))
    rng = CPU_RNG_STATE_BYTES if led.device == "cpu" else 0
    model, _ = cost_model(led, prep, step_time_s, bandwidth)
    table = block_table(prep, model, blocks, rng, left_out, modules)
    choice, held = _solve_checked(table, prep, budget_bytes, rng)
    front, complete = pareto_front_info(table, front_points) if front_points else ([], True)
    runner = _runner_up(table, prep, budget_bytes, rng, choice) if choice is not None else None
    texts = [table.policy(c) for c in (choice, runner) if c is not None]
    texts += [p.policy for p in front if p.policy not in texts]
    if not texts:
        texts = [front[0].policy] if front else ["none"]
    report = predict(led, [parse_policy(t) for t in texts], step_time_s=step_time_s,
                     bandwidth=bandwidth, prep=prep, flops=flops)
    cands = report.policies
    front = _replayed(front, cands)
    fits = choice is not None
    best = cands[0] if fits else min(cands, key=lambda c: c.peak_bytes)
    nb, no = len(table.cost), len(table.options)
    return PlanReport(
        budget_bytes=budget_bytes, baseline_peak_bytes=report.baseline_peak_bytes, fits=fits,
        policy=best.policy if fits else "", predicted_peak_bytes=best.peak_bytes,
        predicted_added_time_s=best.added_time_s if fits else 0.0,
        added_time_lo_s=best.added_time_lo_s if fits else 0.0,
        added_time_hi_s=best.added_time_hi_s if fits else 0.0,
        blocks=blocks, left_out=left_out, modules=modules,
        units=[[table.blocks[i] for i in u] for u in table.units or []],
        choice=[table.options[o].label() for o in table.per_block(choice)] if fits else [],
        options=[o.label() for o in table.options],
        method="exhaustive" if no ** nb <= EXHAUSTIVE_MAX else "dp",
        assignments=float(no) ** nb, assumption_held=held,
        runner_up=table.policy(runner) if runner is not None else "",
        candidates=cands, front=front, front_complete=complete, time_model=time_model,
        refused=table.refused, refused_on=table.refused_on,
        time_caveats=time_caveats(report))


def _replayed(front: list[FrontPoint], cands) -> list[FrontPoint]:
    """The front's points with their full replay's figures (the ones `predict` prints), so
    that one policy never shows two peaks: they differ only where blocks did not add up
    (Note [Blocks add up])."""
    full = {c.policy: c for c in cands}
    out = []
    for p in front:
        c = full.get(p.policy)
        out.append(p if c is None else p.model_copy(update={
            "peak_bytes": c.peak_bytes, "added_time_s": c.added_time_s,
            "added_time_lo_s": c.added_time_lo_s, "added_time_hi_s": c.added_time_hi_s}))
    return out


def _runner_up(table: BlockTable, prep: Prepared, budget: int, rng: int, choice):
    """The best fitting assignment without the option that costs the chosen plan most."""
    used = {}
    for b, o in enumerate(choice):
        used[int(o)] = used.get(int(o), 0.0) + float(table.cost[b, o])
    for o, _ in sorted(used.items(), key=lambda kv: -kv[1]):
        if table.options[o].kind == "none":
            continue
        allowed = np.ones(table.cost.shape, dtype=bool)
        allowed[:, o] = False
        alt, _ = _solve_checked(table, prep, budget, rng, allowed)
        if alt is not None:
            return alt
    return None
