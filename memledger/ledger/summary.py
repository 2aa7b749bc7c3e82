"""The summary contract (`memledger show --json`, schema memledger.summary/1).

Keys here are a promise to CI scripts: add, never rename without a schema bump.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import ConfigDict, Field

from memledger.ledger.fake_info import FakeRun, fake_info
from memledger.ledger.names import block_of, numbered_layers
from memledger.ledger.schema import CATEGORIES, SHARED_MEMORY_OP, SUMMARY_SCHEMA
from memledger.values import Value

if TYPE_CHECKING:   # the types need no pandas: `show` reads a kept summary without it
    import pandas as pd

    from memledger.ledger.model import Ledger


_Model = Value   # memledger/values.py: the one frozen, key-strict base


class Peak(_Model):
    bytes: int = Field(description="highest live bytes the ledger accounts for (tracked storages)")
    event: int = Field(description="event index of the peak")
    step: int
    phase: str
    op: str = Field(description="the op whose output made the peak")
    module: str = Field(description="module path running at the peak ('' outside modules; "
                        "'(GPT.forward)' in the model's own forward, outside its submodules)")
    backward_outside_step: bool | None = Field(
        None, description="true where the peak is in a backward pass outside the training "
        "step (begun in setup or between steps, no optimizer step after it: an evaluation's "
        "autograd.grad), `phase` being the one it began in; absent otherwise (Note [A "
        "backward pass outside the step], ledger/model.py)")


class Activations(_Model):
    saved_bytes: int = Field(description="saved-for-backward bytes live just before the last "
                             "step's backward that it reads (Note [The saves the step's "
                             "backward reads], ledger/model.py)")
    by_module: dict[str, int] = Field(description="the same, by the module that saved them")
    by_block: dict[str, int] = Field(
        default_factory=dict, description="the same, rolled up per repeated block "
        "('blocks.0.attn' -> 'blocks.0', see ledger/names.py), largest first")


class Measured(_Model):
    peak_bytes: int = Field(description="allocator-level peak, independent of the ledger")
    source: str = Field(description="'cpu-profiler', 'cuda-allocator' or 'none'; "
                        "'cpu-profiler+pre-existing' from `memledger.trace(measure=True)`, "
                        "which adds the bytes of tensors made before the block")
    collective_at_peak_bytes: Optional[int] = Field(None, description="of peak_bytes: the collectives' own "
                                          "buffers (gloo), which no ledger sees (distributed)")
    cublas_workspace_bytes: Optional[int] = Field(
        None, description="of peak_bytes, on CUDA: cuBLAS's workspaces, which no tensor holds "
        "(what clearing them gave back after the measured steps; Note [The cuBLAS "
        "workspace] in trace/allocator.py); absent elsewhere and in older ledgers")
    rounding_bytes: Optional[int] = Field(
        None, description="of peak_bytes, on CUDA: at least this much is the caching "
        "allocator's rounding, blocks larger than what was asked (allocated peak - requested "
        "peak; Note [Blocks larger than asked] in trace/allocator.py); absent elsewhere and in "
        "older ledgers")
    ledger_with_scratch_bytes: Optional[int] = Field(
        None, description="the ledger's peak with the kernel scratch the allocator pass "
        "measured op by op (memory a kernel takes inside itself, e.g. CPU bf16 GEMM packing); "
        "absent when no op had any")
    ledger_with_scratch_peak: Optional[Peak] = Field(
        None, description="where the ledger's peak with the kernel scratch is, when that is "
        "another step, phase or op than `peak`'s (an op's scratch elsewhere tops the ledger's "
        "own peak: Note [The peak with the scratch, elsewhere]); absent otherwise")
    module_calls: Optional[int] = Field(
        None, description="module calls outside backward in the allocator pass's measured "
        "steps (Note [Two passes, one run?] in trace/call_count.py); absent in older ledgers")
    ledger_module_calls: Optional[int] = Field(
        None, description="the same count in the ledger pass; when the two differ, the "
        "passes ran different code (an unseeded random choice, a choice by the clock) and the "
        "peaks do not compare")
    generators_apart: Optional[list[str]] = Field(
        None, description="the global random generators ('torch', 'numpy', 'random') both "
        "passes drew from that ended the measured steps in other states: not seeded, so the "
        "passes ran on other numbers (Note [Two passes, other random numbers?] in "
        "trace/rng_state.py); absent when none, and in older ledgers")


class TensorRow(_Model):
    bytes: int
    category: str
    module: str
    shape: str
    dtype: str
    op: str
    name: str


class IdleRow(_Model):
    bytes: int = Field(description="bytes of one storage")
    count: int = Field(description="storages folded into this row (one per step, usually)")
    category: str
    module: str
    shape: str
    op: str
    name: str
    idle_events: int = Field(description="events held after last use, summed over `count`")
    idle_byte_events: int = Field(description="bytes × idle events, summed over `count`")


class SharedInput(_Model):
    bytes: int = Field(description="input live at the peak that other processes handed over "
                                   "in shared memory (a DataLoader's workers' batches)")
    storages: int = Field(description="how many storages those bytes are")


class CycleGarbage(_Model):
    storages: int = Field(description="storages Python's garbage collector freed in the run "
                                      "(held by reference cycles until it ran)")
    bytes: int = Field(description="their bytes")
    at_end_storages: int = Field(0, description="storages live at the end that were "
                                                "unreachable garbage then (`memledger trace`)")
    at_end_bytes: int = Field(0, description="their bytes")
    at_peak_bytes: int = Field(description="of both, bytes live at the peak after their last "
                                           "use (used before it, let go of after it)")


class UnreadSaves(_Model):
    storages: int = Field(description="storages autograd saved for backward and let go of "
                                      "without any backward reading them back")
    bytes: int = Field(description="their bytes")
    at_peak_bytes: int = Field(description="of them, bytes live at the peak")


class Summary(_Model):
    """What a ledger says, in one object. `at_peak` sums to max(peak.bytes, measured)."""

    schema_: str = Field(SUMMARY_SCHEMA, alias="schema", serialization_alias="schema")
    device: str
    steps_traced: int
    complete: bool = Field(description="False when the run crashed or was interrupted")
    peak: Peak
    at_peak: dict[str, int]
    by_phase_peak: dict[str, int]
    by_step_peak: dict[str, int]
    activations: Activations
    measured: Measured
    resident: dict[str, int]
    top_tensors: list[TensorRow]
    idle: list[IdleRow]
    rank: Optional[int] = Field(None, description="this ledger's rank (distributed runs)")
    world_size: Optional[int] = Field(None, description="ranks in the job (distributed runs)")
    parameter_shards: dict[str, int] = Field(
        default_factory=dict, description="parameter bytes at the peak by shard role: "
        "'sharded' (the local shard), 'unsharded' (gathered for compute), 'full' (not sharded)")
    fake: FakeRun | None = Field(None, description="fake runs only: target, stand-ins, FLOPs")
    compiled: bool = Field(False, description="the script runs torch.compile'd code: the "
                           "ledger is its eager run, `measured` the compiled run's allocator")
    script_checkpointed: Optional[list[str]] = Field(
        None, description="modules the script checkpoints itself (torch.utils.checkpoint): "
        "policies that would nest with them are refused; absent when none")
    script_checkpointed_functions: Optional[list[str]] = Field(
        None, description="functions of no module the script checkpoints itself, each as "
        "'FN (FILE:LINE) in MODULE', the module whose call runs it: policies that checkpoint "
        "that module or one around it are refused; absent when none")
    saved_hooks: Optional[str] = Field(
        None, description="the script's own saved-tensor hooks around its forward (their "
        "pack function, e.g. save_on_cpu's): saves under them are not in the ledger; absent "
        "when none")
    shared_input: Optional[SharedInput] = Field(
        None, description="of the input at the peak, what a DataLoader's workers handed over "
        "in shared memory (Note [Batches from other processes]); absent when none")
    unread_saves: Optional[UnreadSaves] = Field(
        None, description="activations autograd saved for a part of a graph no backward ran "
        "(ops under gradients whose result was dropped or detached); absent when none")
    cycle_garbage: Optional[CycleGarbage] = Field(
        None, description="storages Python's garbage collector freed (trace/gc_window.py); "
        "absent when none")
    threads: int = Field(1, description="most Python threads alive at a step's end; tensors "
                                        "made by threads other than the traced one are not in "
                                        "the ledger (they are in the allocator's peak)")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def to_json_dict(self) -> dict:
        # distributed-only keys (rank, world_size, ...) are left out of one-process summaries
        return self.model_dump(by_alias=True, exclude_none=True)


def summarize(led: Ledger, top: int = 10) -> Summary:
    pk = led.peak()
    at_peak = led.at_peak()
    live = led.labelled(led.live_at(pk.event).head(top))
    _, saved = led.saved_before_backward()
    saved = led.labelled(saved)
    by_mod = saved.groupby("saved_module")["bytes"].sum().sort_values(ascending=False)
    by_block: dict[str, int] = {}
    # Note [A numbered part that is no block] (ledger/names.py)
    layers = numbered_layers(zip(led.scopes["mod"].astype(str), led.scopes["cls"]))
    for mod, b in zip(_calling_paths(led, saved), saved["bytes"]):
        block = block_of(mod, layers)
        by_block[block] = by_block.get(block, 0) + int(b)
    idle = led.idle_offenders(top)
    meas = led.measured or {"peak_bytes": 0, "source": "none"}
    return Summary(
        device=led.device,
        steps_traced=led.steps_traced,
        complete=led.complete,
        peak=Peak(bytes=pk.bytes, event=pk.event, step=pk.step, phase=pk.phase, op=pk.op,
                  module=pk.module, backward_outside_step=pk.backward_outside_step or None),
        at_peak={c: at_peak.get(c, 0) for c in CATEGORIES},
        by_phase_peak={k: v for k, v in led.peak_by("phase").items()},
        by_step_peak={str(k): v for k, v in led.peak_by("step").items()},
        activations=Activations(saved_bytes=int(saved["bytes"].sum()),
                                by_module={str(k): int(v) for k, v in by_mod.items()},
                                by_block=dict(sorted(by_block.items(), key=lambda kv: -kv[1]))),
        measured=Measured(peak_bytes=int(meas["peak_bytes"]), source=str(meas["source"]),
                          collective_at_peak_bytes=meas.get("collective_at_peak_bytes"),
                          cublas_workspace_bytes=meas.get("cublas_workspace_bytes"),
                          rounding_bytes=_rounding(meas),
                          ledger_with_scratch_bytes=_with_scratch(led, pk.bytes),
                          ledger_with_scratch_peak=_scratch_peak_elsewhere(led, pk),
                          **_module_calls(led, meas), **_generators_apart(led, meas)),
        resident=led.resident_at_end(),
        top_tensors=[TensorRow(bytes=int(r.bytes), category=r.category, module=r.module,
                               shape=r.shape, dtype=r.dtype, op=r.op, name=r.name)
                     for r in live.itertuples()],
        idle=[IdleRow(bytes=int(r.bytes), count=int(r.count), category=r.category,
                      module=r.module, shape=r.shape,
                      op=r.op, name=r.name, idle_events=int(r.idle_events),
                      idle_byte_events=int(r.idle_byte_events)) for r in idle.itertuples()],
        rank=led.header.get("rank"), world_size=led.header.get("world_size"),
        parameter_shards=_shards(led, pk.event),
        fake=fake_info(led),
        compiled=bool(led.extra.get("compiled")) or compiled_by_a_compiler(led),
        script_checkpointed=list(dict.fromkeys(
            r.get("mod", "") for r in led.extra["script_ckpt"])) or None
        if led.extra.get("script_ckpt") else None,
        script_checkpointed_functions=list(dict.fromkeys(
            f"{r.get('fn', '')} ({r.get('at', '')}) in {r.get('mod', '') or '(the model)'}"
            for r in led.extra["script_ckpt_fn"])) or None
        if led.extra.get("script_ckpt_fn") else None,
        saved_hooks=_saved_hooks(led),
        shared_input=_shared_input(led, pk.event),
        unread_saves=unread_saves(led, pk.event),
        cycle_garbage=cycle_garbage(led, pk.event),
        threads=int((led.end or {}).get("threads", 1)),
    )


# Note [A shared module's saves, by the block that called it]
# The per-block table of saved activations rolled each save up by its module's path. A
# module the model registers under several paths is named by its first (as
# `named_modules()` lists it), so what it saves in every block read as the first block's:
# g-mlp-pytorch's gMLP passes one `act` module (`nn.Tanh()`) to every block's spatial
# gating unit, and on tests/clients/train_gmlp.py `--act tanh --depth 2` `show` said
# `net.layers.0.*` saved 74.2 KiB and `net.layers.1.*` 58.2 KiB, where the two blocks, one
# shape, save 66.2 KiB each (layer 1's 8 KiB of tanh output counted in layer 0). A save
# in such a module is given the path of its call's place: the second path (the ledger's
# `aliases` record) under the module whose call encloses the save; the per-module table
# still names the module once, by its name. The model itself can be that caller:
# feedback-transformer-pytorch registers one key/value `nn.Linear` as every layer's
# attention's `to_kv` and as the model's `shared_kv_proj`, and calls it from its own
# forward on the layers' weighted sum for the memory; those saves (2 x 256 B on
# tests/clients/train_feedback.py `--length 4`) read as `layers.0`'s (13,660 B against
# layer 1's 13,148 B, the two layers alike) until the path held by the model (no dot:
# `shared_kv_proj`) was picked for a call from the model's own forward. The caller is the
# innermost call around the shared module's call, not around the save's event: a scope's
# last event is its successor's first, so the save at the shared module's first event sat
# in the module called just before it too (tests/clients/train_shared_proj.py: block 1's
# `norm`, 18-19, and its `proj`, 19-21, the save at 19), read as that module's caller, and
# the save fell back to the first path: block 1's 128 B in `blocks.0`.
def _calling_paths(led: Ledger, saved: pd.DataFrame) -> list[str]:
    """Each saved row's module path, a shared module's save under the path of the place
    that called it (Note [A shared module's saves, by the block that called it])."""
    import numpy as np

    mods = [str(m) for m in saved["saved_module"]]
    others: dict[str, list[str]] = {}
    for alias, name in led.latest_map("aliases", "mods").items():
        others.setdefault(name, []).append(alias)
    if not others or not any(m in others for m in mods):
        return mods
    sc = led.scopes
    paths, ev0, ev1 = sc["mod"].astype(str).to_numpy(), sc["ev0"].to_numpy(np.int64), \
        sc["ev1"].to_numpy(np.int64)
    for i, (m, ev) in enumerate(zip(mods, saved["saved_ev"].to_numpy(np.int64))):
        if m not in others or ev < 0:
            continue
        own = np.flatnonzero((paths == m) & (ev0 <= ev) & (ev1 >= ev))
        if not len(own):
            continue
        call = own[np.argmax(ev0[own])]                  # the shared module's call that saved
        around = np.flatnonzero((ev0 <= ev0[call]) & (ev1 >= ev1[call]) & (paths != m))
        if not len(around):
            continue
        # the innermost call around that call: the shortest; of equal ones the first
        # recorded, the inner (a call is recorded as it returns)
        caller = paths[around[np.argmin(ev1[around] - ev0[around])]]
        mods[i] = _path_under(caller, [m, *others[m]])
    return mods


def _path_under(caller: str, paths: list[str]) -> str:
    """Of a shared module's paths (its first one first), the one the module `caller` holds
    it by: a child of `caller` (the model itself is `caller` '': a path with no dot), else
    one below `caller`, else the first."""
    child = next((p for p in paths if p.rpartition(".")[0] == caller), None)
    below = next((p for p in paths if caller and p.startswith(caller + ".")), None)
    return child or below or paths[0]


def _shared_input(led: Ledger, ev: int) -> SharedInput | None:
    """The input live at event `ev` that came from other processes in shared memory."""
    live = led.live_at(ev)
    shared = live[live["op"] == SHARED_MEMORY_OP]
    return SharedInput(bytes=int(shared["bytes"].sum()), storages=len(shared)) \
        if len(shared) else None


def unread_saves(led: Ledger, ev: int) -> UnreadSaves | None:
    """Activations and batches saved for backward, never unpacked, freed before the end (a
    part of a graph no backward ran: the doctor's `unused_graph` names a whole forward so),
    and those live at event `ev`. Parameters and state are left out: they live anyway."""
    st = led.storages
    unread = st[(st["saves"] > 0) & (st["unpacks"] == 0) & (st["freed"] >= 0)
                & (st["bytes"] > 0) & st["category"].isin(["activation", "input"])]
    if not len(unread):
        return None
    live = unread[(unread["created"] <= ev) & (unread["freed"] > ev)]
    return UnreadSaves(storages=len(unread), bytes=int(unread["bytes"].sum()),
                       at_peak_bytes=int(live["bytes"].sum()))


def cycle_garbage(led: Ledger, ev: int) -> CycleGarbage | None:
    """Storages the garbage collector freed, and those of them idle at event `ev`."""
    st = led.storages
    by_gc, at_end = st[st["gc_freed"]], st[st["garbage_at_end"]]
    if not len(by_gc) and not len(at_end):
        return None
    held = st[st["gc_freed"] | st["garbage_at_end"]]
    idle = held[(held["created"] <= ev) & ((held["freed"] > ev) | (held["freed"] < 0))
                & (held["last_use"] < ev)]
    return CycleGarbage(storages=len(by_gc), bytes=int(by_gc["bytes"].sum()),
                        at_end_storages=len(at_end), at_end_bytes=int(at_end["bytes"].sum()),
                        at_peak_bytes=int(idle["bytes"].sum()))


def _saved_hooks(led: Ledger) -> str | None:
    """`module.qualname` of the script's own saved-tensor pack hook (Note [The script's own
    saved-tensor hooks], trace/collector.py), or None."""
    recs = led.extra.get("hooks") or []
    if not recs:
        return None
    r = recs[0]
    return ".".join(x for x in (r.get("module", ""), r.get("pack", "")) if x)


# Note [The peak with the scratch, elsewhere]
# `peak` is the ledger's own: the tensors it holds. Kernel scratch is added op by op (Note
# [Kernel scratch], trace/allocator.py), and an op's scratch can top that peak at another
# event: bitsandbytes' 8-bit AdamW dequantizes both moments inside its update op, and on a
# width-128 GPT at batch 1 (tests/clients/train_galore.py) the allocator's 5,503,704 B
# peak is in the optimizer, at that op, while `show` said "Peak 4.0 MiB at step 2 ·
# backward · sum.dim_IntList in blocks.0.attn.qkv" and that the scratch "explains every
# byte": a reader looked for the peak in backward, where checkpointing or offload would
# move it, and every policy measured the same 5,503,704 B. Where the peak with the scratch
# is at another step, phase or op, the summary says where, and `show`'s allocator line too.
def _rounding(meas: dict) -> int | None:
    """Allocated peak - requested peak on CUDA (Note [Blocks larger than asked])."""
    if "requested_peak_bytes" not in meas:
        return None
    return max(0, int(meas["peak_bytes"]) - int(meas["requested_peak_bytes"]))


def _scratch_peak_elsewhere(led: Ledger, pk) -> Peak | None:
    if _with_scratch(led, pk.bytes) is None:
        return None
    at = led.peak_with_scratch_point()
    if (at.step, at.phase, at.op) == (pk.step, pk.phase, pk.op):
        return None
    return Peak(bytes=at.bytes, event=at.event, step=at.step, phase=at.phase, op=at.op,
                module=at.module, backward_outside_step=at.backward_outside_step or None)


def _with_scratch(led: Ledger, peak: int) -> int | None:
    """The ledger's peak with measured kernel scratch; None when that adds nothing."""
    with_scratch = led.peak_with_scratch()
    return with_scratch if with_scratch > peak else None


def compiled_by_a_compiler(led: Ledger) -> bool:
    """Whether the allocator pass ran graphs an AOT-autograd backend compiled (inductor,
    `aot_eager`): code that saves, frees and draws otherwise than the eager ledger pass.
    A graph of the eager backend (torch's own around an eager `flex_attention`) runs the
    eager ops (Note [A compile by the eager backend] in trace/compiled.py); a `compiles`
    record without `aot` (an older ledger) counts."""
    return any(r.get("aot", 1) for r in led.extra.get("compiles", []))


def _module_calls(led: Ledger, meas: dict) -> dict:
    """Both passes' module calls outside backward (Note [Two passes, one run?] in
    trace/call_count.py), when the allocator pass counted them and ran no compiled code."""
    n = meas.get("module_calls")
    if not isinstance(n, int) or isinstance(n, bool) or led.extra.get("compiles"):
        return {}
    mine = int((led.scopes["ph"] != "backward").sum())
    return {"module_calls": n, "ledger_module_calls": mine}


# Note [Compiled random ops draw otherwise]
# Where the allocator pass ran compiled code (`compiles` in the ledger, from an AOT-autograd
# backend: Note [A compile by the eager backend] in trace/compiled.py), the ledger pass ran
# the same code eagerly (Note [Compiled code runs eager under the collector], trace/
# compiled.py), and inductor's random ops take their seeds from torch's global generator
# otherwise than the eager ops draw from it: the same seeded script leaves that generator
# apart in the two passes. heavyball's Muon compiles its update by default; a 1-step
# `train_heavyball.py --opt muon`, seeded with `torch.manual_seed(0)`, left it apart, and
# `show` warned that the script "does not seed" torch's generator and to "seed it
# (torch.manual_seed)", beside the line that already says the two peaks are two runs
# (eager and compiled). So torch's generator is not compared where the run compiled, as
# the module calls are not (`_module_calls`); numpy's and Python's still are.


def _generators_apart(led: Ledger, meas: dict) -> dict:
    """The generators both passes drew from and left apart after the same step (Note [Two
    passes, other random numbers?] in trace/rng_state.py): each pass's `start` and `end`
    digests; a generator neither changed is not named (numpy's and Python's start from the
    OS in each process), nor torch's where the run compiled (Note [Compiled random ops draw
    otherwise])."""
    a, mine = meas.get("rng"), led.extra.get("rng")
    if not isinstance(a, dict) or not mine or not isinstance(mine[-1], dict):
        return {}
    b = mine[-1]
    try:
        if a["step"] != b["step"]:
            return {}
        apart = sorted(g for g, end in a["end"].items()
                       if g in b["end"] and end != b["end"][g] and end != a["start"].get(g)
                       and b["end"][g] != b["start"].get(g)
                       and not (g == "torch" and compiled_by_a_compiler(led)))
    except (KeyError, TypeError, AttributeError):
        return {}
    return {"generators_apart": apart} if apart else {}


def _shards(led: Ledger, ev: int) -> dict[str, int]:
    """Parameter bytes live at `ev` by shard role (Note [Sharded storages])."""
    live = led.live_at(ev)
    params = live[live["category"] == "parameter"]
    sums = params.groupby(params["shard"].replace("", "full"))["bytes"].sum()
    return {str(k): int(v) for k, v in sums.items()}
