"""A ledger turned into flat numpy arrays once, so that each policy replays in microseconds.

No torch here. `Prepared.from_ledger(led)` reads the device's storages, the module forward
scopes and the per-storage facts replay needs (first/last save, last unpack, last forward
use); every policy then works on these arrays only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from memledger.ledger.model import Ledger
from memledger.ledger.schema import CATEGORIES
from memledger.replay.compiled import compiled_regions
from memledger.replay.script_checkpoint import (checkpoint_events, script_checkpoints,
                                                script_function_checkpoints)
from memledger.replay.stateful import OWN_STATE, held_sids, stateful_calls
from memledger.replay.timings import Timings, match_timings, timing_record

CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
ACTIVATION = CAT_INDEX["activation"]
INPUT = CAT_INDEX["input"]
BUFFER = CAT_INDEX["buffer"]
OTHER = CAT_INDEX["other"]
MODEL_STATE = (CAT_INDEX["parameter"], CAT_INDEX["buffer"])   # saved by every call, each step


def rank_gap_is_collective(led: Ledger) -> bool:
    """Note [A gloo rank's gap]: whether the allocator's bytes above the ledger at the peak
    belong to that moment (a CPU rank's collectives) rather than to the whole run.

    # Note [A gloo rank's gap]
    On one process the allocator - ledger gap is what no dispatch sees for the whole run
    (CUDA: cuBLAS's workspace; CPU: a few bytes), so every policy's peak carries it. On a
    CPU rank it is gloo's: its flat all-gather buffers and the frees its worker threads make
    unseen (Note [Collective scratch] in trace/allocator.py), live around the collective
    running at the traced peak and not elsewhere. Carried to every policy it read 3-22 % high
    (FSDP2 over transformers' Llama, 2 gloo ranks, accumulating: `checkpoint:model.layers.*`
    predicted 3,298,996 and 3,036,340 B on ranks 0 and 1, measured 2,904,756 on both, which
    is the ledger's own replay to the byte). There it is kernel scratch at the peak's event
    instead: the baseline still predicts the allocator's peak, and a policy counts it only
    where its peak is still that moment.
    """
    return led.device == "cpu" and int(led.header.get("world_size") or 1) > 1


# Note [One Prepared per ledger]
# `Prepared.from_ledger` reads the whole ledger (the saves matched to their unpacks, the
# scopes, the kernel scratch: 0.07 s for the tiny GPT's 3,000 events, seconds for a large
# one), and nothing in it depends on the policy. Every caller that asked for one policy at
# a time (`predict` per policy, the client tier's predicted-vs-measured loop, `plan` and
# `compare` asking again) built it anew. Neither a Ledger nor a Prepared is changed after it
# is made (a Prepared's lazy caches are derived from it alone), so the first one made for a
# ledger object is kept on it and handed out again.
def prepared_of(led: Ledger) -> "Prepared":
    """The ledger's Prepared, made once per Ledger object."""
    prep = led.__dict__.get("_prepared")
    if prep is None:
        prep = led.__dict__["_prepared"] = Prepared.from_ledger(led)
    return prep


@dataclass
class Prepared:
    """Column arrays (one entry per device storage) and forward scopes (one per call)."""

    n_events: int
    nbytes: np.ndarray        # int64 bytes
    created: np.ndarray       # int64 event
    freed: np.ndarray         # int64 event (n_events when still live)
    cat: np.ndarray           # int64 index into CATEGORIES, as the rules read it (Note [A state
    #                           carried into the next step]: `_rule_categories`)
    saved_first: np.ndarray   # int64 event of the first save (-1: never saved)
    saved_last: np.ndarray    # int64 event of the last save
    saved_mod_code: np.ndarray  # int64 index into saved_mod_names: module of the first save
    saved_mod_names: np.ndarray  # object: distinct modules that saved something ("" = none)
    unpack: np.ndarray        # int64 event of the last unpack (-1: none)
    unpack_first: np.ndarray  # int64 event of the first unpack (-1: none)
    unpack_end: np.ndarray    # int64 event its last unpacker returned at (-1: not recorded)
    unpack_rel: np.ndarray    # int64 event before which autograd let go of that node (-1: not
    #                           recorded): what its saves kept alive goes then
    fwd_last: np.ndarray      # int64 last use before backward began (-1: unknown)
    arg_end: np.ndarray       # int64 end of the module call it was passed to (0: none)
    op_code: np.ndarray       # int64 index into op_names of the creating op's packet
    op_names: np.ndarray      # object: the distinct overload packets ("addmm", "gelu", ...)
    scope_mod: np.ndarray     # object: module path per forward call
    scope_code: np.ndarray    # int64 index into mod_names per forward call
    mod_names: np.ndarray     # object: the distinct module paths
    scope_cls: np.ndarray     # object: class name per forward call
    scope_ev0: np.ndarray     # int64 first event of the call
    scope_ev1: np.ndarray     # int64 one past the call's last event
    scope_ns: np.ndarray      # int64 wall time of the call while traced
    scope_step: np.ndarray    # int64 step of the call
    step_ns: np.ndarray       # int64 traced wall time per step
    step_events: np.ndarray   # int64 events per step
    untraced_step_ns: float   # median step time without the dispatch mode (0: unknown)
    copy_bytes_per_s: float   # calibrated host/disk copy bandwidth (0: unknown)
    scratch_ev: np.ndarray    # int64 events where a kernel held scratch (Note [Kernel scratch])
    scratch_bytes: np.ndarray  # int64 that scratch, above the state after the event
    workspace: int            # measured peak minus predicted baseline peak (unexplained bytes)
    baseline_ledger_peak: int
    held: np.ndarray = None   # bool: kept alive by an object outside its call (a KV cache)
    released: np.ndarray = None  # int64: first event only autograd held it (-1: never, -2: ?)
    # int64: for a storage `released` -1, the event the script let go of it while a graph the
    # backward kept held it (-1: none; Note [Let go of after backward, while a kept graph
    # holds it], trace/collector.py)
    unheld: np.ndarray = None
    # int64: the event from which a copy an optimizer held is its parameter, and int64 its
    # category before it (Note [A copy the optimizer keeps, then the parameter] in
    # ledger/held_roles.py); None where no storage has one
    cat_until: np.ndarray = None
    cat_before: np.ndarray = None
    # int64: the ledger's category, read from `cat_until` on: not `cat` for an activation the
    # script carried into the next step (`other` from its step's end: Note [A state carried
    # into the next step] in ledger/carried.py); None where no storage has an earlier one
    cat_after: np.ndarray = None
    # spans over which a storage reads another category (Note [A gradient dropped from
    # .grad, then put back], trace/dropped_grads.py): its row, [ev0, ev1), the category
    # there and the one it would read (int64 each); None where there is none
    span_row: np.ndarray = None
    span_ev0: np.ndarray = None
    span_ev1: np.ndarray = None
    span_cat: np.ndarray = None
    span_was: np.ndarray = None
    stashed_graph: np.ndarray = None   # bool: stashed, and its graph runs deeper than
                                       # leaves (trace/collector.py `_deep_graph`)
    acast: np.ndarray = None   # bool: a parameter's cast autocast keeps in its cache (Note
    #                            [Autocast's cache in a re-run], trace/collector.py)
    acast_src: np.ndarray = None   # int64: the row of the parameter it casts (-1: unknown)
    stash_reach: np.ndarray = None   # bool: saved by a node of a stashed tensor's graph
    #                                  (collector `_graph_saves`; None: no graph walked)
    stash_walked: np.ndarray = None  # bool: stashed, and its record says what its graph saves
    stash_ev0: np.ndarray = None   # int64: first event of the innermost call that kept it
    stash_ev1: np.ndarray = None   # int64: one past that call's last event (-1: not known)
    # int64: the first event of the outermost call that handed it back as (part of) its
    # output (-1: none; Note [What a call hands back], replay/engine.py); None: an older
    # ledger, which has no `ret` records
    returned_ev0: np.ndarray = None
    stashed: np.ndarray = None   # bool: kept as a plain attribute of the module whose call made
    #                              it (Note [Tensors a call keeps on its module], collector.py)
    arg_mod: np.ndarray = None   # object: module of a call, per (call, argument storage) pair
    arg_ev0: np.ndarray = None   # int64: that call's first event
    arg_row: np.ndarray = None   # int64: the argument's row in the storage arrays
    mutated: np.ndarray = None   # bool per storage: written in place before backward
    # (event, name, made) of each buffer, or other tensor made before (`made`: its creation
    # event; -1 for a buffer), written in place in forward: Note [State a re-run writes
    # again] (replay/stateful.py)
    state_writes: tuple = ()
    # (event, name) of each parameter written in place in forward, its first write of each
    # step: Note [A set-up on the first call] (replay/first_call.py)
    param_writes: tuple = ()
    # bool per storage: its free was written at the op that took its place, as the untraced
    # run writes into it (Note [In place but for the mode], trace/collector.py)
    folded_in: np.ndarray = None
    # int64 (event, bytes): numbers a dispatch mode wraps again at their op (Note [Numbers
    # wrapped again under a dispatch mode], trace/scalars.py); None: none recorded
    rewrap_ev: np.ndarray = None
    rewrap_bytes: np.ndarray = None
    # (module, first event) of each call that put a tensor it made in its module's buffers
    # (Note [A buffer a call makes and later calls reuse], trace/collector.py)
    kept: tuple[tuple[str, int], ...] = ()
    # (module, first event, last forward read) of each call that kept a tensor it made as
    # a plain attribute of its module (`stash` records): the read is the latest forward use
    # of those tensors (Note [A cache kept as a plain attribute], engine.py)
    stash_calls: tuple[tuple[str, int, int], ...] = ()
    # of those, the calls handed their buffer's old value as an argument (trace/collector.py
    # Note [A buffer replaced from the one before]): a re-run reads the saved argument
    kept_handed: frozenset = frozenset()
    # of those, the calls whose buffer replaced a flag read to Python alone (Note [A first
    # fill behind a flag], engine.py)
    kept_flag: frozenset = frozenset()
    # of those, (module, first event) -> 1 where the call filled a buffer its module held
    # none under as the call began, 2 where one so filled has an autograd graph (Note [A
    # cache emptied before every call], engine.py)
    kept_fill: dict = field(default_factory=dict)
    # bool per storage: put in its module's buffers by the call that made it, with no graph
    # of ops behind it (Note [A buffer kept without a graph], engine.py); None: an older
    # ledger, whose `kept` records do not say
    kept_plain: np.ndarray = None
    stateful_mod: np.ndarray = None   # object: module of each call that wrote outside state
    stateful_ev0: np.ndarray = None   # int64: that call's first event
    stateful_obj: np.ndarray = None   # object: the class of the object it wrote into
    # modules the script checkpoints itself (Note [The script's own checkpoint])
    script_ckpt: tuple[tuple[str, str], ...] = ()   # (region, first call under it)
    # (the module whose call runs it, the function, file:line): Note [A policy checkpoint
    # around a checkpointed function] (trace/script_checkpoint.py)
    script_fn_ckpt: tuple[tuple[str, str, str, str], ...] = ()
    # the event of each such checkpoint's first run, with its index into script_ckpt /
    # script_fn_ckpt: Note [A checkpoint met in a call, not under its path]
    script_ckpt_at: tuple[tuple[int, int], ...] = ()
    script_fn_ckpt_at: tuple[tuple[int, int], ...] = ()
    # per backward pass that found modules in another mode than their forward had: (its
    # first event, the previous pass's, ((path, training at the forward), ...), the paths
    # of the modules whose code may read a flag, None: every module, as older ledgers
    # have it); Note [A re-run in another mode] (trace/modes.py). Older ledgers: none
    modes: tuple[tuple[int, int, tuple[tuple[str, bool], ...], tuple[str, ...] | None],
                 ...] = ()
    scope_grad: np.ndarray = None  # bool per call: it ran with gradients (policies act on it)
    scope_stats: np.ndarray = None  # int64 per call: BatchNorm statistics a re-run copies
    # the backward phases' spans of events, [start, end) (a graph built there saves again)
    phase_bw_start: np.ndarray = None
    phase_bw_end: np.ndarray = None
    saves: np.ndarray = None  # int64 saves (packs) per storage
    unpacks: np.ndarray = None  # int64 unpacks per storage (> saves: two backward passes)
    # int64 per storage: the graph-building backward passes that read one save of it (Note
    # [Read by a backward that builds a graph] in trace/collector.py); -1: one that wrote
    # the gradients too (`loss.backward(create_graph=True)`: `.grad` holds its graph)
    graph_reads: np.ndarray = None
    # the torch that traced the ledger (header `torch`): predict checks a save list's names
    # against one torch's op names (Note [Save names predict checks without torch])
    torch_version: str = ""
    # int64 per storage: the most backward passes of any kind that read one save of it (Note
    # [Read by three backward passes or more], replay/engine.py)
    passes_read: np.ndarray = None
    pass1_end: np.ndarray = None  # int64 read twice: when the first pass's reader returned
    pass2: np.ndarray = None      # int64 read twice: the second pass's first unpack (-1: no)
    # int64 per storage (-1: none): a sparse gradient kept it from `lent_ev` to `lent_until`
    # (n_events: to the end), and the script had let go of it at `lent_own` (Note [A sparse
    # gradient kept as made] in trace/collector.py); None: no such storage
    lent_ev: np.ndarray = None
    lent_until: np.ndarray = None
    lent_own: np.ndarray = None
    # bool per storage: a sparse tensor's part (`sparse` records, or a `lent` one; None: the
    # ledger has neither): Note [A sparse gradient's part ends no backward] (engine.py)
    sparse_part: np.ndarray = None
    timings: Timings = None   # untraced module and op times (memledger/replay/timings.py)
    calibration: dict = None  # the machine's cost constants recorded in the ledger ({}: none)
    fsdp_gather: np.ndarray = None  # bool: FSDP2's all-gather outputs and unsharded
    #                                  parameters (Note [Replay of a checkpointed region] 6)
    # top-level modules besides the model (a GAN's discriminator), by path prefix: a policy
    # never selects their modules, as `measure` applies it to the model only
    other_roots: tuple[str, ...] = ()
    own_call: tuple[str, ...] = ()  # the model's modules with a `__call__` of their own
    # (path, method): the public method through which each module of the model ran work
    # outside any call (Note [Work a module's method does outside any call], collector.py)
    methods: tuple[tuple[str, str], ...] = ()
    model_moved: bool = False   # the first optimizer step named the model (model_moved)
    model_was: str = ""         # then, the label its calls had before (model_was)
    compiled: tuple[tuple[str, str], ...] = ()   # (path, backend): replay/compiled.py
    scope_model: np.ndarray = None  # bool per call: a call of the model's (model_calls)
    # path -> class of the modules the model's forward made and held nowhere (Note [A
    # selector of a module made in the forward], replay/policies.py)
    made_in_forward: dict = field(default_factory=dict)
    # Note [No model in the steps taken] (replay/policies.py): where no module is the
    # model, (label, class) of the top-level modules the script called; None where one is
    no_model: tuple | None = None
    steps_traced: int = 0
    # one entry per `saved` record (a parameter saved by every call has one per call):
    pack_row: np.ndarray = None     # int64 its storage's row
    pack_ev: np.ndarray = None      # int64 its event (Rule 5 of the replay)
    pack_mod_code: np.ndarray = None  # int64 index into pack_mod_names: the module that saved
    pack_mod_names: np.ndarray = None  # object
    pack_unpack: np.ndarray = None  # int64 the unpack that read this save back (-1: none)
    pack_unpack_end: np.ndarray = None  # int64 when that unpack's node returned (-1: unknown)
    pack_unpack_rel: np.ndarray = None  # int64 when autograd let go of that node (-1: unknown)
    # int64 when that node's gradients' broadcast sums ended, autograd letting go of it then
    # (-1: none ran after its apply, or not recorded): Note [A copy the force graph holds,
    # let go with its node] (replay/engine.py)
    pack_unpack_val: np.ndarray = None
    pack_gone: np.ndarray = None    # int64 when autograd let go of it unread in forward (-1:
    #                                 not: read, held into backward, or an older ledger)
    pack_let_go: np.ndarray = None  # int64 when a kept graph let go of it after it was read
    #                                 (-1: with its node, or an older ledger)
    # bool per save: the saved tensor was a sparse one (its `saved` record's `sparse`;
    # older ledgers: none), which measure's offloader leaves on the device (Note [A sparse
    # save stays on the device], replay/engine.py)
    pack_sparse: np.ndarray = None
    # bool per save: more unpacks name it (its storage and event) than saves were made there:
    # a second backward pass read it (Note [Read again: by the save, not the storage],
    # replay/engine.py); None: a ledger whose unpacks name no save
    pack_reread: np.ndarray = None
    # int64 per save: the event of the first unpack naming it beyond its saves (the pass
    # that reads it again meets it there; -1: none, or an older ledger)
    pack_reread_ev: np.ndarray = None
    # every unpack that names its save, in event order (Note [Rounds of a read-back,
    # replayed], replay/engine.py): the save record it read (an index into the pack_
    # arrays), its event, when its node returned; None: a ledger whose unpacks name no save
    read_pack: np.ndarray = None
    read_ev: np.ndarray = None
    read_end: np.ndarray = None
    unpack_unnamed: np.ndarray = None   # bool per storage: an unpack of it names no save
    last_use: np.ndarray = None   # int64 event of the storage's last use (any phase)
    made_mod: np.ndarray = None   # object: the module that made the storage ("" = none)
    param_modules: tuple[str, ...] = ()   # every module path a parameter's name implies
    classes: dict = None                  # path -> class of the model's modules with parameters
    idle_modules: tuple[str, ...] = ()    # of those, ones no op read in the traced steps
    containers: dict[str, str] = field(default_factory=dict)   # Note [Containers]: path -> class
    # a module's second path -> the one it is named by (Note [A module under a second path],
    # trace/roots.py; older ledgers: none)
    aliases: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_ledger(cls, led: Ledger) -> "Prepared":
        st = _replayed_storages(led)
        n = led.n_events
        fwd = np.full(len(st), -1, dtype=np.int64)
        recs = led.extra.get("fwdlast", [])
        if recs:
            fl = pd.DataFrame(recs, columns=["k", "sid", "last"]).drop_duplicates(
                "sid", keep="last").set_index("sid")["last"]
            fwd = fl.reindex(st.index).fillna(-1).to_numpy(dtype=np.int64)
        saved_last = (st["saved_last_ev"] if "saved_last_ev" in st else st["saved_ev"])
        sc = led.scopes
        # Note [Module calls in the loss phase]
        # A policy acts on every call of its modules' forward (measure wraps it), in the
        # loss phase too, and a model run through a method of its own is in that phase
        # between its parts: each top-level part call's end begins the loss (the collector
        # cannot see the method return), and a part without parameters called next stays
        # in it. `def run(self, x): return self.out(self.act(self.inp(x)))` had its `act`
        # (GELU, Dropout, Softplus; 64 x 32 -> 64 -> 8) refused by predict, "matches no
        # module; the modules the traced forward called are inp, out", while measure ran
        # `checkpoint:act` (91,400 B) and `offload:act` (78,404 B), predicted so now
        # (mambapy's muP norms alike: docs/accuracy.md). Calls of the loss phase are the
        # policies' too (a loss module the model holds, Lightning's `self.loss_fn`,
        # alike); not those of backward (re-runs), and between steps only those with
        # gradients (Note [A call with gradients between steps]).
        # Note [A call with gradients between steps]
        # The forward phase begins at a top-level call of the model (or of a module that
        # holds parameters); a call of the model's modules nested in a parameterless
        # module outside it stays in the phase around it. flow_matching's
        # `ODESolver.compute_likelihood`, run in an evaluation between steps, hands
        # torchdiffeq a closure that turns gradients on and calls the velocity model, and
        # torchdiffeq wraps that closure in modules of its own (`_PerturbFunc`): the model's
        # calls read "other", and the replay, which took calls of the forward and loss
        # phases only, left the policy off them, where measure wraps every call. The
        # divergence's `autograd.grad` through them made the step's peak: with a Hutchinson
        # estimate every policy was predicted at the baseline (tests/clients/
        # train_grad_in_eval.py --through: 103,564 B against 97,292 B measured under
        # `checkpoint:*`, 83,084 B under `offload:*`), with the exact divergence (two
        # graph-building passes) priced where measure's re-runs cost more. So a call with
        # gradients between steps (or in the optimizer's step) is the policies' as well;
        # not those of backward (re-runs), nor of setup (before measure wraps the model),
        # nor one without gradients (an evaluation, which runs plainly: `scope_grad`).
        # Setup with gradients, checked (fifty-second session, fix52e): a top-level call of
        # the model ends setup (a warm-up, a probe, an LR finder's steps then read
        # "forward" and are the policies' on both sides), so only calls nested in a
        # parameterless module before the model's first top-level call read "setup" with
        # gradients (and "other" after an optimizer step, named under that module, which
        # no selector of the model reaches); measure labels that module beside a model
        # not found yet (it holds no parameters: Note [The model]) and puts the policy on
        # nothing until the model's first top-level call, so they run plain there too.
        # Pinned: tests/clients/test_grad_in_setup.py (99,016 B on both sides under every
        # policy). Where that call never comes in the steps taken (an LR finder's two
        # steps alone), both sides refuse in one line: Note [No model in the steps taken]
        # (replay/policies.py; fifty-third session, fix53c).
        if len(sc):
            sc = sc[sc["ph"].isin(("forward", "loss")) |
                    (~sc["nograd"].astype(bool) & ~sc["ph"].isin(("backward", "setup")))]
        cls_col = sc["cls"] if "cls" in sc else pd.Series([""] * len(sc))
        steps_ns = led.steps["ns"].to_numpy(dtype=np.int64) if len(led.steps) else \
            np.zeros(0, dtype=np.int64)
        meas = led.measured or {}
        calib = (led.extra.get("calibration") or [{}])[-1]
        op_code, op_names = pd.factorize(st["op"].astype(str).str.split(".").str[0])
        scratch_ev, scratch_b = led.kernel_scratch()
        rewrap_ev, rewrap_b = led.rewrapped_numbers()
        curve_peak = led.peak_with_scratch()
        # a gap to a run of other code is no workspace: where the allocator pass ran
        # compiled code (`compiles`) the ledger is the eager run (Note [Compiled code runs
        # eager under the collector]), and carrying the compiled run's 430,584 B more than
        # the eager one to every policy predicted neither run (tests/clients/test_lowbit.py)
        workspace = max(0, int(meas.get("peak_bytes", 0)) - curve_peak) \
            if meas and not led.extra.get("compiles") else 0
        if workspace and rank_gap_is_collective(led):
            scratch_ev = np.append(scratch_ev, int(np.argmax(led.curve_with_scratch())))
            scratch_b = np.append(scratch_b, workspace)
            curve_peak, workspace = curve_peak + workspace, 0
        mod_code, mod_names = pd.factorize(sc["mod"].astype(str))
        smod_code, smod_names = pd.factorize(st["saved_module"].astype(str))
        untraced = meas.get("step_ns") or calib.get("step_ns") or []
        others = other_roots(led)
        stateful = led.extra.get("stateful", [])   # Note [State written outside a region]
        st_mod, st_ev0, st_obj = stateful_calls(stateful)
        return cls(
            n_events=n,
            nbytes=st["bytes"].to_numpy(dtype=np.int64),
            created=st["created"].to_numpy(dtype=np.int64),
            freed=st["freed"].to_numpy(dtype=np.int64),
            cat=_rule_categories(st),
            saved_first=st["saved_ev"].to_numpy(dtype=np.int64),
            saved_last=saved_last.to_numpy(dtype=np.int64),
            saved_mod_code=smod_code.astype(np.int64),
            saved_mod_names=np.asarray(smod_names, dtype=object),
            unpack=st["unpack_ev"].to_numpy(dtype=np.int64),
            unpack_first=(st["unpack_first_ev"] if "unpack_first_ev" in st
                          else st["unpack_ev"]).to_numpy(dtype=np.int64),
            unpack_end=_column(st, "unpack_end_ev", -1),
            unpack_rel=_column(st, "unpack_rel_ev", -1),
            fwd_last=fwd,
            last_use=_column(st, "last_use", -1),
            made_mod=st["module"].fillna("").astype(str).to_numpy(dtype=object),
            arg_end=_arg_end(sc, n, st["created"].to_numpy(dtype=np.int64), fwd),
            op_code=op_code.astype(np.int64),
            op_names=np.asarray(op_names, dtype=object),
            scope_mod=sc["mod"].to_numpy(dtype=object),
            scope_code=mod_code.astype(np.int64),
            mod_names=np.asarray(mod_names, dtype=object),
            scope_cls=cls_col.fillna("").to_numpy(dtype=object),
            scope_ev0=sc["ev0"].to_numpy(dtype=np.int64),
            scope_ev1=sc["ev1"].to_numpy(dtype=np.int64),
            scope_ns=sc["ns"].fillna(0).to_numpy(dtype=np.int64),
            scope_step=sc["step"].to_numpy(dtype=np.int64),
            scope_grad=~sc["nograd"].to_numpy(dtype=bool),
            scope_stats=sc["stats"].to_numpy(dtype=np.int64),
            **_backward_spans(led.phases, n),
            step_ns=steps_ns,
            step_events=np.diff(np.concatenate([[-1], led.steps["ev"].to_numpy(dtype=np.int64)]))
            if len(led.steps) else np.zeros(0, dtype=np.int64),
            untraced_step_ns=float(np.median(untraced[1:] if len(untraced) > 1 else untraced))
            if len(untraced) else 0.0,
            copy_bytes_per_s=float(calib.get("copy_bytes_per_s", 0.0)),
            scratch_ev=scratch_ev,
            scratch_bytes=scratch_b,
            rewrap_ev=rewrap_ev,
            rewrap_bytes=rewrap_b,
            workspace=workspace,
            baseline_ledger_peak=curve_peak,
            held=st.index.isin(list(held_sids(stateful))),
            # Note [Written in place in forward] (trace/collector.py)
            mutated=st.index.isin([r["sid"] for r in led.extra.get("mutated", [])]),
            state_writes=_state_writes(led, st, sc),
            param_writes=_parameter_writes(led, st),
            folded_in=st.index.isin([r["in"] for r in led.extra.get("inplace", [])
                                     if "in" in r]),
            kept=tuple((str(r["mod"]), int(r["ev0"])) for r in led.extra.get("kept", [])),
            kept_handed=frozenset((str(r["mod"]), int(r["ev0"]))
                                  for r in led.extra.get("kept", []) if r.get("handed")),
            kept_flag=frozenset((str(r["mod"]), int(r["ev0"]))
                                for r in led.extra.get("kept", []) if r.get("flag")),
            kept_fill={(str(r["mod"]), int(r["ev0"])): int(r["fill"])
                       for r in led.extra.get("kept", []) if r.get("fill")},
            released=_released(led, st),
            returned_ev0=_returned(led, st),
            unheld=_unheld(led, st),
            **_earlier_categories(st),
            **_category_spans(led, st),
            **_lent(led, st),
            sparse_part=_sparse_parts(led, st),
            **_autocast_casts(led, st),
            kept_plain=_kept_plain(led, st),
            stash_calls=_stash_calls(led, st, np.where(fwd >= 0, fwd,
                                                       _column(st, "last_use", -1))),
            stashed=st.index.isin([int(x) for r in led.extra.get("stash", [])
                                   for x in r.get("sids", ())]),
            **_stasher(led, st),
            # kept on a module with a graph of ops (older ledgers: none, as before)
            stashed_graph=st.index.isin([int(x) for r in led.extra.get("stash", [])
                                         for x in r.get("graph", ())]),
            **_stash_reach(led, st),
            **_call_args(led, st),
            stateful_mod=st_mod, stateful_ev0=st_ev0, stateful_obj=st_obj,
            script_ckpt=script_checkpoints(led.extra.get("script_ckpt", [])),
            script_fn_ckpt=script_function_checkpoints(led.extra.get("script_ckpt_fn", [])),
            script_ckpt_at=checkpoint_events(led.extra.get("script_ckpt", []),
                                             script_checkpoints),
            script_fn_ckpt_at=checkpoint_events(led.extra.get("script_ckpt_fn", []),
                                                script_function_checkpoints),
            modes=tuple((int(r["ev"]), int(r.get("from", -1)),
                         tuple(zip(map(str, r["mods"]), map(bool, r["train"]))),
                         None if "reads" not in r else tuple(map(str, r["reads"])))
                        for r in led.extra.get("modes", [])),
            other_roots=others,
            model_moved=model_moved(led),
            model_was=model_was(led),
            param_modules=(params := _param_modules(st, others)),
            idle_modules=_idle_modules(st, params),
            containers=_containers(led),
            aliases=_aliases(led),
            classes=_classes(led),
            own_call=_own_call(led),
            methods=_methods(led),
            compiled=compiled_regions(led),
            scope_model=model_calls(sc, led),
            made_in_forward=made_in_forward(sc, others),
            no_model=_roots_without_a_model(sc, others, params),
            steps_traced=led.steps_traced,
            saves=_column(st, "saves", 0),
            unpacks=_column(st, "unpacks", 0),
            graph_reads=_graph_reads(led, st, n),
            passes_read=_passes_read(led, st, n),
            pass1_end=_column(st, "unpack_pass1_end_ev", -1),
            pass2=_column(st, "unpack_pass2_ev", -1),
            timings=match_timings(timing_record(led), sc, led.steps, n,
                                  st["created"].to_numpy(dtype=np.int64),
                                  np.asarray(op_names, dtype=object)[op_code]),
            calibration=dict(calib.get("params") or {}),
            fsdp_gather=_fsdp_gather(st),
            torch_version=str(led.header.get("torch") or ""),
            **_packs(led, st),
        )

    def subset(self, keep: np.ndarray, spans: np.ndarray | None = None) -> "Prepared":
        """The same run with only the storages in `keep` (a bool mask): every per-storage
        array (one entry per storage; scope, step, scratch and name tables are not) is cut
        to them; scopes and events unchanged. Replaying a
        policy on a block's own storages gives that block's effect (plan.py, Note
        [Blocks add up]). `spans` ((calls, 2) [ev0, ev1), sorted, disjoint): the calls a
        policy on the subset may re-run; kernel scratch and re-wrapped numbers outside them
        are left out, as they add the same to every policy's slots (a 48-block GPT carries
        6,588 and 6,008 such rows, its blocks' own storages 230 each)."""
        n = len(self.created)
        not_per_storage = ("scope_", "step_", "scratch_", "stateful_", "pack_", "phase_",
                           "read_")
        per_storage = [f.name for f in dataclasses.fields(self)
                       if isinstance(getattr(self, f.name), np.ndarray)
                       and len(getattr(self, f.name)) == n and not f.name.endswith("_names")
                       and not f.name.startswith(not_per_storage)]
        out = dataclasses.replace(self, **{f: getattr(self, f)[keep] for f in per_storage})
        for f in ("held", "released", "unheld", "stashed", "stashed_graph", "kept_plain",
                  "cat_until", "cat_before", "cat_after"):
            if getattr(self, f) is not None:
                setattr(out, f, getattr(self, f)[keep])
        if self.arg_row is not None:   # argument rows point into the kept storages now
            new_row = np.cumsum(keep) - 1
            ok = keep[self.arg_row]
            out.arg_row = new_row[self.arg_row[ok]]
            out.arg_mod, out.arg_ev0 = self.arg_mod[ok], self.arg_ev0[ok]
        if self.pack_row is not None:   # so do the save records' rows
            new_row = np.cumsum(keep) - 1
            ok = keep[self.pack_row]
            out.pack_row = new_row[self.pack_row[ok]]
            out.pack_ev, out.pack_mod_code = self.pack_ev[ok], self.pack_mod_code[ok]
            out.pack_unpack = self.pack_unpack[ok]
            out.pack_unpack_end = self.pack_unpack_end[ok]
            out.pack_unpack_rel = self.pack_unpack_rel[ok]
            if self.pack_unpack_val is not None:
                out.pack_unpack_val = self.pack_unpack_val[ok]
            out.pack_gone = self.pack_gone[ok]
            if self.pack_sparse is not None:
                out.pack_sparse = self.pack_sparse[ok]
            if self.pack_let_go is not None:
                out.pack_let_go = self.pack_let_go[ok]
            if self.pack_reread is not None:
                out.pack_reread = self.pack_reread[ok]
                out.pack_reread_ev = self.pack_reread_ev[ok]
            if self.read_pack is not None:   # the reads of the kept saves, renumbered
                new_pack = np.cumsum(ok) - 1
                mine = ok[self.read_pack]
                out.read_pack = new_pack[self.read_pack[mine]]
                out.read_ev, out.read_end = self.read_ev[mine], self.read_end[mine]
        out.__dict__["_modules"] = self.module_table
        if spans is not None:
            inside = _within(self.scratch_ev, spans)
            out.scratch_ev, out.scratch_bytes = self.scratch_ev[inside], \
                self.scratch_bytes[inside]
            if self.rewrap_ev is not None:
                inside = _within(self.rewrap_ev, spans)
                out.rewrap_ev, out.rewrap_bytes = self.rewrap_ev[inside], \
                    self.rewrap_bytes[inside]
        return out

    def modules(self) -> list[tuple[str, str]]:
        """(path, class name) of every module of the model that ran a forward, in first-call
        order (not those of `other_roots`)."""
        mine = self.scope_model
        # one entry per path: a compiled submodule's wrapper and the module it wraps have
        # one name (`plain_name`), and the module's own class is the one to select by
        table: dict[str, str] = {}
        for path, cls in zip(self.scope_mod[mine].tolist(), self.scope_cls[mine].tolist()):
            table.setdefault(path, cls)   # the wrapped module's call ends, and is recorded, first
        return list(table.items())

    @property
    def script_reruns(self) -> bool:
        """Whether the script checkpoints anything itself, a module or a function of none:
        its re-runs hold what their node unpacked (Note [A re-run of a checkpointed
        function holds the read-back copy], engine.py)."""
        return bool(self.script_ckpt or self.script_fn_ckpt)

    @property
    def module_table(self) -> list[tuple[str, str]]:
        """`modules()`, computed once."""
        if "_modules" not in self.__dict__:
            self.__dict__["_modules"] = self.modules()
        return self.__dict__["_modules"]


def _within(ev: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Whether each event lies in one of the [ev0, ev1) spans (sorted, disjoint)."""
    if not len(spans) or not len(ev):
        return np.zeros(len(ev), dtype=bool)
    k = np.searchsorted(spans[:, 0], ev, side="right") - 1
    return (k >= 0) & (ev < spans[np.maximum(k, 0), 1])


# categories a forward's in-place write is never state of: a parameter written in place is
# written back within the forward (Note [State a re-run writes again]); the others are not
# written in forward
_NOT_STATE = frozenset({"parameter", "gradient", "optimizer_state"})


def _state_writes(led: Ledger, st: pd.DataFrame, sc: pd.DataFrame
                  ) -> tuple[tuple[int, str, int, bool, int, bool], ...]:
    """(event, storage name, creation event or -1, replaced, read, again) of each buffer,
    or other storage but a
    parameter, that a forward wrote in place (its first such write of each step: `mutated`
    records), less a training BatchNorm's: the innermost forward call holding the write
    carries `stats` (Note [State a re-run writes again]). A buffer is state wherever it
    was made (-1); another storage only for a region whose call began after it was made,
    which the replay checks per call (a metric's running sums, made at set-up or by its
    `reset()`, against a ReLU's `inplace=True` on what the region made itself). `read`:
    the last forward event at or before the write whose op read the storage's values
    (Note [A state the region reads before it writes], trace/collector.py; the write's own
    where a ledger does not say, or the state was replaced); `again`: a later step's
    forward wrote it too."""
    ev0 = sc["ev0"].to_numpy(dtype=np.int64) if len(sc) else np.zeros(0, dtype=np.int64)
    ev1 = sc["ev1"].to_numpy(dtype=np.int64) if len(sc) else ev0
    stats = sc["stats"].to_numpy(dtype=np.int64) if len(sc) else ev0
    out = []
    for r in led.extra.get("stateful", []):   # a call that replaced its own state
        if r.get("obj") == OWN_STATE and "ev1" in r:
            # Note [A buffer replaced from the one before] (trace/collector.py): the
            # attribute and the stale read; older ledgers name neither
            attrs = r.get("attrs") or ()
            name = f"{r['mod']}.{attrs[0]}" if attrs and r["mod"] else \
                (attrs[0] if attrs else f"the state of {r['mod']}")
            at = int(r.get("ev", int(r["ev1"]) - 1))
            out.append((at, name, -1, True, at, True))
    steps = {}   # sid -> how many steps wrote it (one `mutated` record per storage and step)
    for r in led.extra.get("mutated", []):
        steps[int(r["sid"])] = steps.get(int(r["sid"]), 0) + 1
    for r in led.extra.get("mutated", []):
        sid, ev = int(r["sid"]), int(r["ev"])
        if sid not in st.index or st.at[sid, "category"] in _NOT_STATE:
            continue
        inside = np.flatnonzero((ev0 <= ev) & (ev < ev1))
        if len(inside) and stats[inside[np.argmax(ev0[inside])]] > 0:
            continue            # a BatchNorm's statistics: measure puts them back
        made = -1 if st.at[sid, "category"] == "buffer" else int(st.at[sid, "created"])
        out.append((ev, str(st.at[sid, "name"] or ""), made, False, int(r.get("rd", ev)),
                    steps[sid] > 1))
    return tuple(sorted(out, key=lambda w: w[0]))   # by event; records in their order


# Note [Model state over memory torch did not allocate]
# A storage over memory torch's allocator did not hand out is left off the device's curve
# (Note [Memory torch's allocator did not hand out], trace/external.py), and the replay
# left its row out with it, and so its saves. Those saves still say when the node that
# saved them was let go: FrEIA's `PermuteRandom` keeps its permutation as
# `nn.Parameter(torch.LongTensor(perm))` of a numpy array, which shares numpy's memory,
# and its forward `x[0][:, self.perm]` saves that index and nothing else. A checkpoint's
# frame (its RNG state, 5,056 B on CPU, and the call's argument) lives until backward
# unpacks that save (Note [Replay of a checkpointed region], rules 2 and 4: a call whose
# only save is model state holds its frame to that save's unpack); with the save gone the
# replay let the frame go as the call ended. With an inverse pass in the loss
# (tests/clients/train_freia.py --model glow --blocks 1 --width 8 --cycle 0.5) the frames
# of the forward's permutations were live at the peak: `checkpoint:module_list.2`
# predicted 476,364 B, measured 498,764 (two frames of 11,200 B), `checkpoint:
# module_list.7` 476,364 against 487,564. The replay now keeps the rows of the model's
# external parameters and buffers with no bytes: their saves and unpacks count, their
# memory does not (model state never moves under a policy). External storages of other
# roles stay out, as before.
_MODEL_ROLES = ("parameter", "buffer")


def _replayed_storages(led: Ledger) -> pd.DataFrame:
    """The device's storages the replay works on: those its allocator holds, and the
    external parameters and buffers with 0 bytes (Note [Model state over memory torch did
    not allocate])."""
    st = led.storages
    mine = st["device"] == led.device
    ext = mine & st["external"] & st["category"].isin(_MODEL_ROLES)
    if not ext.any():
        return led.on_device()
    st = st[(mine & ~st["external"]) | ext].copy()
    st.loc[st["external"], "bytes"] = 0
    return st


def _parameter_writes(led: Ledger, st: pd.DataFrame) -> tuple[tuple[int, str], ...]:
    """(event, name) of each parameter a forward wrote in place (`mutated` records: the
    first write of each step), by event: Note [A set-up on the first call]
    (replay/first_call.py)."""
    out = [(int(r["ev"]), str(st.at[int(r["sid"]), "name"] or ""))
           for r in led.extra.get("mutated", [])
           if int(r["sid"]) in st.index and st.at[int(r["sid"]), "category"] == "parameter"]
    return tuple(sorted(out))


# Note [A model's former label]
# A module called before the first optimizer step, when another top-level module held the
# model's names, was labelled as a module beside the model (a `root` record); when that
# step names it the model (Note [The model], trace/roots.py) the label is the model's no
# more: the `model` record says which it was (`was`). Stable-Baselines3's DQN calls
# `q_net_target` under no_grad before `q_net`: predict's refusal of
# `checkpoint:q_net_target` listed "the modules the script calls (the model, QNetwork,
# q_net_target)", QNetwork being the model itself. A `root` record written after the
# rename (it carries its event) may take the label again. Ledgers from before read as
# they did.


def other_roots(led: Ledger) -> tuple[str, ...]:
    """The path prefixes of the ledger's top-level modules besides the model (`root`
    records, memledger/trace/roots.py), less a label the model had before it was named
    the model (Note [A model's former label])."""
    retired = {str(r["was"]): int(r["ev"]) for r in led.extra.get("model", [])
               if r.get("was")}
    for was, ev in retired_labels(led):   # Note [A label the model's child takes], roots.py
        retired[was] = max(ev, retired.get(was, ev))
    return tuple(dict.fromkeys(
        r["mod"] for r in led.extra.get("root", [])
        if not (r["mod"] in retired and int(r.get("ev", -1)) < retired[r["mod"]])))


def retired_labels(led: Ledger) -> list[tuple[str, int]]:
    """(label, event) of each top-level module's label retired (Note [A label the model's
    child takes], trace/roots.py): it names that module before the event only."""
    return [(str(m), int(r["ev"])) for r in led.extra.get("retired", []) for m in r["mods"]]


def model_moved(led: Ledger) -> bool:
    """The first optimizer step named the model (Note [The model]): the first top-level
    module with parameters the script called is not it."""
    return any(r.get("was") for r in led.extra.get("model", []))


def model_was(led: Ledger) -> str:
    """Where the first optimizer step named the model, the label its calls had before
    (Note [Steps that end where the model is decided], replay/policies.py); "" if not."""
    return next((str(r["was"]) for r in led.extra.get("model", []) if r.get("was")), "")


# Note [A module that holds buffers alone]
# The modules a policy may name beside those that ran as calls were those the parameters'
# names imply. A module holding buffers alone and never called as one was then unknown to
# predict: performer-pytorch's `ProjectionUpdater` (`net.performer.proj_updater`, whose
# `forward` raises; its `redraw_projections` method runs from `Performer.forward`) holds
# the counter `calls_since_last_redraw`, and `checkpoint:net.performer.proj_updater` read
# "matches no module; the modules the traced forward called are ..." while measure said it
# runs through another of its methods, and named the modules it holds by a second path
# (`proj_updater.instance`, the `Performer.net` it keeps a reference to: Note [Modules by
# the model's names], measure/apply.py). The buffers' names now imply modules too; such a
# module whose every buffer was last read before the first forward never ran
# (`_idle_modules`), as one whose parameters were.
# Note [Modules listed as the model holds them]
# A refusal lists the modules a selector matches (`_listed`: the first three): measure in
# the order `named_modules()` gives them, predict in this tuple's, which put every module
# its parameters imply before those its buffers imply. nflows' MAF under reverse KL
# (`sample_and_log_prob` runs the transforms' `inverse`: none is a module call), the
# permutations holding a buffer alone: predict said "matches _transform._transforms.1,
# _transform._transforms.3, _transform._transforms.0, ... (1 more)", measure
# "_transforms.0, _transforms.1, _transforms.2, ..." for one refusal. Taken together in the
# order their first storages were made, as a model's constructor makes them, both read
# alike (tests/clients/train_nflows.py --mode reverse).
def _param_modules(st: pd.DataFrame, others: tuple[str, ...]) -> tuple[str, ...]:
    """The module paths the model's parameter names imply (`layers.0.feed_forward` from
    `layers.0.feed_forward.w1.weight`), whether or not the module ran as a call (Note
    [Modules whose forward is called directly], replay/policies.py), and those its
    buffers' names imply (Note [A module that holds buffers alone]), in the order their
    first storages were made (Note [Modules listed as the model holds them])."""
    names = st.loc[st["category"].isin(("parameter", "buffer")), "name"].sort_index() \
        .dropna().astype(str)
    out: dict[str, None] = {}
    for name in names.unique().tolist():
        parts = name.split(".")[:-1]
        if parts and parts[0] not in others:
            out.update(dict.fromkeys(".".join(parts[:i]) for i in range(1, len(parts) + 1)))
    return tuple(out)


def _idle_modules(st: pd.DataFrame, param_modules: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `param_modules` whose every parameter was last read before the first
    forward: modules that never ran in the traced steps (a vision tower
    given text alone), not modules whose `.forward()` the script calls directly."""
    fwd = st.loc[st["phase"] == "forward", "created"]
    if not len(fwd):
        return ()
    first = fwd.min()
    idle: dict[str, bool] = {}
    # a module is idle when every module under it that holds parameters is; one that holds
    # buffers alone, when every buffer under it is (Note [A module that holds buffers alone])
    for cat in ("parameter", "buffer"):
        held = st[st["category"] == cat].dropna(subset=["name"])
        mods = held["name"].astype(str).str.rsplit(".", n=1).str[0]
        last = held["last_use"].groupby(mods).max()
        found: dict[str, bool] = {}
        for path, t in last.items():
            parts = str(path).split(".")
            for i in range(1, len(parts) + 1):
                key = ".".join(parts[:i])
                found[key] = found.get(key, True) and bool(t < first)
        for key, v in found.items():
            idle.setdefault(key, v)
    return tuple(m for m in param_modules if idle.get(m, False))


def _stasher(led: Ledger, st: pd.DataFrame) -> dict[str, np.ndarray | None]:
    """`stash_ev0` / `stash_ev1`: per storage, the span of the innermost call that kept it
    on its module (the latest first event among its `stash` records: the calls that keep
    one storage were all running when it was made, so they nest); -1 where none, or where
    the record has no end (older ledgers). Note [Kept by a call inside the region]
    (replay/engine.py)."""
    recs = [r for r in led.extra.get("stash", []) if "ev1" in r]
    if not recs:
        return {"stash_ev0": None, "stash_ev1": None}
    rows = pd.DataFrame([(int(s), int(r["ev0"]), int(r["ev1"])) for r in recs
                         for s in r.get("sids", ())], columns=["sid", "ev0", "ev1"])
    inner = rows.sort_values(["ev0", "ev1"], ascending=[True, False]) \
        .drop_duplicates("sid", keep="last") \
        .set_index("sid").reindex(st.index)
    return {"stash_ev0": inner["ev0"].fillna(-1).to_numpy(dtype=np.int64),
            "stash_ev1": inner["ev1"].fillna(-1).to_numpy(dtype=np.int64)}


def _stash_calls(led: Ledger, st: pd.DataFrame,
                 last_read: np.ndarray) -> tuple[tuple[str, int, int], ...]:
    """`stash_calls`: (module, first event, the latest forward read of what the call kept)
    per `stash` record (Note [A cache kept as a plain attribute], engine.py)."""
    last = pd.Series(last_read, index=st.index)
    out = []
    for r in led.extra.get("stash", []):
        sids = [int(x) for x in r.get("sids", ()) if int(x) in last.index]
        if sids:
            out.append((str(r["mod"]), int(r["ev0"]), int(last.loc[sids].max())))
    return tuple(out)


def _kept_plain(led: Ledger, st: pd.DataFrame) -> np.ndarray | None:
    """`kept_plain`: per storage, a buffer its call made and kept whose `kept` record says
    it has no graph of ops behind it (Note [A buffer kept without a graph], engine.py);
    None where no `kept` record says (older ledgers)."""
    recs = [r for r in led.extra.get("kept", []) if "graph" in r]
    if not recs:
        return None
    graph = {int(x) for r in recs for x in r["graph"]}
    return st.index.isin([int(x) for r in recs for x in r.get("sids", ()) if int(x) not in graph])


def _stash_reach(led: Ledger, st: pd.DataFrame) -> dict[str, np.ndarray | None]:
    """`stash_reach` and `stash_walked` from the `stash` records' `reach` lists (Note
    [Tensors a call keeps on its module]); None for ledgers without them."""
    walked = [r for r in led.extra.get("stash", []) if "reach" in r]
    if not walked:
        return {"stash_reach": None, "stash_walked": None}
    return {"stash_reach": st.index.isin([int(x) for r in walked for x in r["reach"]]),
            "stash_walked": st.index.isin([int(x) for r in walked for x in r["graph"]])}


def _containers(led: Ledger) -> dict[str, str]:
    """The model's modules with no forward of their own (Note [Containers], replay/
    policies.py), as recorded since the model was last renamed (`model` record)."""
    start = max((int(r["ev"]) for r in led.extra.get("model", [])), default=0)
    return {str(r["mod"]): str(r["cls"]) for r in led.extra.get("container", [])
            if int(r.get("ev", 0)) >= start}


def _aliases(led: Ledger) -> dict[str, str]:
    """Each second path of a module the model registers under several -> the path it is
    named by (the latest `aliases` record since the model was last renamed; Note [A module
    under a second path], trace/roots.py)."""
    return led.latest_map("aliases", "mods")


def _classes(led: Ledger) -> dict[str, str]:
    """The class of each module of the model that holds parameters (the latest `classes`
    record since the model was last renamed; older ledgers: none), for a `@Class` selector
    over modules that never ran as calls (Note [Modules run through another method])."""
    return led.latest_map("classes", "cls")



def _own_call(led: Ledger) -> tuple[str, ...]:
    """The model's modules whose class has a `__call__` of its own (the latest `own_call`
    record since the model was last renamed; Note [A class with a call of its own],
    replay/policies.py)."""
    start = max((int(r["ev"]) for r in led.extra.get("model", [])), default=0)
    out: tuple[str, ...] = ()
    for r in led.extra.get("own_call", []):
        if int(r.get("ev", 0)) >= start:
            out = tuple(str(m) for m in r["mods"])
    return out


def _methods(led: Ledger) -> tuple[tuple[str, str], ...]:
    """(path, method) of the `method` records since the model was last renamed, the first
    per path (Note [Work a module's method does outside any call] in trace/collector.py)."""
    start = max((int(r["ev"]) for r in led.extra.get("model", [])), default=0)
    out: dict[str, str] = {}
    for r in led.extra.get("method", []):
        if int(r.get("ev", 0)) >= start:
            out.setdefault(str(r["mod"]), str(r["name"]))
    return tuple(out.items())


def _roots_without_a_model(sc: pd.DataFrame, others: tuple[str, ...],
                           params: tuple[str, ...]) -> tuple[tuple[str, str], ...] | None:
    """(label, class) of each top-level module the script called, where none is the model
    (no call of the model's and no parameter named as its: Note [No model in the steps
    taken], replay/policies.py); None where the model is known."""
    if params or (len(sc) and model_calls_any(sc, others)):
        return None
    cls = {}
    for p, c in zip(sc["mod"].astype(str), sc["cls"].astype(str)) if len(sc) else ():
        if p in others:
            cls.setdefault(p, c)
    return tuple((o, cls.get(o, "")) for o in others)


def model_calls_any(sc: pd.DataFrame, others: tuple[str, ...]) -> bool:
    """Whether a call not under a top-level module beside the model was recorded."""
    paths = sc["mod"].astype(str).unique().tolist()
    return any(not any(p == r or p.startswith(r + ".") for r in others) for p in paths)


def made_in_forward(sc: pd.DataFrame, others: tuple[str, ...]) -> dict[str, str]:
    """path -> class of the `unowned` calls not under a top-level module beside the model:
    modules the model's forward made and held nowhere (Note [A selector of a module made in
    the forward], replay/policies.py)."""
    if not len(sc):
        return {}
    rows = sc[sc["unowned"].to_numpy(dtype=bool)]
    return {p: c for p, c in zip(rows["mod"].astype(str), rows["cls"].astype(str))
            if not any(p == r or p.startswith(r + ".") for r in others)}


def model_calls(sc: pd.DataFrame, led: Ledger) -> np.ndarray:
    """Per module call (a row of `led.scopes`): a call of the model's, the only module a
    policy acts on (Note [The model] in trace/roots.py): not another top-level module's,
    not one made under the model's names before they became the model's (`model`
    record: a teacher's, before the first optimizer step named its student), and not a
    module the model made in its forward and holds nowhere (`unowned`: Note [Modules the
    model makes in its forward], trace/collector.py)."""
    mods, ev0 = sc["mod"].to_numpy(dtype=object), sc["ev0"].to_numpy(dtype=np.int64)
    others = other_roots(led)
    start = max((int(r["ev"]) for r in led.extra.get("model", [])), default=0)
    codes, paths = pd.factorize(pd.Series(mods, dtype=object).astype(str))
    ours = np.array([not any(p == r or p.startswith(r + ".") for r in others) for p in paths],
                    dtype=bool)
    keep = (ours[codes] if len(paths) else np.zeros(len(mods), dtype=bool)) & (ev0 >= start)
    for was, ev in retired_labels(led):   # that module's calls under its former label
        under = np.array([p == was or p.startswith(was + ".") for p in paths], dtype=bool)
        if len(paths):
            keep &= ~(under[codes] & (ev0 < ev))
    return keep & ~sc["unowned"].to_numpy(dtype=bool)


def _graph_reads(led: Ledger, st: pd.DataFrame, n: int) -> np.ndarray:
    """Per storage: the most backward passes that build a graph (`create_graph=True`) read
    one save of it in (Note [Read by a backward that builds a graph] in trace/collector.py).
    Per save (its event, `sev`), not per storage: a batch the script keeps and trains on
    step after step is saved again in each step's forward and read by that step's pass."""
    up = led.unpacks
    if up is None or not len(up) or "g" not in up or not (up["g"] == 1).any():
        return np.zeros(len(st), dtype=np.int64)
    spans = _backward_spans(led.phases, n)
    starts = spans["phase_bw_start"]
    per = _reads_by_pass(up[up["g"] == 1], starts)
    out = _most_passes(st, per)
    # a graph-building pass that made the gradients: `.grad` keeps its graph, and what it
    # read back, past the optimizer step (AdaHessian's `loss.backward(create_graph=True)`)
    grad = st["category"] == "gradient"
    if "cat_before" in st:   # a gradient the script kept past its step, `other` after
        grad |= st["cat_before"] == "gradient"
    made = st["created"].to_numpy(dtype=np.int64)[grad.to_numpy()]
    p = np.searchsorted(starts, made, side="right")
    inside = (p > 0) & (made < spans["phase_bw_end"][np.maximum(p - 1, 0)])
    grad_passes = set(p[inside].tolist())
    held = per[per["p"].isin(grad_passes)]["sid"].unique()
    rows = pd.Index(st.index).get_indexer(held)
    out[rows[rows >= 0]] = -1
    return out


def _passes_read(led: Ledger, st: pd.DataFrame, n: int) -> np.ndarray:
    """Per storage: the most backward passes (graph-building or not) that read one save of
    it (Note [Read by three backward passes or more], replay/engine.py); 0 where none, or
    in ledgers without unpack records."""
    up = led.unpacks
    if up is None or not len(up) or "sev" not in up:
        return np.zeros(len(st), dtype=np.int64)
    starts = _backward_spans(led.phases, n)["phase_bw_start"]
    return _most_passes(st, _reads_by_pass(up, starts, led.saves))


# Note [Passes inside one backward phase]
# One backward pass runs a node once, so it unpacks each save once: a save read again
# within one backward phase was read by a pass a node's own backward ran inside it (Note
# [Read again: by the save, not the storage], replay/engine.py, which starts the second
# pass there). Counted by phases alone, such reads were one pass: torchjd's autogram
# engine (tests/clients/train_torchjd.py --mode autogram --no-batch-dim) routes each
# layer's output through a node whose backward takes `autograd.grad` of the layer again,
# so the head's saved input is read twice in `compute_gramian`'s backward and once in
# `losses.backward(weights)`'s: two passes by phase, three in truth. The replay held the
# second read-back copy from the second read to the third, across the Gramian's peak:
# `offload:head` 2,048 B over measured (502,924 against 500,876), `offload:blocks.0.act`
# 4,096 B. A save's passes in a phase are its reads there over the saves made at its
# event (`x * x` saves `x` twice at one event, and one pass reads both).
def _reads_by_pass(up: pd.DataFrame, starts: np.ndarray,
                   saves: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (storage, save, backward phase) among `up`'s unpacks (`starts`: the
    backward phases' first events), `k` the passes that read the save there: one per
    phase, or, given the `saves` records, its reads there over the saves made at its
    event (Note [Passes inside one backward phase])."""
    phase = np.searchsorted(starts, up["ev"].to_numpy(dtype=np.int64), side="right")
    reads = pd.DataFrame({"sid": up["sid"].to_numpy(), "sev": up["sev"].to_numpy(),
                          "p": phase}).groupby(["sid", "sev", "p"]).size().rename("n") \
        .reset_index()
    if saves is None or not len(saves):
        reads["k"] = 1
        return reads
    key = pd.MultiIndex.from_arrays([reads["sid"].to_numpy(), reads["sev"].to_numpy()])
    per = saves.groupby(["sid", "ev"]).size().reindex(key).fillna(1).to_numpy(dtype=np.int64)
    k = -(-reads["n"].to_numpy(dtype=np.int64) // np.maximum(per, 1))
    # an unpack that names no save (a re-run of the script's own checkpoint) counts once
    reads["k"] = np.where(reads["sev"].to_numpy(dtype=np.float64) >= 0, k, 1)
    return reads


def _most_passes(st: pd.DataFrame, per: pd.DataFrame) -> np.ndarray:
    """Per storage: the most passes that read one save of it (`_reads_by_pass`' rows)."""
    out = np.zeros(len(st), dtype=np.int64)
    counts = per.groupby(["sid", "sev"])["k"].sum().groupby(level=0).max()
    rows = pd.Index(st.index).get_indexer(counts.index)
    ok = rows >= 0
    out[rows[ok]] = counts.to_numpy(dtype=np.int64)[ok]
    return out


def _backward_spans(phases: pd.DataFrame, n: int) -> dict[str, np.ndarray]:
    """[start, end) of each backward phase (a phase lasts until the next one begins)."""
    ev = phases["ev"].to_numpy(dtype=np.int64)
    end = np.r_[ev[1:], n + 1] if len(ev) else ev
    bw = (phases["phase"] == "backward").to_numpy(dtype=bool)
    return {"phase_bw_start": ev[bw], "phase_bw_end": end[bw]}


def _arg_end(scopes: pd.DataFrame, n: int, created: np.ndarray,
             fwd_last: np.ndarray) -> np.ndarray:
    """For each storage, one past the end of the outermost module call that began after the
    storage was made and that holds its last forward use (0 when there is none).

    A tensor handed to a module call as an argument stays referenced by that call's frame
    until it returns, whatever its last use inside: `ln_1`'s output is `x` in the attention
    forward until the attention returns, although `c_attn` read it last. Calls nest, so
    painting them in order of first event leaves the innermost call on each event; the
    parent chain is then walked up (vectorised, once per nesting level) while the parent
    began after the storage was made.
    """
    out = np.zeros(len(created), dtype=np.int64)
    if not len(scopes) or not len(created):
        return out
    sc = scopes.assign(_len=scopes["ev1"] - scopes["ev0"]).sort_values(
        ["ev0", "_len"], ascending=[True, False], kind="stable")
    e0 = sc["ev0"].to_numpy(dtype=np.int64)
    e1 = sc["ev1"].to_numpy(dtype=np.int64)
    inner = np.full(n + 1, -1, dtype=np.int64)
    parent = np.full(len(e0), -1, dtype=np.int64)
    for i in range(len(e0)):            # once per call, at preparation (not per policy)
        parent[i] = inner[min(e0[i], n)]
        inner[e0[i]:e1[i]] = i
    f = np.clip(fwd_last, 0, n)
    cur = np.where(fwd_last >= 0, inner[f], -1)
    best = np.full(len(created), -1, dtype=np.int64)
    for _ in range(64):                 # nesting depth
        ok = cur >= 0
        if not ok.any():
            break
        after = ok & (e0[np.maximum(cur, 0)] > created)
        best = np.where(after, cur, best)
        cur = np.where(after, parent[np.maximum(cur, 0)], -1)
    return np.where(best >= 0, e1[np.maximum(best, 0)], 0)


def _earlier_categories(st: pd.DataFrame) -> dict[str, np.ndarray | None]:
    """`cat_until` and `cat_before` (Note [A copy the optimizer keeps, then the parameter]
    in ledger/held_roles.py), None where no storage has an earlier category."""
    until = _column(st, "cat_until", -1)
    if not (until >= 0).any():
        return {"cat_until": None, "cat_before": None, "cat_after": None}
    return {"cat_until": until,
            "cat_before": st["cat_before"].map(CAT_INDEX).fillna(OTHER).to_numpy(
                dtype=np.int64),
            "cat_after": st["category"].map(CAT_INDEX).fillna(OTHER).to_numpy(
                dtype=np.int64)}


def _category_spans(led, st: pd.DataFrame) -> dict[str, np.ndarray | None]:
    """`Ledger.category_spans()` as rows and category codes (Note [A gradient dropped from
    .grad, then put back], trace/dropped_grads.py); None where there is none."""
    sp = led.category_spans()
    row = st.index.get_indexer(sp["sid"].to_numpy()) if len(sp) else np.zeros(0, np.int64)
    if not (row >= 0).any():
        return dict.fromkeys(("span_row", "span_ev0", "span_ev1", "span_cat", "span_was"))
    ok = row >= 0
    sp = sp[ok]
    return {"span_row": row[ok].astype(np.int64),
            "span_ev0": sp["ev0"].to_numpy(dtype=np.int64),
            "span_ev1": sp["ev1"].to_numpy(dtype=np.int64),
            "span_cat": sp["cat"].map(CAT_INDEX).fillna(OTHER).to_numpy(dtype=np.int64),
            "span_was": sp["was"].map(CAT_INDEX).fillna(OTHER).to_numpy(dtype=np.int64)}


def _rule_categories(st: pd.DataFrame) -> np.ndarray:
    """The category the replay's rules read: the ledger's, but an activation the script
    carried into the next step (`other` from its step's end on, `cat_before` `activation`:
    Note [A state carried into the next step] in ledger/carried.py) is the activation it
    was, whose saves the rules drop, offload and remake as before; an unsaved one (Note [A
    state no op saved]) the temporary it was."""
    cat = st["category"]
    if "cat_before" in st:
        cat = cat.mask((st["cat_before"] == "activation").to_numpy(), "activation")
        # Note [A state no op saved] (ledger/carried.py): the temporary it was, too
        cat = cat.mask((st["cat_before"] == "temporary").to_numpy(), "temporary")
    return cat.map(CAT_INDEX).fillna(OTHER).to_numpy(dtype=np.int64)


def _column(st: pd.DataFrame, name: str, default: int) -> np.ndarray:
    """An int64 storage column, `default` throughout for ledgers read before it existed."""
    return st[name].to_numpy(dtype=np.int64) if name in st else \
        np.full(len(st), default, dtype=np.int64)


def _released(led: Ledger, st: pd.DataFrame) -> np.ndarray:
    """Per storage: the first event at which only autograd held it (collector's Note [When a
    saved storage is released]); -1 if the script held it into backward; -2 if unknown (not
    saved, or a ledger from before the record existed)."""
    recs = led.extra.get("released", [])
    if not recs:
        return np.full(len(st), -2, dtype=np.int64)
    rel = pd.DataFrame(recs, columns=["k", "sid", "ev"]).drop_duplicates(
        "sid", keep="first").set_index("sid")["ev"]
    out = rel.reindex(st.index).fillna(-2).to_numpy(dtype=np.int64)
    # held as a backward pass began, let go of before the step's next pass (Note [Let go of
    # between two backward passes] in trace/collector.py): released there
    between = led.extra.get("between", [])
    if between:
        ev = pd.DataFrame(between, columns=["k", "sid", "ev"]).drop_duplicates(
            "sid", keep="first").set_index("sid")["ev"]
        ev = ev.reindex(st.index).fillna(-1).to_numpy(dtype=np.int64)
        out = np.where((out == -1) & (ev >= 0), ev, out)
    return out


def _returned(led: Ledger, st: pd.DataFrame) -> np.ndarray | None:
    """Per storage: the first event of the outermost call whose output held it (-1: none);
    None where the ledger has no `ret` records (an older one)."""
    recs = led.extra.get("ret")
    if recs is None:
        return None
    ev0 = pd.Series([r["ev0"] for r in recs for _ in r["sids"]],
                    index=[s for r in recs for s in r["sids"]], dtype=np.int64)
    first = ev0.groupby(level=0).min()
    return first.reindex(st.index).fillna(-1).to_numpy(dtype=np.int64)


def _unheld(led: Ledger, st: pd.DataFrame) -> np.ndarray | None:
    """Per storage: the first `unheld` event (-1: none); None where the ledger has none."""
    recs = led.extra.get("unheld", [])
    if not recs:
        return None
    ev = pd.DataFrame(recs, columns=["k", "sid", "ev"]).drop_duplicates(
        "sid", keep="first").set_index("sid")["ev"]
    return ev.reindex(st.index).fillna(-1).to_numpy(dtype=np.int64)


def _lent(led: Ledger, st: pd.DataFrame) -> dict[str, np.ndarray | None]:
    """Per storage, its first lending to a sparse gradient and when the script let go of it
    (`Prepared.lent_ev`, `lent_until`, `lent_own`); None where the ledger has none."""
    recs = led.extra.get("lent", [])
    if not recs:
        return {"lent_ev": None, "lent_until": None, "lent_own": None}
    n = led.n_events
    spans = [r for r in recs if "ev" in r]
    ev = pd.Series([r["ev"] for r in spans], index=[r["sid"] for r in spans], dtype=np.int64)
    until = pd.Series([n if r["until"] < 0 else r["until"] for r in spans], index=ev.index,
                      dtype=np.int64)
    own = pd.Series({r["sid"]: r["own"] for r in recs if "own" in r}, dtype=np.int64)
    first = ~ev.index.duplicated()
    return {"lent_ev": ev[first].reindex(st.index).fillna(-1).to_numpy(dtype=np.int64),
            "lent_until": until[first].reindex(st.index).fillna(-1).to_numpy(dtype=np.int64),
            "lent_own": own[~own.index.duplicated()].reindex(st.index).fillna(-1)
            .to_numpy(dtype=np.int64)}


def _sparse_parts(led: Ledger, st: pd.DataFrame) -> np.ndarray | None:
    """Per storage: was it a sparse tensor's part (`sparse` and `lent` records); None where
    the ledger has neither."""
    sids = {r["sid"] for k in ("sparse", "lent") for r in led.extra.get(k, ())}
    if not sids:
        return None
    return st.index.isin(list(sids))


def _autocast_casts(led: Ledger, st: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per storage: whether it is a cast autocast keeps in its cache, and the row of the
    parameter it casts (-1: not such a cast, or a ledger from before `src`)."""
    recs = led.extra.get("acast", [])
    sids = [r["sid"] for r in recs]
    src = pd.Series([r.get("src", -1) for r in recs], index=sids, dtype=np.int64)
    src = src[~src.index.duplicated()]
    rows = pd.Index(st.index).get_indexer(src.to_numpy())
    by_sid = pd.Series(np.where(src.to_numpy() >= 0, rows, -1), index=src.index)
    return {"acast": st.index.isin(sids),
            "acast_src": by_sid.reindex(st.index).fillna(-1).to_numpy(dtype=np.int64)}


def _call_args(led: Ledger, st: pd.DataFrame) -> dict[str, np.ndarray]:
    """(call module, call first event, storage row) per tensor a module call was handed."""
    recs = led.extra.get("args", [])
    mods = [r["mod"] for r in recs for _ in r["sids"]]
    ev0 = [r["ev0"] for r in recs for _ in r["sids"]]
    sids = [s for r in recs for s in r["sids"]]
    row = pd.Index(st.index).get_indexer(sids) if sids else np.zeros(0, dtype=np.int64)
    ok = row >= 0   # storages on another device are not in these arrays
    return {"arg_mod": np.asarray(mods, dtype=object)[ok],
            "arg_ev0": np.asarray(ev0, dtype=np.int64)[ok],
            "arg_row": np.asarray(row, dtype=np.int64)[ok]}


# Note [Which save an unpack reads]
# The alias a save hands autograd carries its save's event, and the unpack record names it
# (`sev`): an unpack is matched to that save. Before (and for an unpack without it: older
# ledgers, a tensor the script's own checkpoint re-made), a stack per storage: backward
# reads the saves of one forward last first, so an unpack reads the latest save not yet
# read. A save backward never reads breaks that: PyG's `HeteroConv` computes every node
# type, and a model classifying papers leaves its last layer's author branch on no path to
# the loss; that branch saved the script's edge index (as each layer did), and each unpack
# of it was matched one save late. A layer's checkpoint frame, with its RNG state (5,056
# B) and arguments, was held to an earlier layer's backward: `checkpoint:convs.*`
# predicted 354,948 B, measured 328,068 B (tests/clients/train_pyg.py --case
# hetero_eager); train_mech.py --case two_kinds 249,712 B against 233,072 B.
def _exact_pairs(sv: pd.DataFrame, up: pd.DataFrame, sv_row: np.ndarray,
                 up_row: np.ndarray, dead: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(save index, unpack index) of the unpacks that name their save's event (`sev`), the
    first unpack of a save only (a second backward pass reads it again: that one reads
    none, as in the stack). `dead`: saves autograd let go of unread, which no unpack reads."""
    if not len(up) or "sev" not in up or not (up["sev"] >= 0).any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    s = pd.DataFrame({"row": sv_row, "ev": sv["ev"].to_numpy(dtype=np.int64),
                      "i": np.arange(len(sv))})
    # a dead save shares its event with a live one (a block's last ReLU saving its output,
    # then `h.abs()`, dropped, saving its input): paired to it, the ReLU's unpack read the
    # dead save, the block's own save read as never unpacked, and `checkpoint:blocks.0`
    # started its re-run after the ReLU's backward, 126,012 B under measured
    # (tests/clients/train_random.py `none/relu relu_;dead_save/kept branch;none/`)
    s = s[~dead]
    u = pd.DataFrame({"row": up_row, "ev": up["sev"].to_numpy(dtype=np.int64),
                      "j": np.arange(len(up))})
    u = u[u["ev"] >= 0]
    # one storage saved twice at one event, by the op that made it after it ran and by the
    # next op before it runs (a ReLU's output, which the next block's conv saves as its
    # input): backward reads the later save first, so the k-th unpack naming it reads the
    # k-th latest of those saves (matched the other way, the two reads were swapped and
    # a channels_last CNN's `checkpoint:blocks.0` read 39,232 B over measured)
    s["k"] = s.groupby(["row", "ev"]).cumcount(ascending=False)
    u["k"] = u.groupby(["row", "ev"]).cumcount()
    m = s.merge(u, on=["row", "ev", "k"])
    return m["i"].to_numpy(dtype=np.int64), m["j"].to_numpy(dtype=np.int64)


def _packs(led: Ledger, st: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every `saved` record (row, event, module) and the event of the `unpack` record that
    read it back: the save the unpack names (Note [Which save an unpack reads]), else by a
    stack per storage. A storage's saves and unpacks nest: backward reads the saves of one
    forward last first (a layer's weight, saved once per step; a shared block's, once per
    call), so an unpack reads the latest save not yet read. Unpacks beyond the saves (a
    second backward pass) read none."""
    sv, up = led.saves, led.unpacks
    idx = pd.Index(st.index)
    sv_row = idx.get_indexer(sv["sid"]) if len(sv) else np.zeros(0, dtype=np.int64)
    up_row = idx.get_indexer(up["sid"]) if len(up) else np.zeros(0, dtype=np.int64)
    sv, up = sv[sv_row >= 0], up[up_row >= 0]   # storages on another device: not here
    sv_row, up_row = sv_row[sv_row >= 0].astype(np.int64), up_row[up_row >= 0].astype(np.int64)
    mod_code, mod_names = pd.factorize(sv["mod"].fillna("").astype(str))
    pack_ev = sv["ev"].to_numpy(dtype=np.int64)
    pack_sparse = sv["sparse"].fillna(0).to_numpy(dtype=bool) if "sparse" in sv else \
        np.zeros(len(sv), dtype=bool)
    reread, reread_ev, unnamed = _reads_beyond_saves(sv_row, pack_ev, up, up_row, len(st))
    pack_row = sv_row
    gone, let_go = _save_ends(led, sv, "unread"), _save_ends(led, sv, "let_go")
    dead = gone >= 0   # never unpacked (Note [A save autograd let go of unread])
    ex_s, ex_u = _exact_pairs(sv, up, sv_row, up_row, dead)
    reads = _every_read(sv, up, sv_row, up_row, dead)
    n_all, up_all = len(sv), up
    if len(ex_s) or dead.any():   # the rest by the stack; an unpack naming a save reads it
        rest_s = np.setdiff1d(np.flatnonzero(~dead), ex_s)   # (or, read again, none)
        rest_u = np.flatnonzero((up["sev"] < 0).to_numpy()) if len(ex_s) else \
            np.arange(len(up))
        sv, sv_row = sv.iloc[rest_s], sv_row[rest_s]
        up, up_row = up.iloc[rest_u], up_row[rest_u]
    n_s = len(sv)
    row = np.concatenate([sv_row, up_row])
    ev = np.concatenate([sv["ev"].to_numpy(dtype=np.int64), up["ev"].to_numpy(dtype=np.int64)])
    up_end = up["end"].fillna(-1).to_numpy(dtype=np.int64) if "end" in up else \
        np.full(len(up), -1, dtype=np.int64)
    end = np.concatenate([np.full(n_s, -1, dtype=np.int64), up_end])
    up_rel = up["rel"].fillna(-1).to_numpy(dtype=np.int64) if "rel" in up else \
        np.full(len(up), -1, dtype=np.int64)
    rel = np.concatenate([np.full(n_s, -1, dtype=np.int64), up_rel])
    up_val = up["val"].fillna(-1).to_numpy(dtype=np.int64) if "val" in up else \
        np.full(len(up), -1, dtype=np.int64)
    val = np.concatenate([np.full(n_s, -1, dtype=np.int64), up_val])
    is_up = np.concatenate([np.zeros(n_s, dtype=np.int64), np.ones(len(up), dtype=np.int64)])
    o = np.lexsort((np.arange(len(row)), is_up, ev, row))   # by storage, then time; a save
    row, ev, is_up, end, rel = row[o], ev[o], is_up[o], end[o], rel[o]   # first at one event
    val = val[o]
    delta = 1 - 2 * is_up
    depth = np.cumsum(delta)
    start = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else np.zeros(0, int)
    base = np.repeat(depth[start] - delta[start], np.diff(np.r_[start, len(row)]))
    depth = depth - base                    # per storage
    level = np.where(is_up == 1, depth + 1, depth)   # a save and the unpack that reads it
    o2 = np.lexsort((np.arange(len(row)), level, row))   # are adjacent here
    matched = np.full(n_s, -1, dtype=np.int64)
    matched_end = np.full(n_s, -1, dtype=np.int64)
    matched_rel = np.full(n_s, -1, dtype=np.int64)
    matched_val = np.full(n_s, -1, dtype=np.int64)
    if len(o2) > 1:
        a, b = o2[:-1], o2[1:]
        pair = (row[a] == row[b]) & (level[a] == level[b]) & (is_up[a] == 0) & (is_up[b] == 1)
        matched[o[a[pair]]] = ev[b[pair]]
        matched_end[o[a[pair]]] = end[b[pair]]
        matched_rel[o[a[pair]]] = rel[b[pair]]
        matched_val[o[a[pair]]] = val[b[pair]]
    if len(ex_s) or dead.any():   # back to every save, in record order
        full = [np.full(n_all, -1, dtype=np.int64) for _ in range(4)]
        for out, stacked, col in zip(full, (matched, matched_end, matched_rel, matched_val),
                                     ("ev", "end", "rel", "val")):
            out[rest_s] = stacked
            if len(ex_s):
                out[ex_s] = up_all[col].to_numpy(dtype=np.int64)[ex_u] if col in up_all \
                    else -1
        matched, matched_end, matched_rel, matched_val = full
    return {"pack_row": pack_row, "pack_ev": pack_ev,
            "pack_mod_code": mod_code.astype(np.int64),
            "pack_mod_names": np.asarray(mod_names, dtype=object), "pack_unpack": matched,
            "pack_unpack_end": matched_end, "pack_unpack_rel": matched_rel,
            "pack_unpack_val": matched_val, "pack_gone": gone,
            "pack_let_go": let_go, "pack_sparse": pack_sparse, "pack_reread": reread,
            "pack_reread_ev": reread_ev,
            "unpack_unnamed": unnamed, **reads}


def _every_read(sv: pd.DataFrame, up: pd.DataFrame, sv_row: np.ndarray, up_row: np.ndarray,
                dead: np.ndarray) -> dict[str, np.ndarray | None]:
    """Every unpack that names its save (`sev`), a second backward pass's included: the
    save it read (an index into the save records), its event and when its node returned
    (`end`, else the unpack's own event). Where one storage was saved several times at one
    event, each pass reads the latest of them first (as `_exact_pairs` pairs the first
    pass), so the n-th unpack naming them reads the (n mod saves)-th latest. None where no
    unpack names its save (older ledgers). Note [Rounds of a read-back, replayed]
    (replay/engine.py)."""
    none = {"read_pack": None, "read_ev": None, "read_end": None}
    if not len(up) or "sev" not in up or not (up["sev"] >= 0).any():
        return none
    s = pd.DataFrame({"row": sv_row, "ev": sv["ev"].to_numpy(dtype=np.int64),
                      "i": np.arange(len(sv))})[~dead]
    s["k"] = s.groupby(["row", "ev"]).cumcount(ascending=False)
    n = s.groupby(["row", "ev"]).size().rename("n")
    at = up["ev"].to_numpy(dtype=np.int64)
    end = up["end"].fillna(-1).to_numpy(dtype=np.int64) if "end" in up else \
        np.full(len(up), -1, dtype=np.int64)
    u = pd.DataFrame({"row": up_row, "ev": up["sev"].fillna(-1).to_numpy(dtype=np.int64),
                      "at": at, "end": np.maximum(end, at + 1)})
    u = u[u["ev"] >= 0].sort_values("at", kind="stable")
    u = u.join(n, on=["row", "ev"], how="inner")
    u["k"] = u.groupby(["row", "ev"]).cumcount() % u["n"]
    m = u.merge(s, on=["row", "ev", "k"]).sort_values("at", kind="stable")
    return {"read_pack": m["i"].to_numpy(dtype=np.int64),
            "read_ev": m["at"].to_numpy(dtype=np.int64),
            "read_end": m["end"].to_numpy(dtype=np.int64)}


def _reads_beyond_saves(sv_row: np.ndarray, sv_ev: np.ndarray, up: pd.DataFrame,
                        up_row: np.ndarray, n: int) -> tuple[np.ndarray | None,
                                                             np.ndarray | None,
                                                             np.ndarray | None]:
    """(per save: more unpacks name its storage and event than saves were made there; per
    save: the event of the first of those unpacks beyond the saves, -1 where none; per
    storage: some unpack of it names no save), or (None, None, None) where no unpack names
    its save (older ledgers). Note [Read again: by the save, not the storage],
    replay/engine.py."""
    if not len(up) or "sev" not in up or not (up["sev"] >= 0).any():
        return None, None, None
    sev = up["sev"].fillna(-1).to_numpy(dtype=np.int64)
    named = sev >= 0
    unnamed = np.zeros(n, dtype=bool)
    unnamed[up_row[~named]] = True
    s = pd.DataFrame({"row": sv_row, "ev": sv_ev})
    saves = s.groupby(["row", "ev"]).size().rename("saves")
    u = pd.DataFrame({"row": up_row[named], "ev": sev[named],
                      "at": up["ev"].to_numpy(dtype=np.int64)[named]}).sort_values(
        "at", kind="stable")
    reads = u.groupby(["row", "ev"]).size().rename("reads")
    # the (saves + 1)-th unpack naming a (storage, event): the first read beyond its saves
    u["n"] = u.groupby(["row", "ev"]).cumcount()
    u = u.join(saves, on=["row", "ev"])
    again = u[u["n"] == u["saves"]].set_index(["row", "ev"])["at"].rename("again")
    j = s.join(reads, on=["row", "ev"]).join(saves, on=["row", "ev"]) \
        .join(again, on=["row", "ev"])
    return (j["reads"].fillna(0).to_numpy() > j["saves"].to_numpy()), \
        j["again"].fillna(-1).to_numpy(dtype=np.int64), unnamed


def _save_ends(led: Ledger, sv: pd.DataFrame, kind: str) -> np.ndarray:
    """Per save record: the event at which autograd let go of it, by the records of `kind`,
    else -1. `unread`: unread, in forward (its node died with an output the script dropped;
    Note [A save autograd let go of unread] in trace/collector.py); `let_go`: after it was
    read, by a graph the backward kept (Note [A node a kept graph holds on]). Two saves of
    one storage at one event (a sigmoid's own output, and `h.abs()` on it right after, Rule
    5 putting both at the sigmoid) are told apart by the record's `nth`."""
    recs = led.extra.get(kind, [])
    if not recs or not len(sv):
        return np.full(len(sv), -1, dtype=np.int64)
    u = pd.DataFrame(recs, columns=["sid", "sev", "ev", "nth"]).rename(
        columns={"sev": "at", "ev": "gone"})
    s = pd.DataFrame({"sid": sv["sid"].to_numpy(), "at": sv["ev"].to_numpy(dtype=np.int64),
                      "i": np.arange(len(sv))})
    s["k"] = s.groupby(["sid", "at"]).cumcount()
    # `nth`: which of the event's saves of the storage died (a ReLU's own save and a dead
    # `abs` of its output share an event); ledgers without it pair in order
    u["k"] = u["nth"].fillna(u.groupby(["sid", "at"]).cumcount()).astype(np.int64)
    m = s.merge(u, on=["sid", "at", "k"])
    out = np.full(len(sv), -1, dtype=np.int64)
    out[m["i"].to_numpy(dtype=np.int64)] = m["gone"].to_numpy(dtype=np.int64)
    return out


def _fsdp_gather(st: pd.DataFrame) -> np.ndarray | None:
    """FSDP2's own gathers: in a ledger with unsharded parameters (Note [Sharded storages]),
    every `communication` and `parameter` storage; None in any other ledger."""
    if "shard" not in st or not (st["shard"] == "unsharded").any():
        return None
    return st["category"].isin(["communication", "parameter"]).to_numpy()
