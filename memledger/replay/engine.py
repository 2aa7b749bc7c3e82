"""Replay: rewrite the storages' lifetimes as a policy would, then recompute the live curve.

No torch here, and no Python loop over events or storages: each policy costs a handful of
numpy passes over the storage arrays (searchsorted, boolean masks, bincount, cumsum). The
only Python loops run over policy parts.

# Note [Replay of a checkpointed region]
Non-reentrant `torch.utils.checkpoint` (use_reentrant=False, early stop on) on a region R
whose forward call spans events [ev0, ev1):

1. A storage made inside R and saved for backward only by ops inside R (first save >= ev0,
   last save < ev1 - 1; see Rule 5) is *dropped*: autograd holds a placeholder, so the
   storage is freed at its last forward use (`fwdlast` record + 1) instead of in backward.
   So is one saved by R and by later calls of the same policy part (a weight's bf16 cast
   under autocast, made by a block's first call and taken from autocast's cache by its
   second: every save of it is a placeholder).
2. R's inputs stay (checkpoint keeps them to re-run R) until R's backward is done, even
   those autograd saved nothing for (`args` records; see `_hold_call_args`); so does
   everything made outside R.
3. At the first unpack of any dropped storage (event U, in backward: a storage's first
   read in the last backward pass that reads it, or its last read where several calls
   saved it) the forward of R is re-run *before* event U: its events ev0 .. E-1 are inserted there, where E is one past
   the last dropped storage's save record (early stop: torch raises from its pack hook as
   the last saved tensor is packed again). Checkpoint holds every save of R, not only the
   dropped ones, so U is the first unpack of anything R saved (its own save's unpack:
   the `saved` and `unpack` records matched per storage, a parameter's per call) and E is
   one past R's last save of anything: peft DoRA on a Llama leaves `down_proj` frozen, its
   `mm` saves only the weight, and its backward unpacks that weight (starting the re-run)
   before making its (4, 32, 128) fp32 input gradient (65,536 B) and before the next node
   reads the dropped silu output; the re-run stops as that weight is packed again, after
   the `act * up` product was made. `selective` was predicted 8,640 B over measured before
   (tests/clients/test_real_clients.py). An op packs its *inputs* before it runs, so an
   input-saving last op is not re-run: on CPU `nn.Dropout` is `x * mask`, the multiply
   saves `mask` and the recompute stops before the multiply, so a block ending in dropout
   does not make its (4, 64, 1024) fp32 output (1,048,576 B) again while recomputing.
   An op packs its *outputs* after it ran (softmax, tanh): the record's event is that op.
   Dropped storages reappear at U + (created - ev0) and live until the backward node that
   unpacked them last returned (the unpack record's `end`; autograd held the original
   until it released the node, after summing a broadcast bias gradient: 256 B more on
   BERT's layers; Note [When an unpacked tensor goes] in trace/collector.py), or their
   original free if sooner or not recorded; the region's temporaries reappear and die as
   they did in forward (a dead branch, saved and never unpacked, too), and so does what
   it made that outlives it without being dropped (its output, saved by the next
   region), made again by the re-run and let go at the early stop; under selective,
   what is not in the save list (SAC's cache hands those outputs back instead: Rules 7
   and 8). A post-LN layer (DistilBERT, BERT) ends in a LayerNorm, which packs its
   mean and rstd after it ran, so the re-run makes the layer's output again: leaving it
   out put DistilBERT's peak, inside a recompute, 5,312 B short
   (tests/clients/test_real_clients.py), and under selective RoBERTa's and DeBERTa-v2's
   5,568 B short (2 layers, hidden 64, vocab 64).
4. preserve_rng_state keeps the CPU generator state (5056 bytes, `torch.get_rng_state()`)
   from ev0 until R's backward ends; recomputation forks it once more while it runs,
   even one that stops before its first op (Note [A re-run that stops before its first op]).
   A call whose backward comes after the traced steps (what it saved is never unpacked
   and still live at the end) keeps its frame, state and arguments to the end: a GAN
   calls its generator for the next iteration before the optimizer step that ends the
   window (tests/clients/train_gan.py: `checkpoint:*` on a 2-step ledger was predicted
   371,516 B against 419,452 B measured, no frame and no argument held).
5. Event numbers of saves: autograd saves an op's *inputs* before the op runs, so a save
   record's event is the op before the saving op; a save at ev1 - 1 is the next region's
   first op saving R's output, which R does not own. Unless R's own last op saved its own
   output (LayerNorm packs its mean and rstd after it ran: the record is at that op, by the
   module that made them) and the next region is a call of the same module, back to back
   (ALBERT's shared layer), where the saving module cannot tell the two calls apart:
   those saves are R's. Read as the next call's, ALBERT's (2, 32, 1) mean and rstd (256 B
   each) were kept through forward: `checkpoint` 512 B over measured (calls.py).
6. FSDP2 skips its pre- and post-forward hooks while backward runs (its pre-backward hook
   has already gathered the block), so a recompute makes no all-gather output and no
   unsharded parameter again: in a ledger with unsharded parameters, the region's
   `communication` and `parameter` storages are not re-made. Measured (examples/
   train_fsdp.py, 2 ranks, `checkpoint:blocks.*`, 1 step): rank 0 predicted 1,956,160 B
   before this rule, 1,748,096 B after; the allocator measured 1,748,104 B.

Worked example (tiny GPT, B=8, T=64, C=128, fp32; one block, forward events 247..310):
the block saves 14 storages of its own (ln outputs 262,144 B each = 8*64*128*4, the GELU
input and output 1,048,576 B each = 8*64*512*4, attention 524,288 B each = 8*4*64*64*4,
...), 6.3 MiB in all; with `checkpoint:blocks.0` they are freed during the block's forward,
the block input (262,144 B) stays, and before the block's backward starts the 6.3 MiB come
back as the block's forward is re-run.

Selective checkpointing keeps the outputs of its `save` op kinds (they are cached in
forward and handed back during recomputation): those storages keep their lifetime, and one
that was not saved by autograd is held until the recomputation that reuses it.
7. A cached output whose op comes after the early stop is never handed back: the cache
   keeps it until the call's frame goes, when the call's backward is done. A transformers
   LLaMA layer ends in `down_proj` (an `mm`) added to the residual; nothing packs after
   it, so the recompute stops before it and its cached (4, 32, 64) fp32 output (32,768 B)
   stays through the layer's backward: `selective:model.layers.*` on 3 layers was
   predicted 3,473,220 B against 3,571,524 B measured before this rule.
8. A cached output saved only by its own call (and unpacked) is handed back to the re-run,
   which packs it again for the node that unpacks it: SAC's cache lets go of it there
   (`_CONSUMED`), the checkpoint frame's `recomputed` once that node unpacked it, and the
   node when it returns. So it goes at the unpack record's `end`, as a dropped storage
   does, not when autograd releases the node (the baseline's free, after the engine sums a
   broadcast gradient). The re-run packs every save of the call again, so this holds
   whether or not the call drops anything: `h = fc(x)` saved only by a broadcasting
   `h[..., None] * A` (tests/clients/train_branches.py --block bcast-plain) drops nothing
   under the default save list, and was predicted 32,768 B (one h) over measured.
9. Under autocast, a parameter's low-precision cast is made once per autocast region:
   the first call of a module casts it, later calls of the same module (a shared layer:
   ALBERT, one block called for every layer, a model called twice) take it from
   autocast's cache and record no `_to_copy`. A re-run happens in backward, outside the
   forward's region (whose cache went at its exit, the `released` event), inside an
   autocast region of its own: each later call's re-run casts every such weight and bias
   again, where its own ops resume after the cast (its offsets are the first call's, less
   the cached casts before), and holds the copy until that region ends (its early stop)
   or, for a weight its ops saved, until the node that unpacked that call's save returns.
   One block called for 4 layers, the model called twice, batch 32, width 64
   (tests/clients/train_loops.py --loop twice --one-block --autocast): fc1's and fc2's
   bf16 weights are 32,768 B each; `checkpoint:blocks.0` was predicted 685,556 B against
   738,804 B measured before this rule, exact after. ALBERT, bf16, 2 micro-batches:
   13,712 B under before, and now the 560 B over that its fp32 run reads too.

10. A tensor a call keeps as a plain attribute of its module (`stash` records: pruning's
   `fc1.weight`, set by a forward pre-hook; Note [Tensors a call keeps on its module] in
   trace/collector.py) is made again by the call's re-run, which sets the attribute
   again: the forward's copy goes right after its op in the re-run, the re-made one stays
   until the forward's copy would have gone (the next forward). And a storage something
   else holds ends the call's frame (Rule 4) when the node that unpacked it returned, not
   at its own free. Two pruned blocks (tests/clients/train_mech.py --case prune):
   `checkpoint:blocks.*` was predicted 33,728 B over measured, both copies of each pruned
   (128, 32) fp32 weight live at once and both RNG states held to the end; exact after.
   The same for a storage the region made that the script holds into backward in a
   container of its own (`KEPT[name] = h`: the re-run runs that line again), whose re-made
   copy also keeps its re-run graph until the script lets go of it (`_kept_remakes`;
   tests/clients/train_mech.py --case kept: 474,772 B under measured before). Not one
   that a container the region made holds, gone by the region's return: Rule 3's (Note
   [Held by a container the region made]).
11. `measure` copies the running statistics of every training BatchNorm a re-run calls and
   lets go of the copy as the re-run ends (Note [BatchNorm under recompute] in
   measure/apply.py; `_running_stats_rows`, from the `stats` bytes on the BatchNorm's
   scope record). peft LoRA on residual conv blocks peaked inside such a re-run: 136 B
   (2 x 16 channels x 4 B + 8 B) under measured before.
12. A backward that builds a graph (`autograd.grad(..., create_graph=True)`: a gradient
   penalty) saves what it ran with: under a policy, the re-run's copy or the read-back,
   so such a save (`_saved_in_backward`) is no holder outside the region; and the first
   pass's re-run copies it saved, or never read, outlive that pass (`_first_pass_copies`;
   the segment serves the second pass). tests/clients/train_mech.py --case penalty:
   `checkpoint:blocks.*` 99,840 B under measured before; a TransformerEncoderLayer pair
   659,456 B.

A dropped or offloaded storage leaves at the event the script let go of it (`released`
records, Note [When a saved storage is released] in trace/collector.py: a local of the
caller's frame holds it past its last use); without the record, at its last forward use.
One the script holds into backward (a KV cache, a tensor it keeps) never leaves.

Offload: a storage saved only inside offloaded regions (and at least `min` bytes; an
activation, or the batch where the script let go of it) leaves the device at its last
forward use; at its unpack one copy comes back and lives until the node that unpacked it
last returns or its original free, whichever is first (see memledger/measure/offload.py:
one copy per storage, not per save), counted from the storage's first unpack in the step
(a ReLU output saved by the ReLU and by the next MaxPool is read back at the pool's
backward already).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from memledger.errors import NotPredicted, PolicyError
from memledger.ledger.schema import CATEGORIES
from memledger.replay.aten_names import refused_save_name
from memledger.replay.calls import output_saves, record_call, save_call, scopes_of, which_call
from memledger.replay.compiled import refuse_compiled_regions
from memledger.replay.emptied_cache import emptied_cache_calls, skipped_fills
from memledger.replay.first_call import first_call_setup_message, setup_calls
from memledger.replay.passes import OwnReads, one_phase_per_pass, own_reads
from memledger.replay.policies import (DEFAULT_SAVE_OPS, MODEL_FIRST, MODEL_MOVED, Policy,
                                       PolicyKind, no_model_message, resolve)
from memledger.replay.prepared import ACTIVATION, BUFFER, INPUT, MODEL_STATE, Prepared
from memledger.replay.script_checkpoint import (
    calls_running,
    refuse_around_function_checkpoints,
    refuse_around_script_checkpoints,
)
from memledger.replay.scripted import refuse_scripted_regions
from memledger.replay.stateful import (
    OWN_STATE,
    emptied_cache_message,
    graph_reads_message,
    mode_message,
    passes_read_message,
    read_in_call_message,
    refuse_recompute_of_stateful,
    rerun_per_pass_message,
    selective_mutated_message,
    selective_recast_message,
    selective_reused_message,
    selective_twice_message,
    state_rewritten_message,
)

WORKSPACE = CATEGORIES.index("workspace")
OTHER = CATEGORIES.index("other")
BUFFER = CATEGORIES.index("buffer")
CPU_RNG_STATE_BYTES = 5056  # torch.get_rng_state().nbytes: the mt19937 state of the CPU generator
_BIG = np.iinfo(np.int64).max


class Kind:
    """What a selected call does, as a number per call (numpy arrays hold these codes).
    Plain ints, not an IntEnum: numpy compares an array with an enum member through its
    dunder lookups, 5 us against 1 us, and a replay makes thousands of such comparisons."""

    NONE = 0        #: not selected (or the baseline)
    CHECKPOINT = 1  #: drop what the call saves; re-run it in backward
    SELECTIVE = 2   #: like CHECKPOINT, but the save-list ops' outputs are kept
    OFFLOAD = 3     #: what the call saves leaves the device and comes back at unpack


_KIND_CODE = {PolicyKind.CHECKPOINT: Kind.CHECKPOINT, PolicyKind.SELECTIVE: Kind.SELECTIVE,
              PolicyKind.OFFLOAD: Kind.OFFLOAD}


def _is_recomputed(kind: np.ndarray) -> np.ndarray:
    return (kind == Kind.CHECKPOINT) | (kind == Kind.SELECTIVE)


@dataclass
class Replayed:
    """What one policy does to a ledger."""

    policy: Policy
    peak_bytes: int                     # predicted allocator peak (ledger curve + workspace)
    ledger_peak_bytes: int              # predicted peak of tracked storages alone
    peak_event: int                     # in the original numbering (a recompute: its trigger)
    in_recompute: str                   # module whose recomputation holds the peak, or ""
    at_peak: dict[str, int]             # bytes per category at the new peak
    recompute_events: int               # events re-run over the whole ledger
    offload_bytes: int                  # bytes written off the device over the whole ledger
    regions: list[str] = field(default_factory=list)
    events: int = 0                     # events of the rewritten stream
    at_probe: dict[str, int] = field(default_factory=dict)  # live per category at `probe`
    work: "Work | None" = None          # what the policy makes the machine do (costs.py)
    slots: np.ndarray | None = None     # live bytes per slot (see `slot_curve`), on request


@dataclass
class Work:
    """Per selected call and per offloaded storage: the facts the time model prices
    (memledger/replay/costs.py). Arrays are per selected call unless named otherwise."""

    scope_row: np.ndarray      # int64 index into Prepared.scope_* of each call
    kind: np.ndarray           # int64 Kind
    part: np.ndarray           # int64 index into policy.parts
    ev0: np.ndarray            # int64 first event of the call
    ev1: np.ndarray            # int64 one past its last event
    rerun_end: np.ndarray      # int64 one past the last re-run event (== ev0: nothing re-run)
    saves: np.ndarray          # int64 saves (packs) made by the call
    off_rows: np.ndarray       # int64 storages written to disk (indices into Prepared arrays)
    off_call: np.ndarray       # int64 the call that saved each of them
    off_bytes: np.ndarray      # int64 their sizes
    save_ops: list[tuple[str, ...]] = field(default_factory=list)  # per part: kept op kinds


# ---- stage 1: which calls the policy selects ----------------------------------------------
@dataclass
class _Calls:
    """The selected forward calls, sorted by first event (they never overlap)."""

    row: np.ndarray     # index into Prepared.scope_*
    mods: np.ndarray
    ev0: np.ndarray
    ev1: np.ndarray
    step: np.ndarray
    part: np.ndarray    # index into policy.parts
    kind: np.ndarray    # Kind
    min_b: np.ndarray   # offload min bytes
    by_path: dict
    # what depends on the selected calls alone, kept with the selection (`_pack_call`,
    # `_owners` per Prepared): Note [Selections kept per prepared ledger]
    shared: dict = field(default_factory=dict, repr=False)

    @property
    def pack_call(self) -> np.ndarray | None:
        return self.shared.get("pack_call")

    def __len__(self) -> int:
        return len(self.ev0)

    def at(self, values: np.ndarray, k: np.ndarray, default: int = 0) -> np.ndarray:
        """values[k] where k >= 0, else `default` (k: a call index per storage, -1: none)."""
        if not len(values):
            return np.full(len(k), default, dtype=np.int64)
        return np.where(k >= 0, values[np.maximum(k, 0)], default)


def _select_calls(prep: Prepared, policy: Policy) -> _Calls:
    # Which calls a policy's selectors take depends on the selectors alone: plan replays
    # each block under four or five kinds (Note [Selections kept per prepared ledger])
    key = tuple(p.selector for p in policy.parts)
    memo = prep.__dict__.setdefault("_selections", {})
    hit = memo.get(key)
    if hit is None:
        regions = _resolved(prep, policy)
        paths = {r.path: i for r in regions for i, p in enumerate(policy.parts)
                 if p is r.part}
        hit = memo[key] = (paths, *_selected_rows(prep, paths), {})
    paths, row, part, shared = hit
    by_path = {path: policy.parts[i] for path, i in paths.items()}
    refuse_scripted_regions(policy.text(), [p for p, part_ in by_path.items() if part_.kind in (
        PolicyKind.CHECKPOINT, PolicyKind.SELECTIVE)], prep.module_table)
    refuse_compiled_regions(policy.text(), list(by_path), prep.compiled)
    part_kind = np.array([_KIND_CODE[p.kind] for p in policy.parts] or [0], dtype=np.int64)
    part_min = np.array([p.min_bytes for p in policy.parts] or [0], dtype=np.int64)
    return _Calls(row=row, mods=prep.scope_mod[row], ev0=prep.scope_ev0[row],
                  ev1=prep.scope_ev1[row], step=prep.scope_step[row], part=part,
                  kind=part_kind[part] if len(part) else np.zeros(0, dtype=np.int64),
                  min_b=part_min[part] if len(part) else np.zeros(0, dtype=np.int64),
                  by_path=by_path, shared=shared)


# Note [Selections kept per prepared ledger]
# `plan` replays each block under every option (checkpoint, offload, three selective save
# lists): five policies with one selector. The regions a selector resolves to, the calls
# they make, and what depends on those calls alone (`_pack_call`, `_owners`) are the same
# for each, and took a third of a replay; they are kept on the Prepared (and the arrays
# never written after). The kinds, the refusals that read them, and everything after are
# per policy. A selective replay works on a copy of the Prepared with its folds undone
# (`_unfolded_under_selective`), which keeps its own.
def _resolved(prep: Prepared, policy: Policy) -> list:
    # a ledger knows the modules its traced forward called (a container whose children
    # are called directly, as checkpoint_sequential calls them, never ran)
    if not policy.parts:
        return []
    if prep.no_model is not None:   # Note [No model in the steps taken] (policies.py)
        raise PolicyError(no_model_message(prep.no_model, prep.steps_traced))
    other = ", ".join(prep.other_roots)
    after = (f" (policies act on the model, "
             f"{MODEL_MOVED if prep.model_moved else MODEL_FIRST}; not on {other})") \
        if other else ""
    return resolve(policy, prep.module_table, "the modules the traced forward called are",
                   after, others=prep.other_roots, uncalled=prep.param_modules,
                   idle=prep.idle_modules, classes=prep.classes,
                   containers=prep.containers, moved=prep.model_moved,
                   own_call=prep.own_call, was=prep.model_was, aliases=prep.aliases,
                   methods=dict(prep.methods), made=prep.made_in_forward)


def _selected_rows(prep: Prepared, paths: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(scope rows of the selected calls in event order, the policy part of each)."""
    wanted = np.flatnonzero(np.isin(prep.mod_names, list(paths)))
    row = np.flatnonzero(np.isin(prep.scope_code, wanted) & prep.scope_model)
    if prep.scope_grad is not None:   # a call without gradients (an evaluation) runs plainly
        row = row[prep.scope_grad[row]]
    row = row[np.argsort(prep.scope_ev0[row], kind="stable")]
    code_part = np.full(len(prep.mod_names), -1, dtype=np.int64)
    for c in wanted:
        code_part[c] = paths[prep.mod_names[c]]
    return row, code_part[prep.scope_code[row]]


def _pack_call(prep: Prepared, calls: _Calls) -> np.ndarray:
    """The selected call that made each `saved` record (-1: none), Rule 5's boundaries;
    computed once per replay (the segments, the frames, offload's copies and the time
    model all read it)."""
    if calls.pack_call is None:
        calls.shared["pack_call"] = _records_by_call(prep, calls.by_path, calls.mods,
                                                     calls.ev0, calls.ev1)
    return calls.pack_call


def _records_by_call(prep: Prepared, by_path: dict, mods: np.ndarray, ev0: np.ndarray,
                     ev1: np.ndarray) -> np.ndarray:
    return record_call(prep.pack_ev, prep.pack_mod_code, prep.pack_mod_names, by_path, mods,
                       ev0, ev1, output_saves(prep, prep.pack_ev, prep.pack_row,
                                              prep.pack_mod_code, prep.pack_mod_names),
                       scopes_of(prep))


def packs_of(prep: Prepared, paths: list[str]) -> np.ndarray:
    """Per `saved` record (Prepared.pack_*), whether a forward call of one of the modules
    `paths` made it, as a replay selecting those modules reads it (`_pack_call`, Rule 5):
    `plan` ranks its candidate blocks by this (Note [A block's saves, by its calls],
    replay/plan.py). All False for a ledger without save records."""
    if prep.pack_ev is None or not len(prep.pack_ev):
        return np.zeros(0, dtype=bool)
    row, _ = _selected_rows(prep, dict.fromkeys(paths, 0))
    return _records_by_call(prep, dict.fromkeys(paths), prep.scope_mod[row],
                            prep.scope_ev0[row], prep.scope_ev1[row]) >= 0


def _unfolded_under_selective(prep: Prepared, calls: _Calls) -> Prepared:
    """`prep` with the folds inside selective calls undone: selective checkpoint runs its
    region's forward (and re-run) under a dispatch mode of its own, where torch adds a
    Linear's bias out of place, as the traced run did (Note [A Linear's bias, added in place
    but for the mode], trace/collector.py): there the input lives through the op. A random
    model's attention after a transpose (tests/clients/train_random.py), `selective`:
    the (1024, 96) `mm` output, cached for backward, went at the re-run's bias add, 202,988
    B under measured."""
    if prep.folded_in is None or not prep.folded_in.any() or not len(calls) or \
            not (calls.kind == Kind.SELECTIVE).any():
        return prep
    r = np.flatnonzero(prep.folded_in)
    k = which_call(calls.ev0, calls.ev1, prep.freed[r], prep.n_events)
    r = r[(k >= 0) & (calls.kind[np.maximum(k, 0)] == Kind.SELECTIVE)]
    if not len(r):
        return prep
    freed = prep.freed.copy()
    freed[r] += 1
    return dataclasses.replace(prep, freed=freed)


# ---- stage 2: which call made, first saved and last saved each storage ---------------------
@dataclass
class _Owners:
    made: np.ndarray         # call that created the storage (-1: none)
    first_save: np.ndarray   # call of its first save (Rule 5)
    last_save: np.ndarray    # call of its last save
    fwd_end: np.ndarray      # one past its last forward use (an argument: until return)


def _owners(prep: Prepared, calls: _Calls) -> _Owners:
    """Per storage: the calls that made and saved it (kept with the selection, per
    Prepared: Note [Selections kept per prepared ledger])."""
    got = calls.shared.get("owners")
    if got is not None and got[0]() is prep:
        return got[1]
    own = _owners_of(prep, calls)
    if got is None:
        calls.shared["owners"] = (weakref.ref(prep), own)
    return own


def _owners_of(prep: Prepared, calls: _Calls) -> _Owners:
    n, cr = prep.n_events, prep.created
    k_s = save_call(prep, calls.by_path, calls.mods, calls.ev0, calls.ev1)
    saved_last = _saved_last_in_forward(prep)
    k_l = np.where(saved_last == prep.saved_first, k_s,
                   which_call(calls.ev0 - 1, calls.ev1 - 1, saved_last, n))
    if prep.pack_ev is not None and len(prep.pack_ev) and len(calls):
        # Two saves at one event by two calls: a block ending in ReLU (which saves its
        # output after it ran) followed by a block starting with a conv (which saves that
        # output, its input, before it ran; Rule 5 puts both records at the ReLU). The
        # storage's first and last save events are equal, yet two calls saved it; read
        # as one call's, checkpoint or offload of the first block alone dropped it while
        # the next block's conv node held it (channels_last CNN, `checkpoint:blocks.0`
        # 103,296 B under measured, tests/clients/train_mech.py). So a save by any other
        # call (per save record) is the storage's "last" save; one outside every selected
        # call wins, as nothing the policy does can let go of it.
        kp = _pack_call(prep, calls)
        r = prep.pack_row
        other = (kp != k_s[r]) & ~_saved_in_backward(prep)
        if other.any():
            ro, eo, ko = r[other], prep.pack_ev[other], kp[other]
            o = np.lexsort((eo, ko >= 0, ro))   # per storage: outside calls first, then by
            ro, ko = ro[o], ko[o]                # event; the first of each storage wins
            first = np.r_[True, ro[1:] != ro[:-1]]
            k_l = k_l.copy()
            k_l[ro[first]] = ko[first]
    k_s, k_l = _without_unread_saves(prep, calls, k_s, k_l)
    fwd_end = np.where(prep.fwd_last >= 0, prep.fwd_last + 1, prep.saved_last + 2)
    fwd_end = np.maximum(fwd_end, prep.arg_end)
    if prep.released is not None:   # measured: when the script let go of it
        fwd_end = np.where(prep.released >= 0, prep.released, fwd_end)
    fwd_end = np.clip(fwd_end, cr + 1, prep.freed)
    return _Owners(made=which_call(calls.ev0, calls.ev1, cr, n), first_save=k_s,
                   last_save=k_l, fwd_end=fwd_end)


def _without_unread_saves(prep: Prepared, calls: _Calls, k_s: np.ndarray,
                          k_l: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The calls of each storage's first and last save, leaving out the saves autograd let
    go of unread in forward (Note [A save autograd let go of unread], trace/collector.py):
    no policy acts on a save that holds nothing into backward. A block whose `h.sin()`,
    dropped, saved its own output first was read as that output's first saver, so
    `checkpoint` of the block dropped it and the next block's backward, reading it, started
    the block's re-run early, with the next block's frame still held (5,056 B over,
    tests/clients/train_random.py)."""
    gone = prep.pack_gone
    if gone is None or not (gone >= 0).any() or not len(calls):
        return k_s, k_l
    r = prep.pack_row
    live = gone < 0
    bw = _saved_in_backward(prep)
    if len(bw):
        live &= ~bw
    rows = np.zeros(len(prep.created), dtype=bool)
    rows[r[~live & (gone >= 0)]] = True
    kp = _pack_call(prep, calls)
    lr, le, lk = r[live], prep.pack_ev[live], kp[live]
    o = np.lexsort((le, lr))
    lr, lk = lr[o], lk[o]
    first = np.flatnonzero(np.r_[True, lr[1:] != lr[:-1]]) if len(lr) else lr
    last = np.r_[first[1:] - 1, len(lr) - 1] if len(lr) else lr
    k_first = np.full(len(prep.created), -1, dtype=np.int64)
    k_last = np.full(len(prep.created), -1, dtype=np.int64)
    k_first[lr[first]] = lk[first]
    k_last[lr[last]] = lk[last]
    # a live save outside every selected call holds the storage whatever the policy does
    # (as `_owners` reads another call's save): it is the last one
    outside = np.zeros(len(prep.created), dtype=bool)
    outside[lr[lk < 0]] = True
    k_last = np.where(outside, -1, k_last)
    # a storage with no live save keeps its reading: what holds it is not autograd, and a
    # selective region's cache still takes a save-list output that only dead saves read
    # (lucidrains' VectorQuantize, a `cat` saved on a branch no loss reaches: 29,240 B over
    # when read as nobody's)
    has_live = np.zeros(len(prep.created), dtype=bool)
    has_live[lr] = True
    rows &= has_live
    return np.where(rows, k_first, k_s), np.where(rows, k_last, k_l)


def _saved_in_backward(prep: Prepared) -> np.ndarray:
    """Per save record: made after its storage was first unpacked, by a graph that a
    backward builds (`create_graph=True`: a gradient penalty). Under a policy that node
    saves whatever the backward ran with, the re-run's copy, not the forward's storage: it
    does not keep the original from being dropped, and the copy it holds lives until it is
    unpacked (Rule 3's unpack end). WGAN-GP style penalty over checkpointed blocks
    (`autograd.grad(loss, w, create_graph=True)`, then backward): read as a holder outside
    the blocks, each block's tanh output was kept and let go early, 131,072 B a block
    under measured."""
    cached = prep.__dict__.get("_saved_in_backward")   # asked several times per replay
    if cached is not None:
        return cached
    if prep.pack_ev is None or not len(prep.pack_ev):
        return np.zeros(0, dtype=bool)
    first = prep.unpack_first[prep.pack_row]
    # Rule 5: a save is recorded at the event before its op, and the node that runs the
    # op unpacked first (LayerNorm's backward saving the mean and rstd it just unpacked)
    op_ev = prep.pack_ev + 1
    after_read = (first >= 0) & (op_ev >= first)
    if prep.phase_bw_start is not None:
        # in a backward phase: the next micro-batch's forward saves a weight's autocast
        # cast that the previous backward read (ALBERT, accumulation), which is no such save
        # (a ledger cut off before its first backward has none)
        i = np.searchsorted(prep.phase_bw_start, op_ev, side="right") - 1
        end = prep.phase_bw_end[np.maximum(i, 0)] if len(prep.phase_bw_end) else op_ev
        after_read &= (i >= 0) & (op_ev < end)
    prep.__dict__["_saved_in_backward"] = after_read
    return after_read


def _saved_last_in_forward(prep: Prepared) -> np.ndarray:
    """`saved_last` without the saves a backward made (`_saved_in_backward`)."""
    bw = _saved_in_backward(prep)
    if not bw.any():
        return prep.saved_last
    last = prep.__dict__.get("_saved_last_in_forward")   # owners and segments both ask
    if last is None:
        last = prep.saved_first.copy()
        np.maximum.at(last, prep.pack_row[~bw], prep.pack_ev[~bw])
        prep.__dict__["_saved_last_in_forward"] = last
    return last


# Note [A later call's save of a cached cast ends no re-run]
# A re-run stops as the last of its call's saves is packed again (Rule 3). Under autocast a
# block called twice in one region (the model run on a batch and on its permutation) takes
# its weights' casts from autocast's cache in the second call, and saves them there: the
# storage the first call made had its last forward save in the second call, so the first
# call's stop was put past its end, and its re-run ran to the end of the call, through the
# last Linear whose kernel the real re-run never calls (it stops at that Linear's pack,
# before the kernel): the kernel's scratch (20,480 B of a bf16 `to_out`) was counted in the
# re-run. isab-pytorch, `--bf16 --perm 1 --blocks 1`, `checkpoint:blocks.*`: 409,064 B
# predicted against 395,240 measured. Where the ledger has its save records, a storage's
# stop is its last save by the call that made it; a later call's save is that call's.
def _saved_last_by_maker(prep: Prepared, calls: _Calls, own: _Owners) -> np.ndarray:
    """`_saved_last_in_forward`, counting only the saves the storage's own call made."""
    last = _saved_last_in_forward(prep)
    if prep.pack_ev is None or not len(prep.pack_ev) or not len(calls):
        return last
    rows = prep.pack_row
    kp = _pack_call(prep, calls)
    later = (kp >= 0) & (own.made[rows] >= 0) & (kp != own.made[rows])
    if not later.any():
        return last
    redo = np.zeros(len(last), dtype=bool)
    redo[rows[later]] = True          # only the storages a later call saved are recounted
    ok = ~_saved_in_backward(prep) & ~later & redo[rows]
    mine = np.where(redo, -1, last)
    np.maximum.at(mine, rows[ok], prep.pack_ev[ok])
    return mine


# ---- stage 3: what checkpoint drops and what selective keeps (Rule 1) ----------------------
def _save_codes(prep: Prepared, part) -> np.ndarray:
    """The ledger's op codes that a selective part keeps (its save list)."""
    return np.flatnonzero(np.isin(prep.op_names, list(part.save_ops())))


def _checkpoint_drops(prep: Prepared, calls: _Calls, own: _Owners,
                      policy: Policy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dropped, kept_cache, handed_back, in_save_list) per storage."""
    made_kind = calls.at(calls.kind, own.made)
    recomputed = _is_recomputed(made_kind)
    in_save_list = np.zeros(len(prep.created), dtype=bool)
    made_part = calls.at(calls.part, own.made, default=-1)
    for i, p in enumerate(policy.parts):
        if p.kind is PolicyKind.SELECTIVE and len(calls):
            mine = (made_kind == Kind.SELECTIVE) & (made_part == i)
            in_save_list |= mine & np.isin(prep.op_code, _save_codes(prep, p))
    # saved only inside re-run calls (one, or several: a weight's autocast cast, made by a
    # block's first call and taken from autocast's cache by its second)
    last_kind = calls.at(calls.kind, own.last_save)
    one_call = (own.first_save >= 0) & ((own.first_save == own.last_save) | (
        _is_recomputed(last_kind) & (calls.at(calls.part, own.last_save, default=-1) ==
                                     made_part)))
    is_act = prep.cat == ACTIVATION
    dropped = is_act & recomputed & one_call & (own.first_save == own.made) & ~in_save_list
    # SAC's cache holds a save-list output from forward to the re-run; that outlives the
    # original when only a later call saved it (a post-LN block's output, saved by the
    # next block or the head, freed after that one's backward, before this re-run), or
    # when it is saved but never unpacked (DoRA's weight-norm branch, used detached: its
    # `lora_A` output, saved by `lora_B`, whose node dies with the forward)
    kept_cache = recomputed & in_save_list & (
        ~is_act | (own.first_save != own.made) | (prep.unpack < 0))
    # a save-list output only its own call saved, and unpacked: SAC's cache hands it to the
    # re-run, which packs it again for the node that unpacks it; from then on that node
    # alone holds it (Rule 8)
    handed_back = recomputed & in_save_list & is_act & (own.first_save == own.made) & (
        own.last_save == own.made) & (prep.unpack >= 0)
    return dropped, kept_cache, handed_back, in_save_list


def _refuse_selective_backward_twice(prep: Prepared, calls: _Calls, own: _Owners,
                                     policy: Policy) -> None:
    """torch's selective checkpoint re-runs a region for one backward pass only ("Trying to
    backward an extra time"): refuse it where a step's second backward pass reads what the
    region saved (`retain_graph=True`, a gradient penalty): more unpacks than saves."""
    if prep.unpacks is None or not (calls.kind == Kind.SELECTIVE).any():
        return
    first = calls.at(calls.kind, own.first_save) == Kind.SELECTIVE
    last = calls.at(calls.kind, own.last_save) == Kind.SELECTIVE
    twice = (first | last) & (prep.unpacks > prep.saves)
    found: list[tuple[int, int]] = []   # (when the pass that reads it again meets it, call)
    if prep.pack_reread is not None:   # Note [Read again: by the save, not the storage]
        twice &= prep.unpack_unnamed
        kp = _pack_call(prep, calls)
        hit = prep.pack_reread & (calls.at(calls.kind, kp) == Kind.SELECTIVE)
        found = list(zip(prep.pack_reread_ev[hit].tolist(), kp[hit].tolist()))
    if twice.any():
        i = np.flatnonzero(twice)
        found += zip(prep.pass2[i].tolist(),
                     np.where(first[i], own.first_save[i], own.last_save[i]).tolist())
    if found:   # Note [The region a second pass meets first]
        _, k = min(found, key=lambda f: (f[0] if f[0] >= 0 else math.inf, -f[1]))
        raise PolicyError(selective_twice_message(policy.text(), str(calls.mods[k])))


# Note [A state write before the second pass]
# A selective region read by a second backward pass is refused as that pass re-enters it;
# a region whose forward wrote state the re-run reads (Note [State a re-run writes again],
# replay/stateful.py) is refused in the first pass's re-run, which comes before. Under
# performer-pytorch's `PerformerEncDec` with reversible layers, each decoder layer's
# reversible backward goes through the encoder's graph again (`retain_graph=True`), and
# the encoder's `Performer.forward` bumps its redraw counter: `selective:enc` read "a
# second backward pass through it" in predict, while measure's first re-run of `enc`
# found the counter moved and redrew (tests/clients/train_performer.py --mode encdec
# --reversible). Where both hold, predict now says the state's line, as measure does.
# Note [The region a second pass meets first]
# measure refuses a selective region as the second backward pass re-enters it, so it names
# the region whose save that pass unpacks first. A plain second backward (`retain_graph=True`
# then the loss's) runs the graph last-made first and meets the last call first, which is
# what predict named (the largest call). Where the later pass comes through graphs that
# earlier graph-building passes made, it does not: a physics-informed network's u_xx
# (DeepXDE's `dde.grad.hessian`: `autograd.grad(create_graph=True)` twice, then the
# residual's backward) reads linears.1's saved input again before linears.2's, and
# `selective:linears.*` was refused by predict as "would re-run linears.2" and by measure as
# "would re-run linears.1" (tests/clients/train_deepxde.py). The region is now the one with
# the earliest read beyond the saves (its save's, else its storage's second pass's first
# unpack); the largest call where the ledger has neither.


# Note [Read again: by the save, not the storage]
# torch's selective checkpoint re-runs a region once per backward pass that unpacks one of
# the region's own saves. A storage the region saves may be saved outside it too, and
# read twice there: reformer-pytorch's encoder-decoder hands the encoder's output to each
# decoder layer as keys, and the decoder's reversible backward runs a backward through
# each layer's attention with `retain_graph=True`, so the encoder's graph is read once per
# decoder layer. The token batch is saved by the encoder's embedding (read twice) and by
# the decoder's (once): per storage, 3 unpacks against 2 saves, and predict refused
# `selective:dec.net.net` ("would re-run dec.net.net for a second backward pass"), which
# measure ran (2,791,432 B, tests/clients/train_reformer.py --mode encdec). The unpacks
# name their save (its event, Note [Which save an unpack reads] in replay/prepared.py):
# a save is read again when more unpacks name its storage and event than saves were made
# there. A storage some unpack of which names no save (a tensor the script's own
# checkpoint made again) is judged by its counts, as before. The same count misjudged
# zuko's continuous flow (found apart, the same fix): its ODE network's last weight, saved
# by every call (212 saves), was read 296 times, by each call's `autograd.grad(create_graph=
# True)` and the adjoint's backward, though no save made inside a forward call is read
# twice; predict refused `selective:transform.ode`, which measure ran (324,484 B).


def _refuse_graph_reads(prep: Prepared, calls: _Calls, own: _Owners, policy: Policy) -> None:
    """Refuse a policy on a call whose saves (model state aside: every call saves it) two
    backward passes that build graphs read (Note [Read by a backward that builds a graph] in
    trace/collector.py): each pass makes its own re-run or read-back, which the graph it
    builds holds, and the replay prices one."""
    if prep.graph_reads is None:
        return
    unpriced = (prep.graph_reads >= 2) | (prep.graph_reads < 0)
    # Note [Read by three backward passes or more]
    many = prep.passes_read >= 3 if prep.passes_read is not None else \
        np.zeros(len(unpriced), dtype=bool)
    if many.any():   # Note [Read many times through another call's save]
        many &= _read_many_through_a_policy_call(prep, calls)
    if not (unpriced | many).any():
        return
    # ... but N passes, a backward phase each, are priced: a checkpoint's re-run in each,
    # an offload's read-back in each (Note [A re-run in each of N backward passes])
    priced = many & ~unpriced & one_phase_per_pass(prep) if many.any() else many
    read = (unpriced | many) & ~np.isin(prep.cat, MODEL_STATE)
    for owner in (own.first_save, own.last_save):
        kind = calls.at(calls.kind, owner)
        hit = read & (kind != Kind.NONE) & ~(priced & (kind != Kind.SELECTIVE))
        if hit.any():
            i = int(np.flatnonzero(hit)[0])
            k = int(owner[i])
            offload = calls.kind[k] == Kind.OFFLOAD
            if not unpriced[i]:
                raise NotPredicted(passes_read_message(policy.text(), str(calls.mods[k]),
                                                       offload, int(prep.passes_read[i])))
            raise NotPredicted(graph_reads_message(policy.text(), str(calls.mods[k]),
                                                   offload, bool(prep.graph_reads[i] < 0)))


# Note [Read many times through another call's save]
# `passes_read` is per storage: the most passes that read one save of it. A storage every
# call saves (a weight a re-parametrisation computes once per forward, torchdeq's
# `reset_norm`: `weight_v * g / |weight_v|`, an activation of the script's forward) is
# saved by the policy's call and by calls no policy acts on, and its count came from the
# latter: torchdeq's implicit differentiation runs f again inside its autograd Function's
# backward (a call made in backward, which no policy wraps: Note [A region called inside
# backward], measure/apply.py) and takes `autograd.grad` through that call once per
# iteration of its backward solver, so that call's save of the weight was read by 8
# passes, while the forward's f call, the one `checkpoint:f` re-runs, has its saves read
# by the loss's backward alone. predict refused `checkpoint:f`, `offload:f` and
# `selective:f` ("whose saves 8 backward passes read"), which measure ran (44,516,
# 38,948 and 46,052 B; tests/clients/train_torchdeq.py --grad ift). So the count is taken
# over the saves a call of the policy made: a storage is read by many passes through the
# policy's call where one of that call's saves of it is (reads of one save: one per pass,
# Note [Passes inside one backward phase]). Without the per-save reads (older ledgers), the
# storage's count stands. The graph-building reads (`graph_reads`) are counted as before.
def _read_many_through_a_policy_call(prep: Prepared, calls: _Calls) -> np.ndarray:
    """Per storage: whether a save of it that a call the policy acts on made is read by
    three backward passes or more; all True where the ledger's unpacks name no save."""
    n = len(prep.created)
    if prep.read_pack is None or not len(prep.read_pack) or prep.pack_ev is None:
        return np.ones(n, dtype=bool)
    kp = _pack_call(prep, calls)
    acted = (kp >= 0) & (calls.at(calls.kind, kp) != Kind.NONE)
    reads = np.bincount(prep.read_pack, minlength=len(kp))[:len(kp)]
    out = np.zeros(n, dtype=bool)
    out[prep.pack_row[acted & (reads >= 3)]] = True
    return out


# Note [A save read before its call returns]
# A call may take a gradient of its own work before it returns: torch-struct's
# `marginals` are `torch.autograd.grad(logZ, potentials, create_graph=True)`, taken in the
# forward of the module that builds the CRF, and the loss is read from them. That
# backward unpacks the call's saves while the call is still open: torch's checkpoint
# re-runs the region for it inside the region's own forward (a frame per graph task), and
# the loss's backward re-runs it again; offload reads the saves back inside the forward,
# and the graph that backward builds saves under the region's hooks too. The replay's
# frames and read-backs begin where a call ends. `checkpoint:crf` on
# tests/clients/train_struct.py --model chain --loss marginals --lengths was predicted
# 131,256 B against 113,972 B measured, `--model semi` 390,960 against 326,060 (the
# dependency parser's was refused already, as a re-run in each of two passes);
# `offload:marg` on tests/clients/train_grad_inside.py 71,264 against 67,108 (the chain's
# `offload:crf` 4 B over, the semi-Markov's exact: not by a rule the replay knows). Such a
# policy is NotPredicted, as a save three passes read is: `predict` refuses it in one
# line, `measure` runs it and `compare` measures and judges it. Model state aside (every
# call saves it); a selective region is refused before, as a second backward through it.
def _refuse_read_inside_its_call(prep: Prepared, calls: _Calls, policy: Policy) -> None:
    """Refuse a checkpoint or offload of a call one of whose saves a backward reads before
    the call returns (Note [A save read before its call returns])."""
    if prep.pack_ev is None or not len(prep.pack_ev) or not len(calls):
        return
    kp = _pack_call(prep, calls)
    first = prep.unpack_first[prep.pack_row]
    k = np.maximum(kp, 0)
    hit = (kp >= 0) & (first > prep.pack_ev) & (first < calls.ev1[k]) & \
        ~np.isin(prep.cat[prep.pack_row], MODEL_STATE)
    if hit.any():
        k = int(kp[np.flatnonzero(hit)[0]])
        raise NotPredicted(read_in_call_message(policy.text(), str(calls.mods[k]),
                                                calls.kind[k] == Kind.OFFLOAD))


# Note [Read by three backward passes or more]
# A save read by one backward pass, or by two (`retain_graph=True`, a gradient penalty's
# `autograd.grad` then the loss's backward, MAML's inner step), is priced: the replay holds
# a re-run's or read-back's copies from the first pass's read to the second's. A residual
# flow's log-det estimator (Chen et al.'s `MemoryEfficientLogDetEstimator`, as normflows'
# `Residual(reduce_memory=True)` runs it) takes a power series of vector-Jacobian products
# inside its forward: `autograd.grad(g, x, v, retain_graph=True)` once per term, one more
# with `create_graph=True`, a gradient of that, and the outer backward's
# `autograd.grad(g, ...)` again: each save of its network read by six or seven passes.
# torch's checkpoint re-runs the region once per pass (a frame per graph task), which the
# replay does not model: `checkpoint:flows.*.iresblock.nnet` was predicted 325,704 B
# against 292,984 B measured, `offload:` 315,520 against 244,460
# (tests/clients/train_normflows.py --mode residual --layers 2). So a policy on a call one
# of whose saves (model state aside) three passes or more read is NotPredicted: `predict`
# refuses it in one line, `measure` runs it and `compare` measures and judges it, as for a
# save two graph-building passes read. Not where each pass is a backward phase of its own
# and none builds a graph (truncated BPTT over three chunks or more): checkpoint and
# offload are priced there (Note [A re-run in each of N backward passes]).


def _refuse_selective_mutated(prep: Prepared, calls: _Calls, own: _Owners, policy: Policy,
                              in_save_list: np.ndarray,
                              packs: tuple[np.ndarray, np.ndarray]) -> None:
    """torch's selective checkpoint hands the re-run its cached save-list outputs and fails
    on one changed in place since (Note [Written in place in forward], trace/collector.py):
    refuse it, named as measure meets it, by the last such call (backward re-runs it first).
    Only an output the re-run reaches: one made after the call's last pack is past its
    early stop and never handed back (Rule 7). Llama 4's MoE adds the routed experts into
    its shared expert's `down_proj` output in place (`out.add_(...)`), the `mm` that ends
    the layer: predict refused `selective:model.layers.*`, which measure ran."""
    if prep.mutated is None or not prep.mutated.any():
        return
    bad = np.flatnonzero(in_save_list & prep.mutated)
    saves, stop = packs
    k = np.maximum(own.made[bad], 0)
    # and only in a call that saved something: one no backward goes through is never
    # re-run (peft LoRA on Parakeet: its frozen subsampling convolutions write their
    # activations in place, and predict refused what measure ran)
    bad = bad[(own.made[bad] >= 0) & (saves[k] > 0) & (prep.created[bad] < stop[k])]
    if len(bad):
        k = int(own.made[bad].max())
        # Note [The kept op a re-run finds changed]: the re-run meets the call's first one
        first = bad[own.made[bad] == k]
        first = first[np.argmin(prep.created[first])]
        raise PolicyError(selective_mutated_message(policy.text(), str(calls.mods[k]),
                                                    str(prep.op_names[prep.op_code[first]])))


def _met_order(calls: _Calls, k: int) -> tuple[int, int]:
    """When measure's backward re-runs the call `k`, as a sort key: the earlier step
    first, in a step the later call (Note [The re-run backward meets first])."""
    return int(calls.step[k]), -int(k)


def _refuse_other_mode(prep: Prepared, calls: _Calls, policy: Policy) -> None:
    """Note [A re-run in another mode] (trace/modes.py): a re-run call made before a
    backward pass that found a module of its region in another mode than its forward had,
    where a module of the region may read a flag (Note [Which modules read a training
    flag], trace/mode_readers.py; an older ledger's record lists none: every module
    counts). Named as measure meets it: the first such pass, its latest call; in the
    region, the first module by path whose mode moved."""
    if not prep.modes or not len(calls):
        return
    rerun = _is_recomputed(calls.kind)
    hits = []
    for ev, began, moved, reads in prep.modes:
        for k in np.flatnonzero(rerun & (calls.ev0 > began) & (calls.ev0 < ev)).tolist():
            r = str(calls.mods[k])
            inside = [(m, was) for m, was in moved if _in_region(m, r)]
            if inside and (reads is None or any(_in_region(m, r) for m in reads)):
                hits.append(((ev, -k), r, min(inside)))
    if hits:
        _, region, (module, was) = min(hits)
        raise PolicyError(mode_message(policy.text(), region, module, was))


def _in_region(path: str, region: str) -> bool:
    return not region or path == region or path.startswith(region + ".")


def _met_first(calls: _Calls, ks) -> int:
    """The call of `ks` whose re-run backward meets first."""
    return min((int(k) for k in ks), key=lambda k: _met_order(calls, k))


def _refuse_rewritten_state(prep: Prepared, calls: _Calls, stop: np.ndarray,
                            read: np.ndarray, policy: Policy) -> tuple[int, str] | None:
    """Note [State a re-run writes again] (replay/stateful.py): a re-run call (`read`: a
    backward unpacked one of its saves, Note [A call no backward reads is never re-run])
    whose forward wrote a buffer in place before its last pack (`stop`: torch's early stop
    ends the re-run there), having read one it wrote before that write, or writing one
    later steps write again (Note [A state the region reads before it writes],
    trace/collector.py); a training BatchNorm's writes are not among `state_writes`.
    Refused by the last such call, as backward re-runs it first (measure meets it as that
    re-run starts), naming the first such buffer by name (Note [The state named first, by
    name], replay/stateful.py): (that call, the one line), or None
    (Note [The re-run backward meets first])."""
    if not prep.state_writes or not len(calls) or not _is_recomputed(calls.kind).any():
        return None
    ev = np.array([w[0] for w in prep.state_writes], dtype=np.int64)
    made = np.array([w[2] for w in prep.state_writes], dtype=np.int64)
    k = which_call(calls.ev0, calls.ev1, ev, prep.n_events)
    kk = np.maximum(k, 0)
    bad = np.flatnonzero((k >= 0) & _is_recomputed(calls.kind[kk]) & read[kk] & (ev < stop[kk])
                         & (made < calls.ev0[kk]))   # a tensor the region made is its own
    # Note [A state the region reads before it writes] (trace/collector.py): a call is
    # refused where it read one of those states before writing it, or its fill is made
    # again in later steps (so its re-run makes it again); a cache filled once is not
    rd = np.array([w[4] for w in prep.state_writes], dtype=np.int64)
    again = np.array([w[5] for w in prep.state_writes], dtype=bool)
    stale = bad[(rd[bad] >= calls.ev0[kk[bad]]) | again[bad]]
    bad = bad[np.isin(k[bad], k[stale])]
    if len(bad):
        last = _met_first(calls, k[bad])
        # Note [The state named first, by name] (replay/stateful.py)
        i = min(bad[k[bad] == last].tolist(), key=lambda j: prep.state_writes[j][1])
        return last, state_rewritten_message(policy.text(), str(calls.mods[last]),
                                             prep.state_writes[i][1],
                                             replaced=prep.state_writes[i][3])
    return None


def _refuse_first_call_setup(prep: Prepared, calls: _Calls,
                             packs: tuple[np.ndarray, np.ndarray], read: np.ndarray,
                             policy: Policy) -> tuple[int, str] | None:
    """Note [A set-up on the first call] (replay/first_call.py): (the call backward re-runs
    first of those that set a parameter up in place, the one line naming the first such
    parameter of it by name), or None."""
    if not prep.param_writes or not len(calls):
        return None
    ev = np.array([w[0] for w in prep.param_writes], dtype=np.int64)
    bad = setup_calls(ev, calls.mods, calls.ev0, calls.ev1,
                      _is_recomputed(calls.kind) & read, packs[0], packs[1], prep.n_events)
    if not bad:
        return None
    k = _met_first(calls, [c for c, _ in bad])
    name = min(prep.param_writes[j][1] for c, j in bad if c == k)
    return k, first_call_setup_message(policy.text(), str(calls.mods[k]), name)


# Note [A call no backward reads is never re-run]
# torch's checkpoint re-runs a region when backward unpacks one of its saves, not when the
# region saves: a call whose graph is dropped unread (a `sample()` under gradients before
# training, as normflows' notebooks run one to initialise ActNorm from data) is never
# re-run, whatever it did. ActNorm's first call is that sample and makes its buffer
# (`data_dep_init_done`); the training calls reuse it. predict refused `selective:flows.*`
# for that first call ("a cache filled on the first call") while measure ran it
# (tests/clients/train_normflows.py --mode reverse: 372,012 B). So a refusal that rests on
# a call's re-run asks whether a backward read one of the call's saves (its `saved`
# records' unpacks; older ledgers without them: its storages' first unpack, model state
# aside, as every call saves the weights it reads).
def _read_back(prep: Prepared, calls: _Calls, own: _Owners) -> np.ndarray:
    """Per selected call: True where a backward unpacked one of its saves (it is re-run)."""
    m = len(calls)
    read = np.zeros(m, dtype=bool)
    if not m:
        return read
    if prep.pack_ev is not None and len(prep.pack_ev) and prep.pack_unpack is not None:
        k = _pack_call(prep, calls)
        read[k[(k >= 0) & (prep.pack_unpack >= 0)]] = True
        return read
    act = (prep.unpack >= 0) & ~np.isin(prep.cat, MODEL_STATE)
    for owner in (own.first_save, own.last_save):
        read[owner[act & (owner >= 0)]] = True
    return read


def _refuse_selective_reused(prep: Prepared, calls: _Calls, read: np.ndarray,
                             policy: Policy) -> tuple[int, str] | None:
    """Note [A buffer a call makes and later calls reuse] (trace/collector.py): a selective
    call inside which a module made a buffer that its later calls reused (they made none,
    and ran ops of their own: ALiBi's slice of its cached bias) is re-run with the buffer
    there, on the reuse path, whose ops its forward did not run: torch's selective
    checkpoint raises on them, so refuse it, by the last such call (measure meets the
    latest first, in backward). And a module that makes its buffer anew on every call
    from the one before (I-BERT's activation ranges, `self.x_min = self.x_min * m + ...`,
    which starts from zeros on another path: `self.x_min + x_min`): its re-run reads the
    buffer its forward left, as its next call does, so where that next call ran other ops
    (`_ops_differ`) the re-run would too (`selective:ibert.encoder.layer.*` was predicted
    while measure met `aten.mul.Tensor` in step 1's re-run). Only a call whose saves a
    backward read is re-run (Note [A call no backward reads is never re-run]): peft's LoRA
    finds no `nn.Linear` in I-BERT's layers (they are `QuantLinear`s), so no backward goes
    through them, and predict refused what measure ran. Not a call handed that buffer's
    old value as an argument (`kept_handed`): its re-run reads the saved argument
    (snntorch's neurons under tutorial 5's loop, `self.lif2(cur2, mem2)`: the first time
    step's zeros(0) made the membrane anew on another path than the next, and
    `selective:lif2` was refused by predict, which measure ran: 493,932 B)."""
    if not (prep.kept or prep.stash_calls) or not (calls.kind == Kind.SELECTIVE).any():
        return None
    made = {}
    for mod, ev0 in prep.kept:
        made.setdefault(mod, set()).add(ev0)
    bad = _cached_attributes(prep, calls, read)
    order = np.argsort(prep.created, kind="stable")
    by_event = (order, prep.created[order])   # for `_ops_differ`
    for mod, firsts in made.items():
        later = (prep.scope_mod == mod) & (prep.scope_ev1 > prep.scope_ev0)
        starts, ends = prep.scope_ev0[later], prep.scope_ev1[later]
        reused = [int(e) for e in starts if int(e) not in firsts]
        for i, ev0 in enumerate(starts):
            if int(ev0) not in firsts:
                continue
            k = int(np.searchsorted(calls.ev0, ev0, side="right")) - 1
            if k < 0 or ev0 >= calls.ev1[k] or calls.kind[k] != Kind.SELECTIVE or \
                    not read[k]:   # Note [A call no backward reads is never re-run]
                continue
            if reused and ev0 < min(reused):   # the cache's first fill
                if (mod, int(ev0)) in prep.kept_flag and not _ops_differ(
                        prep, by_event, (ev0, ends[i]), _first_reuse(starts, ends, firsts),
                        _save_codes(prep, policy.parts[int(calls.part[k])])):
                    continue   # Note [A first fill behind a flag]
                # Note [A fill a selective re-run finds full] (replay/emptied_cache.py)
                bad.append((k, mod, False, False, prep.kept_fill.get((mod, int(ev0)), 0)))
            elif i + 1 < len(starts) and int(starts[i + 1]) in firsts and \
                    (mod, int(ev0)) not in prep.kept_handed and \
                    _ops_differ(prep, by_event, (ev0, ends[i]), (starts[i + 1], ends[i + 1])):
                bad.append((k, mod, True, False, 0))
    if bad:   # (that call, the one line): Note [The re-run backward meets first]
        k = _met_first(calls, [b[0] for b in bad])
        _, mod, remade, plain, fill = max(b for b in bad if b[0] == k)
        if fill:   # Note [A fill a selective re-run finds full]: measure's words too
            return k, emptied_cache_message(policy.text(), str(calls.mods[k]), mod, fill == 1)
        return k, selective_reused_message(policy.text(), str(calls.mods[k]), mod, remade,
                                           plain)
    return None


def _refuse_emptied_cache(prep: Prepared, calls: _Calls, read: np.ndarray,
                          policy: Policy) -> tuple[int, str] | None:
    """Note [A cache emptied before every call] (replay/emptied_cache.py): (the call
    backward re-runs first of those holding a fill its re-run would find full, the one
    line), or None."""
    if not prep.kept_fill or not _is_recomputed(calls.kind).any():
        return None
    carried = frozenset() if prep.stateful_mod is None else frozenset(
        (m, int(e)) for m, e, o in zip(prep.stateful_mod.tolist(), prep.stateful_ev0.tolist(),
                                       prep.stateful_obj.tolist()) if o == OWN_STATE)
    bad = emptied_cache_calls(prep.kept_fill, prep.kept, prep.scope_mod, prep.scope_ev0,
                              prep.scope_ev1, calls.ev0, calls.ev1,
                              calls.kind == Kind.CHECKPOINT, calls.kind == Kind.SELECTIVE,
                              read, carried)   # Note [A state filled on the first call]
    if not bad:
        return None
    k = _met_first(calls, [b[0] for b in bad])
    _, mod, plain = max(b for b in bad if b[0] == k)
    return k, emptied_cache_message(policy.text(), str(calls.mods[k]), mod, plain)


# Note [A cache kept as a plain attribute]
# Note [A buffer a call makes and later calls reuse] (trace/collector.py) for a cache a
# module keeps as a plain attribute, not a registered buffer: CoCa's
# `ParallelTransformerBlock` sets `self.mask` (its causal mask, `ones(n, n).triu(1)`) and
# `self.pos_emb` (its rotary table) on its first call and slices them in later calls. The
# re-run of that first call in backward finds them and slices (`aten.slice.Tensor`), an op
# the forward did not run, and torch's selective checkpoint raises: measure refused
# `selective:@ParallelTransformerBlock` while predict predicted it (623,462 B, 2 steps;
# tests/clients/train_cached_attr.py, 160,744 B). Such a call writes a `stash` record
# (Note [Tensors a call keeps on its module]); it is the cache's first fill where a later
# call of the same module kept nothing and read what it kept (a module that keeps a new
# tensor on every call, a pruned weight or its last attention map, fills no cache; a later
# eval call that reads none of it proves nothing). Refused by the same line, which names
# the attribute's module. A trace of one step has no later call to tell a cache from a
# tensor kept anew on every call: not refused there (as for buffers).
def _cached_attributes(prep: Prepared, calls: _Calls,
                       read: np.ndarray) -> list[tuple[int, str, bool, bool, int]]:
    """Note [A cache kept as a plain attribute]: (call, module, False, True, 0) per selective
    call that is re-run and holds the first fill of a module's plain-attribute cache."""
    bad = []
    keeps: dict[str, set[int]] = {}
    for mod, ev0, _ in prep.stash_calls:
        keeps.setdefault(mod, set()).add(ev0)
    for mod, ev0, last in prep.stash_calls:
        mine = (prep.scope_mod == mod) & (prep.scope_ev1 > prep.scope_ev0)
        later = [(int(a), int(b)) for a, b in zip(prep.scope_ev0[mine], prep.scope_ev1[mine])
                 if a > ev0 and int(a) not in keeps[mod]]
        if not any(a <= last < b for a, b in later):
            continue
        k = int(np.searchsorted(calls.ev0, ev0, side="right")) - 1
        if k >= 0 and ev0 < calls.ev1[k] and calls.kind[k] == Kind.SELECTIVE and read[k]:
            bad.append((k, mod, False, True, 0))
    return bad


def _ops_differ(prep: Prepared, by_event: tuple[np.ndarray, np.ndarray],
                one: tuple[int, int], other: tuple[int, int],
                only: np.ndarray | None = None) -> bool:
    """Two calls' events made storages by other ops, in order (`by_event`: the rows sorted
    by their creating event, and those events); `only`: of these op codes alone."""
    rows, made_at = by_event

    def ops(span):
        lo, hi = np.searchsorted(made_at, span, side="left")
        codes = prep.op_code[rows[lo:hi]]
        return codes if only is None else codes[np.isin(codes, only)]
    a, b = ops(one), ops(other)
    return len(a) != len(b) or bool((a != b).any())


# Note [A first fill behind a flag]
# A module that sets itself up on its first call behind a flag (nflows' ActNorm: `if
# self.training and not self.initialized:` initialise from the batch under no_grad, set
# the flag; Note [A flag read to Python] in trace/collector.py) writes a `kept` record for
# the flag it made, and a selective region holding that first call was refused as a cache's
# first fill ("the re-run would run other ops than its forward", Note [A buffer a call makes
# and later calls reuse]), while measure ran `selective:@ActNorm`: 177,534 B
# (tests/clients/train_nflows.py --mode nsf). The re-run finds the flag set and runs what
# the later calls run, the first call's ops less the set-up's. torch's selective checkpoint
# numbers each op kind's calls and hands the re-run the forward's k-th output of a kind it
# saved: a re-run that skips ops refuses nothing, but skipped ops of a saved kind (a matmul
# in the set-up) would shift the outputs it hands back. So such a fill is not refused where
# the ops of the save list the first call made are those a later call made, in order;
# a first fill that read no flag (ALiBi's bias, made when none is big enough; its re-run
# slices the cached bias, an op its forward never ran) is refused as before.
def _first_reuse(starts: np.ndarray, ends: np.ndarray, firsts: set[int]) -> tuple[int, int]:
    """The span of the module's first call that made no buffer (reused one)."""
    j = next(i for i, e in enumerate(starts) if int(e) not in firsts)
    return int(starts[j]), int(ends[j])


def _refuse_selective_recast(prep: Prepared, calls: _Calls, own: _Owners,
                             policy: Policy) -> None:
    """Rule 9's later calls, under selective: a module called again under autocast takes
    its weights' casts from autocast's cache, and its re-run in backward (outside that
    region) casts them again, an op its forward did not run, which torch's selective
    checkpoint refuses. Refuse it as measure does, by the last such call (backward re-runs
    it first). Candidates as `_cached_cast_rows`: a `_to_copy` made inside a call and used
    after it ended, by a later call of the same module that was not handed it; and those of
    `_cast_from_another_call`."""
    if prep.last_use is None or not len(calls) or not (calls.kind == Kind.SELECTIVE).any():
        return
    _, pair = _cast_reusers(prep, calls, own, True, calls.kind == Kind.SELECTIVE)
    if pair is not None and pair.any():
        k = int(np.nonzero(pair)[1].max())
        raise PolicyError(selective_recast_message(policy.text(), str(calls.mods[k])))
    # and a call that took the cast from another module's call (`_cast_from_another_call`)
    kp = _pack_call(prep, calls)[_saves_of_casts_from_another_call(prep, calls, own)]
    kp = kp[calls.kind[kp] == Kind.SELECTIVE]
    if len(kp):
        raise PolicyError(selective_recast_message(policy.text(), str(calls.mods[kp.max()])))


# ---- stage 4: what offload moves ----------------------------------------------------------
def _offloaded(prep: Prepared, calls: _Calls, own: _Owners) -> np.ndarray:
    first = calls.at(calls.kind, own.first_save)
    last = calls.at(calls.kind, own.last_save)
    min_b = calls.at(calls.min_b, own.first_save)
    # the batch too, where the script let go of it and only autograd held it
    # (`model(torch.randn(...))`, `model(x.cuda())`): offload's hooks move it like any save
    # (+262,144 B, the whole batch, on every offload of a post-LN model before)
    return movable(prep) & (first == Kind.OFFLOAD) & (last == Kind.OFFLOAD) & \
        (prep.nbytes >= min_b)


def movable(prep: Prepared) -> np.ndarray:
    """Per storage: what offload's hooks can take off the device, activations and the batch
    the script let go of (`_offloaded`), and a buffer its module let go of while autograd
    held it (Note [A saved buffer its module lets go of], trace/collector.py); never a sparse
    tensor's part (Note [A sparse save stays on the device])."""
    dense = ~saved_sparse(prep)
    if prep.released is None:
        return (prep.cat == ACTIVATION) & dense
    let_go = prep.released >= 0
    if prep.unheld is not None:   # or let go of while a kept graph held it
        let_go = let_go | (prep.unheld >= 0)
    return ((prep.cat == ACTIVATION) | (((prep.cat == INPUT) | (prep.cat == BUFFER)) & let_go)) \
        & dense


# Note [A sparse save stays on the device]
# A sparse tensor (COO, CSR, ...) has no storage of its own (`untyped_storage()` raises),
# so measure's offloader hands a saved one back as it is (memledger/measure/offload.py
# `pack`): its parts stay on the device. The trace records such a save by its values
# (Note [Sparse tensors], trace/collector.py) with `sparse: 1` on the `saved` record, and
# replay reads that flag alone: a storage saved as a sparse tensor's values is never moved
# (`saved_sparse`: it stays while that save holds it, whatever else saves it), and such a
# save is never written out nor read back (`_offloaded_saves`, `written_by_offloader`).
# torch-harmonics' DISCO convolution keeps its filter as a sparse `psi` made at init, and
# `torch.bmm(psi, x)` saves it once per output longitude: moved by replay,
# `offload:blocks.0.disco` on train_harmonics.py --model sht predicted 1,981,616 B against
# 1,995,296 B measured (psi's 3,420 float32 values, 13,680 B).
# What a storage was at some other time says nothing of a save. A `sparse` record (a
# sparse gradient's part) or a `lent` one is written in backward; an `nn.Embedding(sparse=
# True)` saves its ids dense in the forward, and its sparse gradient takes them for its
# indices later. The fifty-fourth session told the save apart by such records, with the
# batch excepted (its category): ids the model computes (hashed tokens, an activation)
# were held on the device by replay and moved by measure, `offload:emb` on
# tests/clients/train_sparse_saves.py --case hashed 6,719,272 B predicted against
# 6,653,736 B measured (the (512, 16) int64 ids, 65,536 B); and a sparse adjacency the
# script makes and the model saves sparse (the batch, excepted) was counted as written
# and read back, `offload:layers.*` on --case adjacency 40,072 B against 39,048 B (its
# 256 float32 values). Ledgers written before the flag read every save as dense.


# ---- stage 5: recompute segments and the renumbered stream (Rule 3) -----------------------
@dataclass
class _Segments:
    """One recompute segment per call at most: events ev0 .. end-1 inserted before `trig`."""

    has: np.ndarray      # per call
    end: np.ndarray      # per call: one past the last re-run event
    length: np.ndarray   # per call
    bw_end: np.ndarray   # per call: last original free of what it dropped (else one past
    #                      the last unpack of what it saved; -1: it saved nothing)
    start: np.ndarray    # per call: first position of the segment in the new stream
    order: np.ndarray    # calls with a segment, by insertion point
    at: np.ndarray       # their insertion points (original events), sorted
    cum: np.ndarray      # events inserted before the j-th segment (len(order) + 1)
    shift: np.ndarray    # per original event: events inserted at or before it
    n: int
    empty_at: np.ndarray | None = None   # per call: the original event whose unpack starts
    #                      a re-run that stops before its first op (-1: none); Note [A
    #                      re-run that stops before its first op]
    first_only: np.ndarray | None = None   # per storage: dropped, read through its call's
    #                      own saves by the first of two passes only (Note [A dropped
    #                      storage a later call reads in the second pass])
    own_reads: OwnReads | None = None   # the reads of each call's own saves, by backward
    #                      phase (Note [A re-run in each of N backward passes])

    def pos_c(self, e: np.ndarray) -> np.ndarray:
        """Where an event that creates lands: after the segments inserted at it."""
        # np.minimum/np.maximum, not np.clip: a third of the cost on small arrays, and a
        # replay asks this a dozen times
        return e + self.shift[np.minimum(np.maximum(e, 0), self.n + 1)]

    def pos_f(self, e: np.ndarray) -> np.ndarray:
        """Where a free lands: before a segment inserted at the same event."""
        return e + np.where(e > 0, self.shift[np.minimum(np.maximum(e - 1, 0), self.n + 1)], 0)

    @property
    def total(self) -> int:
        return self.n + int(self.cum[-1])


# Note [A dead branch's saved inputs]
# A save never unpacked whose storage is still live when tracing stops reads as a call
# whose backward comes after the traced steps (Rule 4: a GAN's generator called for the
# next iteration, then the discriminator's backward, which reads none of the generator's
# saves), and holds the call's checkpoint frame, its RNG state and arguments, to the end.
# Where a backward read the call's other saves, that is so only for a save made after the
# last backward began; one made before it and left is on a dead branch (its node never on
# the loss's path), and a storage the script keeps (its data) outlives it for the
# script's sake. PyG's `HeteroConv` computes every node type, and in a model that
# classifies papers the last layer's author branch reaches no loss; it saved the script's
# edge index. Every layer's frame, with the outputs it was handed, was held to the end of
# the traced steps: `checkpoint:convs.*` predicted 362,756 B, measured 328,068 B
# (tests/clients/train_pyg.py --case hetero_eager); three blocks over two kinds of rows,
# the last block's `b` branch dead (train_mech.py --case two_kinds): 271,152 B against
# 233,072 B.
def _after_last_backward(prep: Prepared, ev: np.ndarray) -> np.ndarray:
    """Whether each event comes after the start of the last backward phase traced (or no
    backward was traced): what it saved is read, if at all, after the traced steps."""
    starts = prep.phase_bw_start
    if starts is None or not len(starts):
        return np.ones(len(ev), dtype=bool)
    return ev > int(starts.max())


# Note [A cache a later call saves again]
# A module may make a tensor on its first call, keep it as a plain attribute and slice it
# in later calls (CoCa's `ParallelTransformerBlock`: `self.mask`, its causal mask, and
# `self.pos_emb`, its rotary table): each step's call saves that one storage again (the
# mask's `masked_fill`). The storage's last unpack is then the last step's, and a frame
# ended by it (Rule 10's "a storage something else holds": the node that unpacked it
# returned) held the first step's checkpoint frame, its RNG state and argument, to the
# last step's backward. Such a frame ends when the node that unpacked the save of the
# call that made it returned (`_own_save_end`); a storage no such save names ends it as
# before. A block that caches its (12, 12) mask (tests/clients/train_cached_attr.py, 2
# steps): `checkpoint:1` read 129,192 B against 121,064 B measured, 8,128 B = the RNG
# state (5,056 B) + the block's (4, 12, 16) fp32 input (3,072 B); CoCa's four
# `checkpoint:@ParallelTransformerBlock` 32,832 B over.

# Note [A re-run that stops before its first op]
# A re-run call whose saves are all made before it ran (its argument, its parameters: an
# elementwise `x * g + b`, one Linear, a Conv1d) has no segment: its first op packs its
# inputs before it runs (Rule 3), so the early stop comes before any op is made again.
# torch re-runs it all the same at the first unpack of those saves, and the re-run forks
# the CPU generator's state (`torch.get_rng_state()`, 5,056 B; Rule 4) before raising at
# that first pack: the fork lives for that instant, just before the unpacking node makes
# anything, beside the state the frame held since forward. `_rng_rows` counted the fork
# only over a segment's events, so a peak there was the fork short. res-mlp-pytorch's
# ResMLP (depth 1, batch 2, SGD, 2 steps; tests/clients/train_halo_resmlp.py):
# `checkpoint:3` (its last Affine) predicted 42,676 B against 46,432 B measured, the
# measured peak at MulBackward0's fork; tests/clients/train_rerun_fork.py's `Scale`,
# 31,168 B against 35,136 B. `empty_at` marks such calls with the event of that unpack.
# On CUDA no state is forked on the device (`rng_bytes` 0).
# The fork lives between two slots: after the frees that land at the unpacking node's
# first op (the node before it let go of its temporaries and saves as it returned, and
# an input buffer's operand once summed), before what that op makes. Counted in the slot
# before (the previous op's), it met those frees still live: a table read four times a
# forward (tests/clients/train_gathered_rows.py, `checkpoint:ent_emb`: each call saves
# only its ids) was predicted 832 B over measured, `checkpoint:rel_emb` 3,072 B over
# (the normalize backward's (16, 16) temporaries). `replay` now reads the curve there as
# `pre` (the slot's value less what it makes) plus the fork (`_fork_slots`), and
# `slot_curve` adds it to the slot just before that event.
def _segments(prep: Prepared, calls: _Calls, dropped: np.ndarray, own: _Owners) -> _Segments:
    n, m = prep.n_events, len(calls)
    kd = np.where(dropped, own.made, m)                      # m: a bin for "not dropped"
    trig = np.full(m + 1, _BIG, dtype=np.int64)
    # the re-run comes at the first read of what the call dropped: a tensor the call saved
    # twice (by a sigmoid and a later broadcasting mul) is first read by the mul's backward,
    # 32 KiB before the sigmoid's. In the last backward pass that reads it (two passes:
    # the segment serves the second), and only for a storage one call saved (a weight's
    # autocast cast saved by two calls of one block is first read by the other call's
    # backward: its last read is this call's)
    first = np.where(prep.pass2 >= 0, prep.pass2, prep.unpack_first) \
        if prep.pass2 is not None else prep.unpack_first
    # of three passes or more, the last (Note [A re-run in each of N backward passes])
    reads = own_reads(prep, _pack_call(prep, calls), own.made) \
        if prep.pack_ev is not None and len(prep.pack_ev) and m else None
    if reads is not None:
        first = np.where(reads.last_first >= 0, reads.last_first, first)
    read = np.where((own.first_save == own.last_save) & (first >= 0), first, prep.unpack)
    # Note [A dropped storage a later call reads in the second pass]
    first_only = _first_pass_only(prep, calls, own, dropped, reads)
    read = np.where(first_only, -1, read)
    np.minimum.at(trig, kd, np.where(read >= 0, read, _BIG))
    stop = np.full(m + 1, -1, dtype=np.int64)
    # Rule 3: the last pack ends it; the call's own packs, not a later call's save of what
    # it made (Note [A later call's save of a cached cast ends no re-run])
    np.maximum.at(stop, kd, _saved_last_by_maker(prep, calls, own) + 1)
    # the re-run serves every save of the call, not only what it dropped: checkpoint holds
    # them all, so the first unpack of any (a frozen Linear's weight, which its backward
    # reads before the next node reads what the call dropped) starts it, and its early stop
    # comes as the last of them is packed again (that weight, after the op before it ran)
    # (Rule 3). Not where the call's dropped storages are read by two backward passes
    if prep.pack_ev is not None and len(prep.pack_ev) and m:
        kp = _pack_call(prep, calls)
        kp = np.where(kp >= 0, kp, m)
        stop_all = np.full(m + 1, -1, dtype=np.int64)
        np.maximum.at(stop_all, kp, prep.pack_ev + 1)
        trig_all = np.full(m + 1, _BIG, dtype=np.int64)
        np.minimum.at(trig_all, np.where(prep.pack_unpack >= 0, kp, m),
                      np.where(prep.pack_unpack >= 0, prep.pack_unpack, _BIG))
        two = np.zeros(m + 1, dtype=bool)
        if prep.pass2 is not None:
            np.logical_or.at(two, kd, prep.pass2 >= 0)
        # a re-run call whose saves nodes outside keep too (a Tanh the next Linear saves the
        # output of) drops nothing, and torch re-runs it all the same at their first unpack
        rerun = np.append(_is_recomputed(calls.kind), False)
        some = (trig < _BIG) | ((trig_all < _BIG) & rerun)
        stop = np.where(some, np.maximum(stop, stop_all), stop)
        trig = np.where(some & ~two, np.minimum(trig, trig_all), trig)
        trig[m], stop[m] = _BIG, -1
    bw_end = np.full(m + 1, -1, dtype=np.int64)
    # a storage something else holds (Rule 10: a pruned weight its module keeps) says by its
    # free when that holder let go, not when the call's backward was done: there, the node
    # that unpacked it returned (its RNG state and arguments were held to the end of the
    # traced steps: 10,112 B over on two pruned blocks)
    held_end = np.where(prep.unpack >= 0, np.maximum(prep.unpack + 1, prep.unpack_end),
                        _gone_unread(prep))
    held = _held(prep)
    # by the node that unpacked the call's own save, not a later call's (Note [A cache a
    # later call saves again])
    own_end = _own_save_end(prep, calls, own)
    held_end = np.where(held & (own_end >= 0), own_end, held_end)
    # so does a sparse gradient's part (Note [A sparse gradient's part ends no backward])
    part = prep.sparse_part if prep.sparse_part is not None else False
    np.maximum.at(bw_end, kd, np.where(held | part, np.minimum(held_end, prep.freed),
                                       prep.freed))
    # a call that drops nothing (its saves are its arguments and parameters: one Linear)
    # still has a frame, held until autograd lets go of the node that unpacked what it
    # saved (Rules 2 and 4): after that node's broadcast sums (a Linear's bias gradient,
    # made with the frame and its RNG state still there: 2,048 B under on the MLP whose
    # peak is at fc1's backward); parameters and buffers do not say when (every call of
    # every step saves them)
    unpacked = np.full(m + 1, -1, dtype=np.int64)
    state = np.isin(prep.cat, MODEL_STATE)
    done = np.where((prep.unpack >= 0) & ~state, np.maximum.reduce(
        [prep.unpack + 1, prep.unpack_end, prep.unpack_rel]), -1)
    # saved, never unpacked and still live when tracing stopped: the call's backward comes
    # after the traced steps (a GAN's generator called for the next iteration before the
    # optimizer step that ends the window), so its frame is held to the end
    done = np.where((prep.unpack < 0) & (prep.saved_first >= 0) & (prep.freed >= n) & ~state,
                    n, done)
    for owner in (own.first_save, own.last_save):
        np.maximum.at(unpacked, np.where(owner >= 0, owner, m), done)
    if prep.pack_ev is not None and len(prep.pack_ev) and m:
        # better, per save: a storage saved by several calls (LBFGS re-runs its closure on
        # one batch, 3 times a step) is let go by each call's own node; by the storage's
        # last unpack, every earlier call's frame was held to the last call's backward
        # (`checkpoint:fc1` 5,052 B over measured at the line search's peak)
        kp = _pack_call(prep, calls)
        r = prep.pack_row
        mine = (kp >= 0) & (prep.pack_unpack >= 0) & ~state[r]
        per_save = np.maximum.reduce([prep.pack_unpack + 1, prep.pack_unpack_end,
                                      prep.pack_unpack_rel
                                      if prep.pack_unpack_rel is not None
                                      else prep.pack_unpack_end])
        if prep.pack_let_go is not None:   # a kept graph held the node, so the frame, on:
            # Note [A node a kept graph holds on] (trace/collector.py)
            per_save = np.maximum(per_save, prep.pack_let_go)
        by_save = np.full(m + 1, -1, dtype=np.int64)
        np.maximum.at(by_save, kp[mine], per_save[mine])
        # saved, never unpacked, still live: by a call whose backward read its other saves,
        # only when made after the last backward (Note [A dead branch's saved inputs])
        # and not let go of unread in forward: its storage outlives it for another holder's
        # sake (TabNet's group matrix, a plain module attribute every mask's matmul saves:
        # a validation forward under gradients after the last backward held its frame, RNG
        # state and input to the end, 8,128 B over measured at `explain`'s peak;
        # tests/clients/train_tabnet.py --epochs 1)
        alive = prep.pack_gone < 0 if prep.pack_gone is not None else True
        live_on = np.full(m + 1, -1, dtype=np.int64)
        np.maximum.at(live_on, np.where(kp >= 0, kp, m), np.where(
            (prep.pack_unpack < 0) & (prep.freed[r] >= n) & ~state[r] & alive
            & _after_last_backward(prep, prep.pack_ev), n, -1))
        has = np.zeros(m + 1, dtype=bool)
        has[kp[mine]] = True
        # a save autograd let go of unread in forward (its node died with an output the
        # script dropped) held the frame only until then, or to the call's end: a block
        # whose only save was `h.sin()`, dropped, held its RNG state (5,056 B) to the
        # backward of the next block that saved `h` (tests/clients/train_random.py; Note [A
        # save autograd let go of unread], trace/collector.py)
        if prep.pack_gone is not None:
            dead = (kp >= 0) & (prep.pack_unpack < 0) & (prep.pack_gone >= 0) & ~state[r]
            dead_calls = kp[dead]
            np.maximum.at(by_save, dead_calls, np.maximum(prep.pack_gone[dead],
                                                          calls.ev1[dead_calls]))
            has[dead_calls] = True
        # a call none of whose saves was read, nor let go of in sight, its graph dropped
        # unseen: its frame went with its outputs (Note [A graph dropped unseen])
        unseen = _dropped_unseen(prep, calls, kp, state, n) & ~has
        has |= unseen
        by_save = np.where(unseen, _outputs_end(prep, calls, m), by_save)
        # a call whose only saves backward reads are model state (`h[:, self.perm]` saves
        # its index buffer, nothing else) is re-run by torch's checkpoint all the same, at
        # the first unpack of that save, and its frame holds its arguments until then: its
        # own save's unpack says when, though a storage's does not (every call saves it)
        state_read = (kp >= 0) & (prep.pack_unpack >= 0) & state[r]
        by_state = np.full(m + 1, -1, dtype=np.int64)
        np.maximum.at(by_state, kp[state_read], per_save[state_read])
        unpacked = np.where(has, np.maximum.reduce([by_save, live_on, by_state]),
                            np.where(by_state >= 0, np.maximum(unpacked, by_state), unpacked))
    # the frame goes with the last of its holders, dropped or not: a region whose first op
    # saves only its argument (ConvNeXt's depthwise conv on the block input) has its last
    # dropped storage (the LayerNorm's mean) freed before that conv's backward unpacks the
    # argument, and the frame, its RNG state and the argument live until then (5,056 B
    # under measured at the conv's backward scratch, tests/clients/train_more3.py)
    bw_end = np.maximum(bw_end, unpacked)
    trig, stop, bw_end = trig[:m], stop[:m], bw_end[:m]
    has = (trig < _BIG) & (stop > calls.ev0)
    # Note [A re-run that stops before its first op]
    empty_at = np.where((trig < _BIG) & ~has & _is_recomputed(calls.kind), trig, -1)
    end = np.minimum(stop, calls.ev1)
    length = np.where(has, end - calls.ev0, 0)
    order = np.flatnonzero(has)
    at = trig[order]
    o = np.argsort(at, kind="stable")
    order, at = order[o], at[o]
    cum = np.concatenate([[0], np.cumsum(length[order])]).astype(np.int64)
    start = np.full(m, -1, dtype=np.int64)
    start[order] = at + cum[:-1]
    shift = np.cumsum(np.bincount(at, weights=length[order], minlength=n + 2)
                      ).astype(np.int64) if len(at) else np.zeros(n + 2, dtype=np.int64)
    return _Segments(has=has, end=end, length=length, bw_end=bw_end, start=start, order=order,
                     at=at, cum=cum, shift=shift, n=n, empty_at=empty_at,
                     first_only=first_only, own_reads=reads)


# Note [A dropped storage a later call reads in the second pass]
# A recurrence trained by truncated BPTT with its hidden state carried undetached, each
# chunk's backward with `retain_graph=True`: chunk 0's layer makes `h` (its scan's output)
# and saves it for its own `out` Linear; the carried `h[:, -1:]` is chunk 1's layer's
# argument, saved again there (`prev.log()`, as minGRU's log-space scan takes it). Under
# `checkpoint` of the layers, chunk 0's call drops `h` (a later call of the same part
# saves it: Rule 1), and both passes re-run that call: chunk 0's backward, and chunk 1's,
# which goes on through the carried state into chunk 0's sigmoids, whose outputs (dropped,
# read by both passes) start the second re-run there (Note [A re-run in each backward
# pass]: the segment serves the second pass, `_first_pass_copies` prices the first). Two
# readings took the storage's reads for the call's, where a later call's save is read
# among them; that save is the later call's (its frame holds its argument) and re-runs
# nothing of the call that made it:
# - the segment went to the storage's last unpack, chunk 1's `log` reading its own save,
#   so the second re-run's copies were held across chunk 1's backward of its own layer,
#   and the re-made `h` until that node returned: `checkpoint:layers.*` predicted 69,996 B
#   against 67,436 B measured (tests/clients/train_carried_hidden.py --case log, 1 or 2
#   steps). A storage the call dropped that a later call saves too, whose own saves (the
#   call's) are read only in backward phases before the one its second pass starts in,
#   places no segment (`_first_pass_only`, `_segments`): the second re-run makes it again
#   and lets go of it at the early stop (its `out` node died with chunk 0's loss; a node
#   still alive then keeps the copy in the frame until it dies, `_own_node_end`), and the
#   first pass's copy lives until its own reader there returned (`_first_pass_copies`).
# - where the call's own save is read by both passes (minGRU's `exp` saves its output,
#   which `to_out` saves too, and chunk 1's `log` the carried view of it), the first
#   pass's copy was held to the storage's first-pass end, counted as its first three
#   unpacks, the third chunk 1's `log` in the second pass: across chunk 1's backward of
#   the scan. It now goes when the call's own nodes that read it in the first pass
#   returned (`_own_save_end`): minGRU-pytorch's layers (tests/clients/train_peer_mingru.py
#   --model rnn --no-detach, depth 2) 169,044 B predicted against 166,800 B measured on 2
#   steps, 142,396 against 140,152 on 1; `checkpoint:layers.0` 213,460 against 210,388 and
#   186,812 against 183,740; train_carried_hidden.py --case lse 79,536 against 77,488.
# The same holds of a storage the call alone saved: what speaks for the call's re-runs is
# when its saves were read, and a storage every read of which (through the call's saves)
# came in a backward phase before the one the call's second pass starts in is read by no
# node of that pass, whoever else saved it. The carried state under `prev * 1.0`
# (train_carried_hidden.py --case plain: chunk 1 saves nothing of it) is chunk 0's `h`,
# saved by its `out` alone and read by chunk 0's backward alone, while its sigmoids are
# read by both passes; predict refused `checkpoint:layers.*` as "would re-run layers.0 in
# each of two backward passes", which measure ran (67,444 B): now 67,444 both (1 and 2
# steps; `--depth 2` 95,484, `checkpoint:layers.1` 95,612; `--keep`, chunk 0's `out` node
# alive through the second re-run, 73,852). So was st-moe's router under `loss.backward(
# retain_graph=True)` then `aux.backward()` (tests/clients/test_stmoe_clients.py: what
# its dispatch tensors are built from is read by the task loss's backward alone):
# 195,208 B both, one step. With three passes or more (`--chunks 3`), "the second pass"
# here is the call's last, and "before" is before its phase (Note [A re-run in each of N
# backward passes]).
# Not where a graph-building pass read the storage or saved it again: that graph holds
# the first re-run's copy for the later pass, which reads it there (the storage's reads
# reach the second pass's phase through the graph's save), and the replay has no reading
# for a copy a graph holds across passes. That is e3nn's forces (a block's fc output, read
# by the force pass alone and saved again by its graph), and train_forces.py's mask in
# plain torch: both stay refused (Note [A re-run in each backward pass]); read as a
# first-pass copy, e3nn's `checkpoint:blocks.*` would be 92,404 B against 92,304 measured.
def _first_pass_only(prep: Prepared, calls: _Calls, own: _Owners,
                     dropped: np.ndarray, reads: OwnReads | None = None) -> np.ndarray:
    """Note [A dropped storage a later call reads in the second pass]: per storage, dropped
    by a call whose storages it alone saved two passes read (its segment serves the second),
    and read through the call's own saves (whether a later call saves it too or not) only
    in backward phases before the one that second pass starts in; none a graph-building
    pass read or a backward saved again."""
    n = len(prep.created)
    out = np.zeros(n, dtype=bool)
    if prep.pass2 is None or prep.pack_reread_ev is None or prep.phase_bw_start is None \
            or not len(prep.phase_bw_start) or not len(prep.pack_ev) or not len(calls):
        return out
    single = own.first_save == own.last_save
    made = dropped & (own.made >= 0)
    if not made.any():
        return out
    # per call: the second pass's first read of a dropped storage only it saved
    p2 = np.full(len(calls), _BIG, dtype=np.int64)
    two = np.flatnonzero(dropped & single & (own.made >= 0) & (prep.pass2 >= 0))
    # of three passes or more, the last's (Note [A re-run in each of N backward passes])
    last = prep.pass2 if reads is None else \
        np.where(reads.last_first >= 0, reads.last_first, prep.pass2)
    np.minimum.at(p2, own.made[two], last[two])
    kp = _pack_call(prep, calls)
    r = prep.pack_row
    mine = (kp >= 0) & (kp == own.made[r])
    last = np.full(n, -1, dtype=np.int64)    # the latest read of the call's own saves
    np.maximum.at(last, r[mine], np.maximum(prep.pack_unpack[mine], prep.pack_reread_ev[mine]))
    k = np.maximum(own.made, 0)
    at = np.stack([last, np.minimum(p2[k], prep.n_events)])
    phase = np.searchsorted(prep.phase_bw_start, at, side="right") - 1
    if reads is not None:   # a save's reads past its second (`pack_reread_ev`) by phase
        phase[0] = np.where(reads.last_first >= 0, reads.last, phase[0])
    out = made & (p2[k] < _BIG) & (last >= 0) & (phase[0] < phase[1])
    # not where a graph-building pass read it or saved it again: that graph would hold the
    # first re-run's copy for a later pass (Note [Read by a backward that builds a graph]
    # in trace/collector.py)
    if prep.graph_reads is not None:
        out &= prep.graph_reads == 0
    out[prep.pack_row[_saved_in_backward(prep)]] = False
    return out


# ---- stage 6: the lifetimes of the rewritten stream ---------------------------------------
# Note [A storage's two categories, split last]
# A storage whose category changes in its life (a state carried into the next step,
# `activation` until its step's end and `other` from there: Note [A state carried into the
# next step], ledger/carried.py; an optimizer's copy of a parameter) is two rows of the
# replay's curve. They were made as the first chunk was: the storages that do not change
# in one chunk, the two pieces of those that do in two more. But the stages after it hold
# a storage longer or end it sooner by its row in the first chunk (`out.f[0][rows]`:
# SAC's cache held to the re-run or the call's backward, Rules 7 and 8; a remade copy
# the script keeps), and with one split storage before it every row of the first chunk
# after it was one off: the stage moved another storage's end. A log-space minGRU
# carrying its state between steps (tests/clients/train_carried_fold.py, plain torch: the
# state split, the `out` Linear's `mm` on a sliced input kept by `save=mm` past the early
# stop), `selective:blocks.0:save=mm`: the cached `mm` (32 x 8 fp32, 1,024 B) went at
# the bias add, the neighbour three rows on held to blocks.0's backward instead: 34,888 B
# predicted against 35,692 B measured. So the first chunk is every storage, in the
# ledger's order, under the rules' category, and the split is made as the rows are read
# out (`arrays`), from each storage's end as the stages left it: the earlier category up
# to `until` where that end is past it, the later one from there. 35,692 = 35,692.
@dataclass
class _Lifetimes:
    """Rows (created, freed, bytes, category) in the new numbering; row i < n_storages is
    storage i itself (the first chunk, which the stages after it hold longer or end
    sooner by row: Note [A storage's two categories, split last])."""

    c: list = field(default_factory=list)
    f: list = field(default_factory=list)
    b: list = field(default_factory=list)
    cat: list = field(default_factory=list)
    # per storage of the first chunk: where its earlier category ends (new numbering; -1:
    # none), that category, and the one after it
    until: tuple | None = None

    def add(self, c, f, b, cat) -> None:
        self.c.append(c)
        self.f.append(f)
        self.b.append(b)
        self.cat.append(cat if not np.isscalar(cat) else np.full(len(c), cat, dtype=np.int64))

    def arrays(self):
        c, f, b, cat = list(self.c), list(self.f), list(self.b), list(self.cat)
        if self.until is not None:
            u, before, after = self.until
            c0, f0 = c[0], np.maximum(f[0], c[0])
            split = (u >= 0) & (u > c0) & (u < f0)
            c[0], cat[0] = np.where(split, u, c0), np.where(split, after, cat[0])
            c.append(c0[split])
            f.append(u[split])
            b.append(b[0][split])
            cat.append(before[split])
        c, f = np.concatenate(c), np.concatenate(f)
        return c, np.maximum(f, c), np.concatenate(b), np.concatenate(cat)


# Note [A re-run of a checkpointed function holds the read-back copy]
# Where the script checkpoints something itself, its re-runs work on the inputs their node
# unpacked, an offloaded one's read-back copy, and the re-run's saves hold that copy until
# the backward op that reads them last: not the unpacking node's to let go of as it
# returns. The three places that say so (`_lifetimes`, `_resident_copies`,
# `_release_partly_saved`) read it of the script's checkpoints of a module only; a
# checkpointed function that calls no module (`script_ckpt_fn`, Note [A policy checkpoint
# around a checkpointed function] in trace/script_checkpoint.py) re-runs the same way.
# tests/clients/train_fn_checkpoint.py --no-rng-state (non-reentrant, 1 step):
# `offload:layers.0.mix` predicted 12,776 B against 13,288 B measured, the Mixer's
# input to `_scan` (8 x 16 fp32) let go of during its own cumsum's backward; keeping a
# generator state had moved the peak into the re-run and hidden it. `script_reruns`
# reads both.
def _lifetimes(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
               dropped: np.ndarray, kept_cache: np.ndarray, off: np.ndarray,
               rng_bytes: int, policy: Policy | None = None,
               handed_back: np.ndarray | None = None,
               in_save_list: np.ndarray | None = None) -> _Lifetimes:
    cr, fr0, nb = prep.created, prep.freed, prep.nbytes
    held = _held(prep)
    fr = np.where((dropped | off) & ~held, own.fwd_end, fr0)   # a holder keeps what it holds
    if prep.unheld is not None:
        # the script let go of it while a kept graph held it, which now holds nothing of it
        # (Note [Let go of after backward, while a kept graph holds it], trace/collector.py)
        late = (dropped | off) & held & (prep.unheld >= 0)
        fr = np.where(late, np.minimum(fr, prep.unheld), fr)
    fr = _held_by_dead_saves(prep, calls, fr, (dropped | off) & ~held)
    fr = _release_partly_saved(prep, calls, own, fr, dropped | off | held, in_save_list)
    # Rule 10, once per replay: what a re-run makes again and the script keeps
    restash = _restashed(prep, calls, own, seg)
    kept = _kept_remakes(prep, calls, own, restash)
    fr = _hold_call_args(prep, fr, calls, seg, kept)
    resident = _resident_saves(prep, calls, off)
    if prep.lent_own is not None:
        # Note [A sparse gradient kept as made] (trace/collector.py): a storage offload reads
        # back is what backward sees, so the gradient keeps the copy; the original goes when
        # the script let go of it, not with the gradient
        copied = np.zeros(len(fr), dtype=bool)
        copied[prep.pack_row[resident] if resident is not None else []] = True
        copied |= off & (prep.unpack_first >= 0)
        lent = copied & (prep.lent_own >= 0)
        fr = np.where(lent, np.minimum(fr, prep.lent_own), fr)
    out = _Lifetimes()
    c, f = seg.pos_c(cr), seg.pos_f(fr)
    out.add(c, f, nb, prep.cat)
    if prep.cat_until is not None:
        # Note [A copy the optimizer keeps, then the parameter] (ledger/held_roles.py):
        # its earlier category up to its parameter's old storage's free, its own from there
        # (`cat_after`: the ledger's, which for a carried activation is not the rules' `cat`);
        # split as the rows are read out, after every stage set its end (Note [A storage's
        # two categories, split last])
        u = np.where(prep.cat_until >= 0, seg.pos_f(np.maximum(prep.cat_until, 0)), -1)
        out.until = (u, prep.cat_before, prep.cat_after)
    if prep.span_row is not None:   # Note [A gradient dropped from .grad, then put back]
        r = prep.span_row           # (trace/dropped_grads.py): the span's category in, the
        lo = np.maximum(seg.pos_f(prep.span_ev0), c[r])   # one it would read out
        hi = np.minimum(seg.pos_f(prep.span_ev1), f[r])
        ok = hi > lo
        out.add(lo[ok], hi[ok], nb[r][ok], prep.span_cat[ok])
        out.add(lo[ok], hi[ok], -nb[r][ok], prep.span_was[ok])
    if len(calls):
        _recomputed_rows(prep, calls, own, seg, dropped, kept_cache, out, restash, kept,
                         in_save_list, rng_bytes)
        if handed_back is not None:
            _handed_back_rows(prep, own, seg, handed_back & ~held, out)
            _cached_in_kept_graph(prep, calls, own, seg, kept, handed_back | kept_cache, out)
        _cached_cast_rows(prep, calls, own, seg, out)
        _cast_from_another_call(prep, calls, own, seg, out)
        if rng_bytes:
            _rng_rows(calls, seg, rng_bytes, out)
        _running_stats_rows(prep, calls, seg, out)
    _scratch_rows(prep, calls, seg, out, policy)
    if policy is not None:
        _rewrapped_rows(prep, calls, seg, out, policy)
    # Note [Rounds of a read-back, replayed]: where a later backward pass reads one again
    rounds = _rounds_replayed(prep, _offloaded_saves(prep, calls, off, moved=True), seg, out)
    replayed = np.zeros(len(fr), dtype=bool)
    if rounds is not None:
        replayed[prep.pack_row[rounds]] = True
    u = np.flatnonzero(off & (prep.unpack_first >= 0) & ~replayed)   # offloaded: back at
    #                                                                   its first unpack
    # a held storage's own free is its holder's: the read-back goes with autograd's last use
    back_end = np.where(held[u], prep.unpack[u] + 1, np.maximum(fr0[u], prep.unpack[u] + 1))
    # the read-back copy is the unpacking node's and goes when it returns, before autograd
    # frees the original after a broadcast gradient's sum (Mamba: 8 KiB); not under the
    # script's own checkpoint, whose frame holds what its re-run unpacked. A held one's
    # too: a ReLU output the script keeps (`acts[i] = h`) was read back for fc2's addmm
    # and then the ReLU's backward, whose `threshold_backward` runs while the copy is its
    # input (131,072 B a block under measured when it went at the unpack)
    # (Note [A re-run of a checkpointed function holds the read-back copy])
    reruns = prep.script_reruns
    ue = prep.unpack_end[u] if not reruns else np.full(len(u), -1, dtype=np.int64)
    back_end = np.where((ue >= 0) & ((ue < back_end) | held[u]),
                        np.maximum(ue, prep.unpack[u] + 1), back_end)
    if reruns:
        back_end = np.where(held[u], back_end, _script_rerun_read_back_end(prep, u, back_end))
    back_end = _kept_by_gradient(prep, u, prep.unpack_first[u], back_end)
    back_end = _kept_for_an_unread_save(prep, u, held[u], back_end)
    back = prep.unpack_first[u]
    first_end, again = _read_back_rounds(prep, u)   # Note [Saved again after its read-back]
    if (again >= 0).any():
        two = again >= 0
        out.add(seg.pos_c(back[two]), seg.pos_f(first_end[two]), nb[u[two]], prep.cat[u[two]])
        back = np.where(two, again, back)
    if prep.pass2 is not None and ((prep.pass2[u] >= 0) & (again < 0)).any():
        # read by two backward passes: the offloader lets go of its copy when a pass has
        # read every save, then reads it back for the second
        p2 = (prep.pass2[u] >= 0) & (again < 0)
        two = u[p2]
        out.add(seg.pos_c(prep.unpack_first[two]), seg.pos_f(prep.pass1_end[two]), nb[two],
                prep.cat[two])
        back = np.where(p2, prep.pass2[u], back)
    out.add(seg.pos_c(back), seg.pos_f(back_end), nb[u], prep.cat[u])
    if resident is not None:
        unread = _unread_saves(prep, calls, off)
        if rounds is not None:   # replayed above
            resident &= ~rounds
            if unread is not None:
                unread &= ~rounds
                unread = unread if unread.any() else None
        if resident.any():
            _resident_copies(prep, seg, resident, out, unread)
    return out


# Note [Rounds of a read-back, replayed]
# measure's offloader reads a storage back at the first unpack of one of its offloaded
# saves and holds that copy (`loaded`) until every save still held has been unpacked in
# this read-back round, counting each save's unpacks and taking back those of a save
# autograd lets go of (Note [A save let go of unread, for the offloader], measure/
# offload.py); the next unpack reads it back again, in a new round. Where each save is
# read once, in one backward pass, a round is the saves' first reads, which
# `_resident_copies` and `_lifetimes` replay from each save's first read. Where a later
# backward pass reads the storage again (`retain_graph=True`, an inner `autograd.grad(
# create_graph=True)` and then the outer backward), the rounds fall by which saves each
# pass reads and in what order, which the storage's first and second pass (Note [Two
# passes over a storage a call shares]) and each save's first read do not tell.
# memformer's `memory_replay_backprop` back-propagates each segment's decoder loss, then
# its next memory, both with `retain_graph=True`: the memory leaf is read by the
# encoder's cross-attention in both passes and by the memory updater in the second only.
# Offloading both, the first round opens at the first pass's read and closes at the
# updater's read in the second; the cross-attention's second read opens a round that the
# updater, never read again, holds open until the segment's graph goes. The replay ended
# the second pass's copy at the storage's last reader's return: `offload:@Attention` (2
# segments, SGD, 1 step) 192,188 B predicted against 192,700 B measured; and it counted a
# second pass's copy for a save the first pass never read: `offload:encoder` 191,164
# against 190,908. In plain torch: tests/clients/train_two_passes.py (a leaf memory read
# by `read` on both losses' paths, by `update` on the second's only, and by a product
# outside both), `offload:read+offload:update` 32,620 against 32,748, `offload:update`
# 32,620 against 31,724. higher's MAML (the helper hunt49c's open item): each inner
# `autograd.grad(create_graph=True)` reads the first layer's saved batch back and saves
# the copy again, and a round left open across the next inner forward serves the next
# save: `offload:0` 202,436 against 206,532 (tests/clients/train_fast_weights.py --inner
# 2: 80,252 against 82,300). The unpack records name the save each read (`sev`, Note
# [Which save an unpack reads] in replay/prepared.py), a later pass's reads too
# (`read_pack`), and an unpack whose copy a graph-building pass saved again ends where
# that graph let go of it (its `end`, Note [Saved again by a graph-building backward],
# trace/collector.py). So for a storage one of whose offloaded saves is read twice, or
# that a second pass reads, the replay runs the offloader's count over the saves' packs,
# every read and the saves' ends (let go of unread in forward, let go of by a kept
# graph, else with the storage), one copy a round, from its first read to the round's
# close or its last reader's return, whichever is later. Not under the script's own
# checkpoint (its re-runs hold what they unpacked: Note [A re-run of a checkpointed
# function holds the read-back copy]) nor for a storage an unpack of which names no
# save: those keep the rules above.
def _rounds_replayed(prep: Prepared, offloaded: np.ndarray, seg: _Segments,
                     out: _Lifetimes) -> np.ndarray | None:
    """Add the read-back copies of the storages whose offloaded saves (`offloaded`, a mask
    over the save records) a later backward pass reads again, by measure's offloader's
    rounds (Note [Rounds of a read-back, replayed]); the mask of the save records so
    replayed, None where none."""
    if prep.read_pack is None or not len(prep.read_pack) or prep.script_reruns or \
            prep.pack_row is None or not offloaded.any():
        return None
    mine = offloaded[prep.read_pack]
    counts = np.bincount(prep.read_pack[mine], minlength=len(offloaded))
    rows = np.unique(prep.pack_row[counts > 1])
    if prep.pass2 is not None:   # or another save of its storage, in a second pass
        rows = np.union1d(rows, np.unique(prep.pack_row[offloaded & (
            prep.pass2[prep.pack_row] >= 0)]))
    # or one saved after a read of another opened a round that an earlier save, unread
    # and still held, keeps open (Note [A round a later save joins]): a read-back inside
    # the forward (a `jacobian` there)
    rows = np.union1d(rows, _joined_rounds(prep, offloaded, mine))
    if prep.unpack_unnamed is not None:
        rows = rows[~prep.unpack_unnamed[rows]]
    if not len(rows):
        return None
    done = offloaded & np.isin(prep.pack_row, rows)
    saves = np.flatnonzero(done)
    reads = np.flatnonzero(mine & done[prep.read_pack])
    gone = prep.pack_gone[saves] if prep.pack_gone is not None else np.full(len(saves), -1)
    let_go = prep.pack_let_go[saves] if prep.pack_let_go is not None else \
        np.full(len(saves), -1)
    # a save ends where autograd let go of it unread in forward, where a kept graph let go
    # of it, else with its storage (its node held it to there)
    end_of = np.where(gone >= 0, gone, np.where(let_go >= 0, let_go,
                                                prep.freed[prep.pack_row[saves]]))
    # a save read with neither: its node let go of it as it returned from its read (Note
    # [A round a later save joins]), where its storage was freed in the trace at all
    read_to = np.full(len(offloaded), -1, dtype=np.int64)
    np.maximum.at(read_to, prep.read_pack[reads], prep.read_end[reads])
    read_to = read_to[saves]
    end_of = np.where((gone < 0) & (let_go < 0) & (read_to >= 0) &
                      (prep.freed[prep.pack_row[saves]] < prep.n_events),
                      np.minimum(end_of, read_to), end_of)
    n_s, n_r = len(saves), len(reads)
    # one timeline: per storage, by event; at one event packs, then reads, then ends
    row = np.r_[prep.pack_row[saves], prep.pack_row[prep.read_pack[reads]],
                prep.pack_row[saves]]
    ev = np.r_[prep.pack_ev[saves], prep.read_ev[reads], end_of]
    kind = np.r_[np.zeros(n_s, dtype=np.int64), np.ones(n_r, dtype=np.int64),
                 np.full(n_s, 2, dtype=np.int64)]
    save = np.r_[saves, prep.read_pack[reads], saves]
    ret = np.r_[np.full(n_s, -1, dtype=np.int64), prep.read_end[reads],
                np.full(n_s, -1, dtype=np.int64)]
    o = np.lexsort((kind, ev, row))
    starts, stops, which = [], [], []
    r0, start = -1, -1
    for r, e, k, j, end in zip(row[o].tolist(), ev[o].tolist(), kind[o].tolist(),
                               save[o].tolist(), ret[o].tolist()):
        if r != r0:
            if start >= 0:   # still open when the trace ended
                starts.append(start)
                stops.append(max(last, int(prep.freed[r0])))
                which.append(r0)
            r0, held, served, rnd, start, last = r, 0, 0, 0, -1, -1
            read_in: dict[int, tuple[int, int]] = {}   # save -> (round, its unpacks in it)
        if k == 0:
            held += 1
            continue
        if k == 1:
            if start < 0:   # a read-back: the round's copy from here
                start, last = e, e + 1
            rd, n = read_in.get(j, (rnd, 0))
            read_in[j] = (rnd, (n if rd == rnd else 0) + 1)
            served += 1
            last = max(last, end)
        else:
            held -= 1
            rd, n = read_in.pop(j, (-1, 0))
            if rd == rnd:   # its unpacks of this round no longer count
                served -= n
        if start >= 0 and served >= held:   # every save still held read: the round is over
            starts.append(start)
            stops.append(max(last, e + 1) if k == 1 else max(last, e))
            which.append(r)
            start, served, rnd = -1, 0, rnd + 1
    if start >= 0:
        starts.append(start)
        stops.append(max(last, int(prep.freed[r0])))
        which.append(r0)
    w = np.asarray(which, dtype=np.int64)
    out.add(seg.pos_c(np.asarray(starts, dtype=np.int64)),
            seg.pos_f(np.asarray(stops, dtype=np.int64)), prep.nbytes[w], prep.cat[w])
    return done


def _joined_rounds(prep: Prepared, offloaded: np.ndarray, mine: np.ndarray) -> np.ndarray:
    """The storages with an offloaded save packed after the first read of another, while
    an earlier save of it, unread then, was still held (Note [A round a later save
    joins])."""
    first_read = np.full(len(prep.nbytes), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_read, prep.pack_row[prep.read_pack[mine]], prep.read_ev[mine])
    late = np.flatnonzero(offloaded & (prep.pack_ev > first_read[prep.pack_row]))
    if not len(late):
        return late
    gone = prep.pack_gone if prep.pack_gone is not None else np.full(len(offloaded), -1)
    let_go = prep.pack_let_go if prep.pack_let_go is not None else \
        np.full(len(offloaded), -1)
    end = np.where(gone >= 0, gone, np.where(let_go >= 0, let_go, prep.freed[prep.pack_row]))
    # within one step (a save a dead branch kept from an earlier step keeps no round open
    # that the next step's forward joins: tests/clients/train_mech.py --case two_kinds)
    bounds = np.cumsum(prep.step_events)
    step = np.searchsorted(bounds, prep.pack_ev, side="right")
    read_step = np.searchsorted(bounds, first_read, side="right")
    out = []
    for r in np.unique(prep.pack_row[late]).tolist():
        mine_r = np.flatnonzero(offloaded & (prep.pack_row == r))
        for j in late[prep.pack_row[late] == r].tolist():
            if read_step[r] != step[j]:
                continue
            i = mine_r[(prep.pack_ev[mine_r] < prep.pack_ev[j]) & (step[mine_r] == step[j])]
            read = prep.pack_unpack[i]
            still = ((read < 0) | (read > prep.pack_ev[j])) & (end[i] > prep.pack_ev[j])
            if still.any():
                out.append(r)
                break
    return np.asarray(out, dtype=np.int64)


# Note [Saved again after its read-back]
# Offload's copy of a storage is read back once every save still held has been unpacked
# (measure/offload.py), and a save packed after that, of the original the script still
# holds, is written again and read back in a round of its own. Truncated BPTT whose carried
# hidden state is not detached: chunk 0's layer saves its output `h` (the Linear after it),
# the next chunk's layer saves `h[:, -1:]` again as its carried state (`prev.log()`), each
# chunk's backward with `retain_graph=True`. Chunk 0's backward reads the first save back
# (a copy, gone as its node returns); chunk 1's forward saves the original again; chunk 1's
# backward reads that back. The replay had one copy from the first read-back to the last,
# through chunk 1's forward: `offload:layers.*` on tests/clients/train_carried_hidden.py
# (`--case log`, 1 step), with the script's let-go seen (Note [Saved again by the next
# chunk's forward], trace/collector.py), predicted 42,280 B against 42,028 B measured;
# with `--case log,exp`, whose `exp` save both passes read, the first pass was counted as
# its first `saves` reads, chunk 1's read of the new save among them, and the copy held
# to there: 42,792 against 42,540. A storage whose
# later save was packed after every earlier save of it was read back and its node
# returned has two copies: the first from its first read-back to that node's return, the
# second from the later save's first read-back. A save packed inside the node that read
# the storage back (a reentrant checkpoint's re-run, Note [A save of the read-back copy])
# is no new round.
# (Where a second pass reads the storage, Note [Rounds of a read-back, replayed] replays
# the rounds from every read instead.)
# Note [A round a later save joins]
# A read-back round stays open while a save still held is unread, and a save packed while
# it is open joins it: the copy read back for the first read stays until the later save
# is read too. pypose's EKF (tests/clients/train_pypose.py --mode ekf) calls its
# observation model `g` on the state for the reference point (unread), inside `jacobian`
# (read there, in the forward) and for the innovation (read in the loss's backward): the
# copy read inside the forward stays to the loss's backward, while the reference call's
# graph lives. The replay read each save's copy from its own first read (`_resident_
# copies`), to the storage's free where a save was never read: `offload:model.g` (6
# frames, 2 steps) 15,536 B against 15,552 measured, the last filter step's state held
# by the module and its copy both. Such a storage (an offloaded save packed after the
# first read of another while an earlier save of the same step, unread then, is still
# held: `_joined_rounds`; not a dead branch's save kept from the step before, which moved
# tests/clients/train_mech.py --case two_kinds 512 B over) now goes through the rounds (Note [Rounds of a read-back,
# replayed]), and a save read with no `unread` or `let_go` record ends at its read's
# end (its node let go of it as it returned, Note [A node a kept graph holds on]) where
# the trace saw its storage freed; else with the storage, as before. In plain torch:
# tests/clients/train_jacobian_inside.py --ref keep, 488 against 472 (with Note [A pass
# inside the forward], trace/collector.py).
def _read_back_rounds(prep: Prepared, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per offloaded storage in `u`: (when its first read-back round ends, the first
    unpack of its next round), -1 where it has one round. Where two backward passes read
    it too (`pass2`), the later save's round is the second pass's."""
    first_end = np.full(len(u), -1, dtype=np.int64)
    again = np.full(len(u), -1, dtype=np.int64)
    if prep.pack_row is None or not len(prep.pack_row) or not len(u) or \
            prep.pack_unpack_end is None:
        return first_end, again
    pos = np.full(len(prep.nbytes), -1, dtype=np.int64)
    pos[u] = np.arange(len(u))
    js = np.flatnonzero(pos[prep.pack_row] >= 0)
    # only a storage with a save packed after its first read-back can have two rounds
    # (none in a loop whose saves all come before its backward): one pass over those
    uf = prep.unpack_first[prep.pack_row[js]]
    rows = np.unique(prep.pack_row[js[(uf >= 0) & (prep.pack_ev[js] > uf)]])
    if not len(rows):
        return first_end, again
    js = js[np.isin(prep.pack_row[js], rows)]
    js = js[np.lexsort((prep.pack_ev[js], prep.pack_row[js]))]
    ends = np.maximum(prep.pack_unpack_end, prep.pack_unpack + 1)
    starts = np.searchsorted(prep.pack_row[js], rows)
    stops = np.searchsorted(prep.pack_row[js], rows, side="right")
    for r, a, z in zip(rows.tolist(), starts.tolist(), stops.tolist()):
        mine = js[a:z]
        read = prep.pack_unpack[mine]
        for k in range(1, len(mine)):
            if (read[:k] < 0).any() or read[k] < 0:
                break
            done = int(ends[mine[:k]].max())
            if prep.pack_ev[mine[k]] > done and prep.unpack_first[r] < done:
                first_end[pos[r]] = done
                again[pos[r]] = int(read[k:][read[k:] >= 0].min())
                break
    return first_end, again


def _held_by_dead_saves(prep: Prepared, calls: _Calls, fr: np.ndarray,
                        moved: np.ndarray) -> np.ndarray:
    """A storage the policy drops or moves at its last forward use stays while a save
    outside every selected call holds it, one never unpacked, until autograd lets go of
    that save in forward (Note [A save autograd let go of unread], trace/collector.py). Such
    a save holds nothing into backward, so it makes no call the storage's saver
    (`_without_unread_saves`), but its node lives until the script drops the output it
    made. TabNet's encoder adds `mean(sum(M * log(M + eps)))` of each decision step's
    attention mask M (entmax's output, which entmax saves) into a sparsity loss that its
    pretraining network drops (`steps_out, _ = self.encoder(...)`): the `mul` saving M
    lives until that forward returns, through the decoder's forward, where the peak is.
    `selective:@AttentiveTransformer` let the three (128, 12) fp32 masks go at their last
    use: predicted 18,432 B under measured (tests/clients/train_tabnet.py --mode
    pretrain)."""
    gone = prep.pack_gone
    if gone is None or not len(gone) or not len(calls) or not moved.any():
        return fr
    dead = (prep.pack_unpack < 0) & (gone >= 0) & (_pack_call(prep, calls) < 0)
    if not dead.any():
        return fr
    until = np.full(len(fr), -1, dtype=np.int64)
    np.maximum.at(until, prep.pack_row[dead], gone[dead])
    return np.where(moved & (until > fr), np.minimum(until, prep.freed), fr)


# Note [A save backward never reads]
# measure's offloader holds a storage's read-back copy until the last of its saves has
# been unpacked (Note [Offload moves storages, once each], measure/offload.py), so where
# one save is never read, the copy stays until autograd lets go of the packed record of
# that save, when its node dies. N-BEATS' seasonality block runs one `theta_f_fc` on its
# hidden state twice, for the backcast and the forecast; with no backcast loss backward
# never reaches the backcast's node, and a loop that keeps the model's output (`out =
# model(x)`, which holds the backcast and its graph) keeps that node to the next step's
# forward. The replay let the read-back ReLU output (8 x 32 fp32, 1,024 B) go as the
# forecast's node returned: `offload:net_blocks.*` (tests/clients/train_pf.py --model
# nbeats --loop hand --collect, 2 steps) was predicted 49,472 B against 50,496 B measured,
# at the optimizer step. With more saves than unpacks (a save let go of unread in forward
# not counted) and the script holding nothing of it, the storage's free in the traced run
# is when autograd's last holder let go: the copy lives to then.
def _kept_for_an_unread_save(prep: Prepared, rows: np.ndarray, held: np.ndarray,
                             ends: np.ndarray) -> np.ndarray:
    """Read-back copies that a save no backward unpacks keeps (Note [A save backward never
    reads]): to the storage's own free in the traced run."""
    if prep.saves is None or prep.unpacks is None or not len(rows):
        return ends
    never = prep.saves[rows] - prep.unpacks[rows]
    if prep.pack_gone is not None and prep.pack_row is not None:
        # a save autograd let go of unread in forward holds nothing into backward (Note [A
        # save autograd let go of unread]): its packed record died with its node
        gone = np.bincount(prep.pack_row[prep.pack_gone >= 0], minlength=len(prep.saves))
        never = never - gone[rows]
    return np.where((never > 0) & ~held, np.maximum(ends, prep.freed[rows]), ends)


def _kept_by_gradient(prep: Prepared, rows: np.ndarray, first: np.ndarray,
                      ends: np.ndarray) -> np.ndarray:
    """Read-back copies a sparse gradient keeps: `nn.Embedding(sparse=True)`'s gradient
    holds a view of the ids backward unpacked (Note [A sparse gradient kept as made],
    trace/collector.py), so an offloaded embedding's read-back ids live until the gradient
    goes (`zero_grad`), not when its node returns: 2,048 B under measured at the optimizer's
    peak for 64 x 4 user ids (tests/clients/train_layouts.py --case embeddings)."""
    if prep.lent_ev is None or not len(rows):
        return ends
    ev, until = prep.lent_ev[rows], prep.lent_until[rows]
    return np.where((ev >= first) & (until > ends), until, ends)


def _resident_saves(prep: Prepared, calls: _Calls, off: np.ndarray) -> np.ndarray | None:
    """The save records `_resident_copies` copies (a bool mask over them), None if none."""
    if prep.pack_ev is None or not len(prep.pack_ev) or not len(calls) or \
            not (calls.kind == Kind.OFFLOAD).any():
        return None
    ours = _offloaded_saves(prep, calls, off) & (prep.pack_unpack >= 0)
    return ours if ours.any() else None


def _offloaded_saves(prep: Prepared, calls: _Calls, off: np.ndarray,
                     moved: bool = False) -> np.ndarray:
    """The save records an offloaded call writes of a storage that stays on the device
    (parameters and buffers aside, at least the call's `min` bytes): a bool mask. With
    `moved`, of the storages the policy moves too."""
    if prep.pack_row is None or not len(calls):
        return np.zeros(0 if prep.pack_row is None else len(prep.pack_row), dtype=bool)
    k = _pack_call(prep, calls)
    r = prep.pack_row
    kk = np.maximum(k, 0)
    dense = ~prep.pack_sparse if prep.pack_sparse is not None else True
    return (k >= 0) & (calls.kind[kk] == Kind.OFFLOAD) & \
        written_by_offloader(prep)[r] & dense & \
        (prep.nbytes[r] >= calls.min_b[kk]) & (moved | ~off[r])


def written_by_offloader(prep: Prepared) -> np.ndarray:
    """Per storage: what measure's offloader writes out when a save of it is packed: not a
    parameter, a buffer nor other model state, not empty, saved dense at least once (a
    sparse save stays: Note [A sparse save stays on the device])."""
    return ~np.isin(prep.cat, MODEL_STATE) & (prep.nbytes > 0) & _saved_dense(prep)


def saved_sparse(prep: Prepared) -> np.ndarray:
    """Per storage: the values of a sparse tensor autograd saved, which offload's hooks
    leave on the device (Note [A sparse save stays on the device])."""
    out = np.zeros(len(prep.cat), dtype=bool)
    if prep.pack_sparse is not None and prep.pack_sparse.any():
        out[prep.pack_row[prep.pack_sparse]] = True
    return out


def _saved_dense(prep: Prepared) -> np.ndarray:
    """Per storage: not saved, or saved dense at least once (Note [A sparse save stays on
    the device])."""
    if prep.pack_sparse is None or not prep.pack_sparse.any():
        return np.ones(len(prep.cat), dtype=bool)
    dense = np.ones(len(prep.cat), dtype=bool)
    dense[prep.pack_row[prep.pack_sparse]] = False
    dense[prep.pack_row[~prep.pack_sparse]] = True
    return dense


def _unread_saves(prep: Prepared, calls: _Calls, off: np.ndarray) -> np.ndarray | None:
    """The offloaded save records of a storage that stays which no backward unpacks and
    autograd did not let go of in forward (Note [A save backward never reads, of a
    storage that stays]): a bool mask, None if none."""
    unread = _offloaded_saves(prep, calls, off) & (prep.pack_unpack < 0)
    if prep.pack_gone is not None:
        unread &= prep.pack_gone < 0
    return unread if unread.any() else None


def _rerun_started_by(prep: Prepared, unpacks: np.ndarray,
                      later_inputs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the script's checkpoint re-runs (their generator forks, op `fork_rng`,
    each made one event after the unpack that started it), and for each of `unpacks` the
    index among them of the re-run it started (-1: none). With `later_inputs`, also of the
    re-run whose region's other inputs it read back: those come at the fork's own event (no
    op runs between them). SEW-D's layers take the hidden states and then the attention
    mask; with the mask's read-back copy taken for no re-run's, it was held to the
    original's free, past the layer's backward: `offload` of its layers under their own
    checkpoint, 768 B over measured."""
    fork = np.flatnonzero(prep.op_names[prep.op_code] == "fork_rng")
    if not len(fork):
        return fork, np.full(len(unpacks), -1, dtype=np.int64)
    made = prep.created[fork]
    started = _position_in(made, unpacks + 1)
    if not later_inputs:
        return fork, started
    return fork, np.where(started >= 0, started, _position_in(made, unpacks))


def _script_rerun_read_back_end(prep: Prepared, u: np.ndarray,
                                back_end: np.ndarray) -> np.ndarray:
    """Note [The script's own checkpoint] (trace/script_checkpoint.py): a non-reentrant
    re-run reads the region's inputs back (checkpoint saves them through the outermost
    hooks, offload's) into a local list that goes when the re-run ends; after that only
    what the re-run saved of them holds the copy, until its last use. Not the original's
    free: what held that (checkpoint's input saver) is freed with the whole graph.
    transformers Cohere, whose parallel block saves no raw input: `offload:model.layers.*`
    predicted 32,768 B over measured before (the layer input's copy held to the step's
    end). The re-run is the span of the generator fork the ledger records (op `fork_rng`,
    made one event after the unpack that started it); without one, the copy is held as
    before. The re-run of the last unpack: an input two regions saved (an encoder's output,
    read by every decoder layer's cross-attention) is read back once, by the first re-run,
    and handed to each later one, which holds it to its own end (BART classifying under
    its own checkpoint, `offload:model.decoder.layers.*`: 131,072 B under measured when
    the copy went with the first re-run)."""
    fork, i = _rerun_started_by(prep, prep.unpack[u], later_inputs=True)
    if not len(fork):
        return back_end
    rerun_end = prep.freed[fork][np.maximum(i, 0)]
    end = np.maximum(np.maximum(prep.last_use[u] + 1, rerun_end), prep.unpack[u] + 1)
    return np.where((i >= 0) & (end < back_end), end, back_end)


def _rerun_frame_end(prep: Prepared, frame: np.ndarray, first: np.ndarray,
                     freed: np.ndarray) -> np.ndarray:
    """Where a region input's copy, read back by the unpack that started the script's own
    checkpoint re-run, goes: with the checkpoint's frame, after the region's backward (the
    re-run works on the copy, and its first op's save of it is read last), or with the
    original if that goes first; -1 for a copy no re-run started from. `frame`: the end of
    the frame that saved it (`_frame_end`); the re-run, the generator fork made one event
    after the unpack. transformers
    SwiftFormer (its stages checkpoint themselves, each after a ReLU that saves the stage's
    input too), `offload:swiftformer.encoder.network.0` under bf16 autocast: 49,152 B under
    measured when the copy went as the unpacking node returned."""
    fork, i = _rerun_started_by(prep, first)
    if not len(fork):
        return np.full(len(first), -1, dtype=np.int64)
    return np.where((i >= 0) & (frame >= 0), np.minimum(frame, freed), -1)


def _frame_end(prep: Prepared, packed: np.ndarray) -> np.ndarray:
    """The end of the script's checkpoint frame that saved each region input at `packed`:
    its generator state's free (`get_rng_state`, made one event after the input's save);
    -1 for a save no frame made."""
    state = np.flatnonzero(prep.op_names[prep.op_code] == "get_rng_state")
    if not len(state):
        return np.full(len(packed), -1, dtype=np.int64)
    frame = _position_in(prep.created[state], packed + 1)
    return np.where(frame >= 0, prep.freed[state][np.maximum(frame, 0)], -1)


# Note [Two passes over a storage a call shares]
# A storage an offloaded (or re-run) call saves and nodes outside it save too stays on the
# device (`_release_partly_saved`), and offload writes the call's saves and reads them back
# (`_resident_copies`). Both read each save's unpack, one per save: in a step with two
# backward passes over the graph (a force field's `autograd.grad(energy, pos,
# create_graph=True)`, then the loss's backward) each save is read twice. The original
# then went once the outside nodes' first reads were done, and the read-back copy once
# its first reader returned, though the graph the first pass built holds that copy until
# its reader in the second pass returned (`pass1_end`), and the second pass reads the
# storage back again. e3nn's edge spherical harmonics (tests/clients/train_e3nn.py
# --mode forces, lmax 2), saved by each block's tensor product and by the model's cutoff
# product: `offload:blocks.0` predicted 90,600 B against 91,176 B measured (one step of
# one structure), 578,920 against 588,280 on two of 8 atoms; exact now.
# (A storage one of whose offloaded saves is read twice, or that a second pass reads,
# is replayed by the offloader's rounds now: Note [Rounds of a read-back, replayed].)
# Note [A save backward never reads, of a storage that stays]
# measure's offloader holds a read-back copy until every save of the storage still held
# has been unpacked (Note [A save let go of unread, for the offloader], measure/offload.py),
# so a save no backward reads, held by a node that lives on, keeps the copy until that
# node dies. Note [A save backward never reads] replays that for a storage the policy
# moves; a storage a node outside the offloaded calls saves too stays on the device, and
# its copy (`_resident_copies`) went when the last save read returned. memformer's
# memory (tests/clients/train_memformer_mlm.py --mode bptt, 2 segments): the memory a
# segment hands on is read by the next segment's encoder cross-attention (on the loss's
# path), by its memory updater and its GRU cell (on the next memory's, which backward
# never reaches: the decoder's loss is on the last segment). With `offload:@Attention`
# the encoder's read brought the (2, 4, 16) fp32 memory back, 512 B, and the updater's
# unread save kept that copy until the loop let go of the segment's graph: predicted 512
# B under measured in backward (`offload:mem_updater+offload:encoder...0.1.fn.fn`
# 288,464 against 288,976). Such a save joins the storage's copies as one never read
# (it starts none) that holds the copy to the storage's free in the traced run, when the
# graph holding that save and the outside node's went. In plain torch:
# tests/clients/train_handback.py --case shared, 1,024 B under before.
def _resident_copies(prep: Prepared, seg: _Segments, ours: np.ndarray,
                     out: _Lifetimes, unread: np.ndarray | None = None) -> None:
    """Offload writes every storage an offloaded call packs (parameters and buffers aside,
    at least its `min` bytes) and reads it back in backward, whether or not the storage
    could leave the device. One that stays (the batch the script holds, a ReLU output its
    own ReLU saves too) is on the device twice from its first read-back until the last node
    that unpacked one of those saves returns: one copy per storage (measure/offload.py).
    MLP, `loss.backward(); opt.step(); opt.zero_grad()` (the peak in backward, at fc1's):
    `offload:**` was predicted 63,488 B under measured, the batch's copy. `ours`: the save
    records copied (`_resident_saves`)."""
    r = prep.pack_row
    rows, packed = r[ours], prep.pack_ev[ours]
    first, ends = prep.pack_unpack[ours], prep.pack_unpack_end[ours]
    ends = np.where(ends >= 0, np.maximum(ends, first + 1), first + 1)
    ends = _kept_by_gradient(prep, rows, first, ends)
    if prep.script_reruns:
        # the script's own checkpoint re-runs its function on the inputs its node unpacked,
        # here the read-back copy, and the re-run's saves hold that copy as they held the
        # original: where this save was the storage's last read, until the original's free
        # (as offloaded storages' copies, `_lifetimes`). diffusers' UNet2DConditionModel
        # checkpointing its transformer blocks, `offload:down_blocks.*`: the cross-attention
        # states (2, 6, 16) fp32 went at the node's return, 768 B under measured. Where
        # the frame that saved it is what freed the original (its generator state goes at
        # the same event), the frame holds offload's handle, not the copy: the copy goes
        # after its last read. SEW-D's attention mask, which layer 1's own save kept to
        # its backward: 768 B over measured when the copy was held to the frame's end.
        last = (first == prep.unpack[rows]) & (prep.freed[rows] > ends)
        frame = _frame_end(prep, packed)
        by_frame = frame == prep.freed[rows]
        ends = np.where(last, np.where(by_frame, np.maximum(ends, prep.last_use[rows] + 1),
                                       prep.freed[rows]), ends)
        ends = np.maximum(ends, _rerun_frame_end(prep, frame, first, prep.freed[rows]))
    if prep.pass2 is not None and (prep.pass2[rows] >= 0).any():
        # Note [Two passes over a storage a call shares]: the first pass's copy is held
        # by the graph that pass built until its reader in the second pass returned, and
        # the second pass reads the storage back again, until its last reader returned
        two = prep.pass2[rows] >= 0
        ends = np.where(two, np.maximum(ends, prep.pass1_end[rows]), ends)
        t = np.unique(rows[two])   # one copy per storage, however many saves
        out.add(seg.pos_c(prep.pass2[t]), seg.pos_f(np.maximum(prep.unpack[t] + 1,
                                                               prep.unpack_end[t])),
                prep.nbytes[t], prep.cat[t])
    never = np.iinfo(np.int64).max
    if unread is not None:
        # Note [A save backward never reads, of a storage that stays]: read never, held to
        # the storage's free
        u = r[unread]
        rows, packed = np.r_[rows, u], np.r_[packed, prep.pack_ev[unread]]
        first = np.r_[first, np.full(len(u), never, dtype=np.int64)]
        ends = np.r_[ends, prep.freed[u]]
    # one copy per storage while its saves are out: a save made after every earlier one was
    # read back and let go starts a new copy (accumulation: each micro-batch saves a view
    # of the batch and reads its own copy back in its own backward)
    o = np.lexsort((packed, rows))
    rows, packed, first, ends = rows[o], packed[o], first[o], ends[o]
    big = prep.n_events + 2
    run = np.maximum.accumulate(ends + rows * big)           # groups ascend: no resets needed
    prev = np.r_[-1, run[:-1]] - rows * big
    new = np.r_[True, rows[1:] != rows[:-1]] | (packed >= prev)
    gen = np.cumsum(new) - 1
    start = np.full(gen[-1] + 1, never, dtype=np.int64)
    stop = np.full(gen[-1] + 1, -1, dtype=np.int64)
    np.minimum.at(start, gen, first)
    np.maximum.at(stop, gen, ends)
    which = rows[new]
    read = start != never          # a copy no save read back was never made
    out.add(seg.pos_c(start[read]), seg.pos_f(stop[read]), prep.nbytes[which[read]],
            prep.cat[which[read]])


# Note [An outside node a kept graph holds on]
# A storage saved by an offloaded (or re-run) call and by a node outside it stays on the
# device for the node outside (`_release_partly_saved`), and went, in the replay, as that
# node returned or autograd let go of it (its unpack's `end`, `rel`). A backward that keeps
# its graph (`retain_graph=True`, a graph the script holds past it) lets go of no node's
# saves there: they live until the graph goes, which the ledger writes as the save's
# `let_go` (Note [A node a kept graph holds on], trace/collector.py), read already for a
# checkpoint's frame (`_segments`) and a re-run's copy (`_own_node_end`), not here.
# memformer trained with `--mode bptt --carry keep --accum 2` (each micro-batch's backward
# keeps its graph, which the next one reaches into through the carried memory; 2 steps):
# each segment's memory (2 x 4 x 16 fp32, 512 B) is saved by the next segment's
# cross-attention (its `to_kv`), the memory updater's attention (`to_q`) and its GRU cell;
# `offload:@Attention` let the original the GRU's node holds go as that node returned in
# the second micro-batch's backward, where the kept graph holds it to the step's end:
# 460,772 B predicted against 461,284 B measured, `offload:encoder` 428,132 against
# 428,644, the cross-attention alone 551,012 against 551,524; `--mode mrbp --depth 2
# --updates 2 --validate` `offload:@Attention` 514,776 against 515,288. Such a node now
# holds the storage to its save's `let_go`. tests/clients/train_kept_outside.py in plain
# torch (a gate outside the offloaded Linear saving its input, the loss kept over Adam's
# step): `offload:inner` 123,740 B predicted against 125,788 B measured before.
def _release_partly_saved(prep: Prepared, calls: _Calls, own: _Owners, fr: np.ndarray,
                          settled: np.ndarray, in_save_list: np.ndarray | None) -> np.ndarray:
    """An activation saved both inside a re-run or offloaded call and by a node outside
    it (a block ending in ReLU, which saves its output, before a block starting with a
    conv, which saves it as its input) is neither dropped nor moved: the outside node keeps
    it. But the call's own saves no longer hold it (checkpoint packs a placeholder, offload
    a copy on disk), so it goes when the script let go of it and the last node outside
    that unpacked it returned, not at its baseline free after the call's own backward.
    channels_last CNN, `checkpoint:blocks.0` (tests/clients/train_mech.py): the first
    block's (8, 16, 16, 16) fp32 ReLU output (131,072 B) stayed into the block's re-run,
    predicted 14,336 B over measured; with the next block offloaded, 130,936 B over. A save
    whose node never unpacked it keeps the baseline's free; so do the call's own
    arguments, which checkpoint's frame holds (`_hold_call_args`). Offload has no frame, so
    there the storage may be made anywhere, and may be the batch the script let go of."""
    if prep.pack_ev is None or not len(prep.pack_ev) or not len(calls):
        return fr
    kp = _pack_call(prep, calls)
    r = prep.pack_row
    kk = np.maximum(kp, 0)
    nb = prep.nbytes[r]
    rerun = (kp >= 0) & _is_recomputed(calls.kind[kk])
    if in_save_list is not None:   # SAC's cache holds what its save list keeps
        rerun &= ~in_save_list[r]
    moved = (kp >= 0) & (calls.kind[kk] == Kind.OFFLOAD) & (nb >= calls.min_b[kk])
    released = rerun | moved
    cand = np.zeros(len(fr), dtype=bool)
    cand[r[rerun]] = True
    # re-run: made by the call that saves it (its input, made outside, is the frame's:
    # Rule 2). Offload has no frame: whoever made it, an offloaded save holds a copy on
    # disk, not the storage. diffusers' UNet hands its time embedding (2, 64) fp32 to
    # every resnet, whose checkpoint (the library's own) saves it as an input in each down
    # block, mid block and up block; with `offload:down_blocks.*` it went when the mid
    # block's backward let go of it, long before the down blocks' (512 B over measured)
    mine = (own.made >= 0) & (own.first_save == own.made)
    # ... or a parameter's cast autocast's cache handed the call, which the frame does
    # not hold either: HRM's layers, first called under no_grad in each cycle (the casts
    # made there), then with gradients; checkpointed, nothing held the casts after the
    # forward's autocast exit (180,224 B over measured under bf16 autocast)
    if prep.acast is not None:
        mine |= prep.acast
    cand &= mine & (prep.cat == ACTIVATION)
    off = np.zeros(len(fr), dtype=bool)
    off[r[moved]] = True
    # and the batch, where the script let go of it (`_offloaded`): an autoencoder's MSE
    # saves its target, the image the encoder's first conv saved too; `offload:encoder`
    # left it only the loss node's, gone early in backward (diffusers' AutoencoderKL:
    # the (2, 3, 16, 16) fp32 batch, 6,144 B over measured)
    cand |= off & movable(prep)
    cand &= ~settled
    if not cand.any():
        return fr
    ends = np.maximum.reduce([prep.pack_unpack + 1, prep.pack_unpack_end,
                              prep.pack_unpack_rel if prep.pack_unpack_rel is not None
                              else prep.pack_unpack_end])
    if prep.pack_let_go is not None:   # Note [An outside node a kept graph holds on]
        ends = np.maximum(ends, prep.pack_let_go)
    if prep.script_reruns:
        # the script's own checkpoint re-runs its function on what its node unpacked, and
        # the re-run's saves hold it: where that save was the storage's last read, to its
        # baseline free (`_resident_copies`). UNet2DConditionModel checkpointing its
        # transformer blocks, `offload:up_blocks.*`: the first down block's re-run held the
        # text states, which went at its node's return, 768 B under measured
        ends = np.where(prep.pack_unpack == prep.unpack[r], np.maximum(ends, prep.freed[r]),
                        ends)
    # a save never read holds its storage to its baseline free, unless autograd let go of
    # it in forward (Note [A save autograd let go of unread], trace/collector.py)
    gone = prep.pack_gone if prep.pack_gone is not None else np.full(len(r), -1, np.int64)
    ends = np.where((prep.pack_unpack < 0) & (gone >= 0), gone, ends)
    if prep.pass2 is not None:
        # Note [Two passes over a storage a call shares]: a second backward pass reads
        # the storage again through the nodes outside, after the first pass's reads
        two = prep.pass2[r] >= 0
        ends = np.where(two, np.maximum.reduce([ends, prep.unpack[r] + 1, prep.unpack_end[r]]),
                        ends)
    holds = ~released & cand[r] & ~_saves_of_the_copy(prep, moved)
    never = np.zeros(len(fr), dtype=bool)
    never[r[holds & (prep.pack_unpack < 0) & (gone < 0)]] = True
    end = np.full(len(fr), -1, dtype=np.int64)
    np.maximum.at(end, r[holds], ends[holds])
    # no node outside holds it (saved by a re-run call and by an offloaded one: the
    # first block checkpointed, the next offloaded): it goes as a dropped storage does
    c = np.flatnonzero(cand & ~never)
    if not len(c):
        return fr
    fr = fr.copy()
    fr[c] = np.minimum(fr[c], np.maximum(own.fwd_end[c], end[c]))
    return fr


# Note [A save of the read-back copy]
# An offloaded save is read back as a copy (a storage of its own); what saves the tensor
# it unpacked saves that copy, not the original. A reentrant checkpoint inside the
# offloaded call does just that: it saves its function's arguments (`ctx.save_for_backward`,
# packed by offload's hooks) and, in its backward, runs the function again on the
# arguments it unpacked, under gradients, and that re-run saves them again. The ledger
# records those later saves on the original's storage (one storage as long as nothing
# copies it), and they read as nodes outside the call that keep the original on the device
# from the forward to that re-run's backward. gateloop-transformer's GateLoopedAttention,
# `checkpoint(gate_loop_operator, q, k, v, a)`: `offload:layers.0.0` predicted 162,920 B
# against 159,336 B measured (q, k, v and the complex gates, 3,584 B, held over the
# forward; tests/clients/train_gateloop.py). A save packed after one of the storage's
# offloaded saves was unpacked holds no original.
def _saves_of_the_copy(prep: Prepared, moved: np.ndarray) -> np.ndarray:
    """Per save record: packed after an offloaded save (`moved`) of its storage was read
    back, so it saves the read-back copy."""
    r = prep.pack_row
    back = moved & (prep.pack_unpack >= 0)
    first_back = np.full(len(prep.nbytes), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_back, r[back], prep.pack_unpack[back])
    return prep.pack_ev > first_back[r]


# Note [A graph dropped unseen]
# A checkpointed call whose graph no backward ran and whose saves' deaths the trace could
# not see (its saves are its argument and parameters, tensors autograd keeps themselves,
# no alias to watch: Note [A save autograd let go of unread], trace/collector.py) held its
# frame, its RNG state (5,056 B) and its arguments until the node died, which is when the
# script let go of what the call returned (and of whatever was made from it). The replay
# read the frame's end from the storages the call saved, whose unpacks were a later
# call's: pypose's EKF calls its observation model three times a filter step, once for the
# linearization's reference point (`self._ref_g = self.observation(x)`, never
# differentiated, dropped at the next step's), once inside `jacobian` (read by the
# vmapped backward there) and once for the innovation; the reference call saves the
# state `x` that the innovation's call saves again, so its frame was held to the loss's
# backward. Before: tests/clients/train_graph_unseen.py `--keep` `checkpoint:g` (1 step)
# 25,556 B predicted against 20,500 measured (one RNG state more); pypose's EKF (6 filter
# steps, 2 steps) 76,708 against 51,428. Now such a call's frame ends with the last
# storage it made that outlived it (its outputs), at its end if none did: the earliest
# the node can have died. A tensor made from the output and kept longer holds the node
# on, which the replay does not see.
def _dropped_unseen(prep: Prepared, calls: _Calls, kp: np.ndarray, state: np.ndarray,
                    n: int) -> np.ndarray:
    """Per call (m + 1, the last a sink): it saved something that is no model state, no
    save of it was unpacked, let go of in sight, or live at the end of the steps."""
    m = len(calls)
    r = prep.pack_row
    ok = (kp >= 0) & ~state[r]
    saved, seen = np.zeros(m + 1, dtype=bool), np.zeros(m + 1, dtype=bool)
    saved[kp[ok]] = True
    gone = prep.pack_gone >= 0 if prep.pack_gone is not None else False
    known = (prep.pack_unpack >= 0) | gone | (prep.freed[r] >= n)
    seen[kp[ok & known]] = True
    return saved & ~seen


def _outputs_end(prep: Prepared, calls: _Calls, m: int) -> np.ndarray:
    """Per call (m + 1): the last free of the storages it made that outlived it, else its
    end (Note [A graph dropped unseen])."""
    end = np.append(calls.ev1, -1).astype(np.int64)
    k = np.searchsorted(calls.ev0, prep.created, side="right") - 1
    made = (k >= 0) & (prep.created < calls.at(calls.ev1, k, -1)) & \
        (prep.freed >= calls.at(calls.ev1, k, _BIG))
    np.maximum.at(end, k[made], prep.freed[made])
    return end


def _gone_unread(prep: Prepared) -> np.ndarray:
    """Per storage: when autograd let go of its last save unread in forward (Note [A save
    autograd let go of unread]), for one that no backward ever unpacked; else its free. A
    kept tensor (`self.kept = h.detach()`) that a dropped `h.sin()` saved lives to the end
    of the steps, but the checkpoint frame stopped holding it when the save died: read by
    its free, the frame (its arguments, its RNG state) was held to the end, 136,128 B over."""
    out = prep.freed.copy()
    if prep.pack_gone is None or prep.pack_row is None or not len(prep.pack_row):
        return out
    dead = (prep.pack_unpack < 0) & (prep.pack_gone >= 0)
    gone = np.full(len(out), -1, dtype=np.int64)
    np.maximum.at(gone, prep.pack_row[dead], prep.pack_gone[dead])
    live = np.zeros(len(out), dtype=bool)      # a save that was not let go of unread
    live[prep.pack_row[~dead]] = True
    return np.where((gone >= 0) & ~live, np.minimum(out, gone), out)


# Note [A re-made save no backward reads]
# torch's checkpoint re-run packs every save of the region again and keeps each copy in
# the frame's `recomputed`, a WeakKeyDictionary keyed by a handle that the save's holder
# (inside the node that saved it) holds; an unpack takes the copy out. A save no backward
# unpacks keeps its copy there for as long as its node lives, where Rule 3 let it go as
# its original went in forward. ST-MoE trained on the task loss alone (the router's
# balance and z-losses returned, kept by the script's variables until the next step's
# forward rebinds them, never backpropagated): under `checkpoint:gate` the gate's re-run
# in backward made the (4, 16, 4) fp32 logits, the (4, 16) logsumexp and the (4, 4) mean
# again for those dead nodes, held into the next step's forward where the peak is: 1,344 B
# under measured (tests/clients/train_stmoe.py --mode moe --no-aux; 320 B under
# selective, whose save list hands the logits back). A node that died before the re-run
# (a result dropped in forward: an `unread` record) gets no copy: held by nothing. A
# save-list output SAC's cache hands back is held so too: Note [A handed-back save no
# backward reads].
def _unread_holder_end(prep: Prepared) -> np.ndarray:
    """Per storage: the last event a node that saved it and never unpacked that save is
    alive (-1: none). Its death is the save's `unread` record where autograd let go of it
    in forward, else the storage's free (the node held it to there)."""
    out = np.full(len(prep.freed), -1, dtype=np.int64)
    if prep.pack_row is None or prep.pack_gone is None or not len(prep.pack_row):
        return out
    unread = prep.pack_unpack < 0
    rows = prep.pack_row[unread]
    end = np.where(prep.pack_gone[unread] >= 0, prep.pack_gone[unread], prep.freed[rows])
    np.maximum.at(out, rows, end)
    return out


def _held(prep: Prepared) -> np.ndarray:
    """Storages something besides autograd keeps into backward (a KV cache, a tensor the
    script keeps): checkpoint and offload cannot free them in forward."""
    held = prep.held if prep.held is not None else np.zeros(len(prep.created), dtype=bool)
    if prep.released is not None:
        # a KV cache the script dropped after forward (it kept only `.loss`) holds nothing
        # into backward: its `released` event says so (+65,576 B on a GPT-2 layer before)
        held = (held & (prep.released < 0)) | (prep.released == -1)
    return held


def _hold_call_args(prep: Prepared, fr: np.ndarray, calls: _Calls, seg: _Segments,
                    kept: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """Rule 2: checkpoint's frame holds a region's arguments until its backward is done
    (the frame goes with the last of its saved-tensor holders), even when autograd saved
    none of them. A frozen LoRA base: the (2, 32, 64) fp32 hidden states entering a block
    (16,384 B) are saved by nothing and freed as the next block starts; checkpointed, they
    stay until that block's backward. And until the script lets go of a re-made copy it
    keeps, whose graph saved them (`_kept_remakes`)."""
    ckpt = _is_recomputed(calls.kind)
    if prep.arg_row is None or not len(prep.arg_row) or not ckpt.any():
        return fr
    k = which_call(calls.ev0, calls.ev1, prep.arg_ev0, prep.n_events)
    kk = np.maximum(k, 0)
    mine = (k >= 0) & (calls.ev0[kk] == prep.arg_ev0) & (calls.mods[kk] == prep.arg_mod) & \
        ckpt[kk] & (seg.bw_end[kk] >= 0)
    if not mine.any():
        return fr
    fr = fr.copy()
    np.maximum.at(fr, prep.arg_row[mine], seg.bw_end[kk[mine]])
    _, keep_to, walked = kept   # per call, from `_kept_remakes`
    held = mine & (keep_to[kk] >= 0) & (~walked[kk] | _in_reach(prep, prep.arg_row))
    np.maximum.at(fr, prep.arg_row[held], keep_to[kk[held]])
    _hold_dead_node_saves(prep, fr)   # Note [An argument's dead node, held by the frame]
    return fr


# Note [An argument's dead node, held by the frame]
# Rule 2 holds a region's argument to its backward's end; the argument holds its `grad_fn`,
# and that node what it saved. Where nothing else reads the argument's node (the region
# ignores the argument, so no backward runs the node: a dead branch), the node and its
# saves died with the argument in the baseline, unread, and live as long as the argument
# now. torchode's Runge-Kutta step passes each stage's time `t_nodes[i]` (a view of
# `t_nodes = addcmul(t0, c[:, None], dt)`) to a vector field that ignores it; the addcmul
# saved the tableau's nodes `c` (7 float32, 28 B) for `dt`'s gradient, and
# `checkpoint:vf` was predicted 92 B under measured (that `c` and a 64 B time; tests/clients/
# test_torchode_clients.py). So a save no backward read, let go (`pack_gone`) at an
# argument's original free, by the op that made the argument (its inputs packed the
# event before, its outputs at it), now lives to the argument's held free at least (the
# tableau itself holds `c` to the solve's end, past the node's death). Known
# limitation: only the argument's own node; the nodes behind it that it alone held are
# not followed: `dt = torch.exp(rate * h)` saves its output for its own backward, and
# that save (8 float32, 32 B) stays with the addcmul node too, 32 B under measured; a
# wrapped Python number (`rate * 0.1`, 8 B) has no save to name at all. Telling the
# argument's ancestors from other dead branches let go at the same moment (the locals a
# function drops as it returns) needs the graph's edges, which the ledger does not keep.
# A plain-torch case (tests/clients/train_dead_arg.py, test_dead_arg.py): a (100,) `c`,
# 400 B under before.
def _hold_dead_node_saves(prep: Prepared, fr: np.ndarray) -> None:
    """Extend in `fr` the frees of the unread saves of each held argument's own node (Note
    [An argument's dead node, held by the frame])."""
    if prep.pack_gone is None or prep.pack_row is None or not len(prep.pack_row):
        return
    args = np.unique(prep.arg_row)
    args = args[fr[args] > prep.freed[args]]   # held past their own free
    if not len(args):
        return
    dead = np.flatnonzero((prep.pack_unpack < 0) & (prep.pack_gone >= 0))
    if not len(dead):
        return
    # key (original free, the saving op's event): an argument's op packs its inputs at
    # `created - 1`, its outputs at `created`
    span = np.int64(prep.n_events + 2)
    gone, made = prep.freed[args], prep.created[args]
    keys = np.concatenate([gone * span + made, gone * span + made - 1])
    to = np.concatenate([fr[args], fr[args]])
    order = np.argsort(keys, kind="stable")
    keys, to = keys[order], to[order]
    uk, first = np.unique(keys, return_index=True)
    most = np.maximum.reduceat(to, first)   # per key: the latest held free
    want = prep.pack_gone[dead] * span + prep.pack_ev[dead]
    i = np.minimum(np.searchsorted(uk, want), len(uk) - 1)
    hit = uk[i] == want
    # the node holds it to the argument's end; something else may hold it longer
    np.maximum.at(fr, prep.pack_row[dead[hit]], most[i[hit]])


def _in_reach(prep: Prepared, rows: np.ndarray) -> np.ndarray:
    """Per row: saved inside a stashed tensor's graph (`stash_reach`); all False for a
    ledger whose stash records say nothing of it (then no call is `walked`)."""
    if prep.stash_reach is None:
        return np.zeros(len(rows), dtype=bool)
    return prep.stash_reach[rows]


# Note [A sparse gradient's part ends no backward]
# A sparse gradient's indices are a view of the ids its lookup saved (an EmbeddingBag's
# `value_indices`, made in forward: product-key memory's top-k), so the ids live as long as
# the gradient does, to `zero_grad`, or to the next micro-batch's `add_` (Note [Sparse parts
# replaced inside an op]). Checkpointed, the lookup's region drops the ids and the re-run
# makes them again, and the gradient keeps that copy just as long: the copy went when the
# node that unpacked it returned, 2,048 B under measured (2 x 16 rows of 8 int64 ids a
# head; `train_pkm.py --sparse --depth 1`). And the ids' late free told the region's
# backward end (`bw_end`), which held the region's RNG state (5,056 B) and arguments to the
# optimizer's step: 123,536 B predicted against 118,480 B measured. A storage that was a
# sparse tensor's part (`sparse` and `lent` records) now says nothing of the backward's end,
# and its re-made copy lives to the original's free: 118,480 = 118,480.

def _recomputed_rows(prep, calls, own, seg, dropped, kept_cache, out: _Lifetimes,
                     restash: np.ndarray, kept: tuple[np.ndarray, np.ndarray, np.ndarray],
                     in_save_list: np.ndarray | None = None, rng_bytes: int = 0) -> None:
    """Rule 3: dropped storages come back in their segment and live until their old free;
    everything else made in the segment's span is made again (until its old free or the
    segment's end); SAC-cached outputs are held."""
    cr, fr0 = prep.created, prep.freed
    k = np.maximum(own.made, 0)
    in_seg = (own.made >= 0) & seg.has[k]
    d = np.flatnonzero(dropped & in_seg & ~restash)   # `restash`: Rule 10 re-makes those
    # held by the backward node that unpacks it, until that node returns (Note [When an
    # unpacked tensor goes] in trace/collector.py); autograd held the original longer
    end = prep.unpack_end[d]
    gone = np.where((end >= 0) & (end < fr0[d]), end, fr0[d])
    if prep.sparse_part is not None:   # Note [A sparse gradient's part ends no backward]
        gone = np.where(prep.sparse_part[d], fr0[d], gone)
    kd = k[d]
    # never unpacked (a dead branch): made again by the re-run, gone when its original went
    # in that forward (ending it at the original free put it before the segment: 0 events)
    gone_pos = np.where(prep.unpack[d] < 0,
                        seg.start[kd] + (np.minimum(fr0[d], seg.end[kd]) - calls.ev0[kd]),
                        seg.pos_f(gone))
    # ... unless the node that saved it is alive at the re-run: the frame keeps its copy
    # for that node until the node dies (Note [A re-made save no backward reads])
    unread_to = _unread_holder_end(prep)[d]
    trig = np.full(len(calls.ev0), -1, dtype=np.int64)
    trig[seg.order] = seg.at
    alive = unread_to > trig[kd]
    gone_pos = np.where(alive, np.maximum(gone_pos, seg.pos_f(unread_to)), gone_pos)
    if seg.first_only is not None and seg.first_only[d].any():
        # Note [A dropped storage a later call reads in the second pass]: no node of this
        # pass reads the call's own save of it; the copy goes at the early stop, or when
        # that save's node dies, where it outlives the re-run (the frame keeps it for it)
        fo = seg.first_only[d]
        stop = seg.start[kd] + seg.length[kd]
        node = _own_node_end(prep, calls, own)[d]
        stop = np.where(node > trig[kd], np.maximum(stop, seg.pos_f(node)), stop)
        gone_pos = np.where(fo, stop, gone_pos)
    # the graph of a re-made copy the script keeps holds what the re-run saved before it
    last_cr, keep_to, walked = kept   # `_kept_remakes`
    kept_by = (last_cr[kd] > cr[d]) & (~walked[kd] | _in_reach(prep, d))
    gone_pos = np.where(kept_by, np.maximum(gone_pos, seg.pos_f(np.maximum(keep_to[kd], 0))),
                        gone_pos)
    made_pos = seg.start[kd] + (cr[d] - calls.ev0[kd])
    # a kept activation (the region's output) is re-made by the re-run; under selective the
    # re-run hands the save list's outputs back instead (re-making those read the CNN's
    # selective blocks 5.6 % high), but makes the rest again: a post-LN layer's output,
    # saved by the next layer, is its last LayerNorm's, made again and let go at the early
    # stop (RoBERTa, DeBERTa-v2: 960 B under measured when no activation was re-made)
    cached = in_save_list if in_save_list is not None else np.ones(len(cr), dtype=bool)
    remade = in_seg & ~dropped & (cr < seg.end[k]) & (
        (prep.cat != ACTIVATION) | (calls.kind[k] == Kind.CHECKPOINT) | ~cached)
    if prep.fsdp_gather is not None:   # rule 6: FSDP2's gathers are not re-run
        remade &= ~prep.fsdp_gather
    if prep.kept_fill:   # Note [A cache emptied before every call]: the re-run slices it
        for e0, e1 in skipped_fills(prep.kept_fill, prep.kept, prep.scope_mod,
                                    prep.scope_ev0, prep.scope_ev1):
            remade &= ~((cr >= e0) & (cr < e1))
    t = np.flatnonzero(remade & ~kept_cache & ~restash)
    kt = k[t]
    gone_t = seg.start[kt] + (np.minimum(fr0[t], seg.end[kt]) - calls.ev0[kt])
    # ... and, where the walk says, what it saved without a hook (Python numbers a node
    # keeps: RecurrentGemma's scan, 4 x 8 B under measured)
    kept_t = _in_kept_graph(prep, kept, t, kt)
    gone_t = np.where(kept_t, np.maximum(gone_t, seg.pos_f(np.maximum(keep_to[kt], 0))),
                      gone_t)
    own_end = _own_save_end(prep, calls, own)[t]
    gone_t = np.where((own_end >= 0) & (prep.cat[t] == ACTIVATION),
                      np.maximum(gone_t, seg.pos_f(np.maximum(own_end, 0))), gone_t)
    made_t = seg.start[kt] + (cr[t] - calls.ev0[kt])
    if prep.acast is not None:   # Note [Autocast's cache in a re-run] (trace/collector.py)
        gone_t = np.where(prep.acast[t], np.maximum(gone_t, seg.start[kt] + seg.length[kt]),
                          gone_t)
        made_pos, gone_pos, made_t, gone_t = _one_cast_per_rerun(
            prep, (d, kd, made_pos, gone_pos), (t, kt, made_t, gone_t))
    out.add(made_pos, gone_pos, prep.nbytes[d], prep.cat[d])
    out.add(made_t, gone_t, prep.nbytes[t], prep.cat[t])
    # SAC: held from forward to its reuse, whatever its category
    h = np.flatnonzero(in_seg & ~dropped & (cr < seg.end[k]) & kept_cache)
    kh = k[h]
    out.f[0][h] = np.maximum(out.f[0][h], seg.start[kh] + (np.minimum(fr0[h], seg.end[kh])
                                                            - calls.ev0[kh]))
    # SAC: a cached output past the early stop is never handed back; the cache holds it
    # until the call's frame goes, with its backward (Rule 7)
    late = np.flatnonzero(kept_cache & (own.made >= 0) & (seg.bw_end[k] >= 0) & ~(
        in_seg & (cr < seg.end[k])))
    out.f[0][late] = np.maximum(out.f[0][late], seg.pos_f(seg.bw_end[k[late]]))
    # SAC around a call no backward goes through (a frozen block: peft LoRA on a CNN's
    # head alone): no re-run takes the cache, which goes with the checkpoint's frame as
    # the call's forward returns; until then it holds every save-list output (ResNet's
    # stages under `--lora`, selective: 1,261,440 B under measured when each went as
    # the forward let it go)
    idle = np.flatnonzero(kept_cache & (own.made >= 0) & ~in_seg & (seg.bw_end[k] < 0))
    out.f[0][idle] = np.maximum(out.f[0][idle], seg.pos_f(calls.ev1[k[idle]]))
    if restash.any():
        _restashed_rows(prep, calls, own, seg, restash, out)
    _first_pass_copies(prep, calls, own, d, out, seg, t, rng_bytes)


def _one_cast_per_rerun(prep: Prepared, *parts):
    """Note [Autocast's cache in a re-run] (trace/collector.py): in a re-run, autocast's
    cache lives to the end, so a parameter cast twice in forward (two autocast regions in
    one block) is cast once: per segment and parameter, the first re-made cast stands for
    the later ones, held as long as the longest of them; the later ones take no room.
    `parts`: (rows, segment, made, gone) of each group of re-made copies; returned as
    (made, gone) pairs in the same order."""
    rows = np.concatenate([p[0] for p in parts])
    seg_of = np.concatenate([p[1] for p in parts])
    made = np.concatenate([p[2] for p in parts])
    gone = np.concatenate([p[3] for p in parts])
    src = prep.acast_src[rows] if prep.acast_src is not None else np.full(len(rows), -1)
    cast = np.flatnonzero(prep.acast[rows] & (src >= 0))
    if len(cast) > 1:
        order = cast[np.lexsort((made[cast], src[cast], seg_of[cast]))]
        key = np.stack([seg_of[order], src[order]])
        first = np.concatenate([[True], (np.diff(key, axis=1) != 0).any(axis=0)])
        starts = np.flatnonzero(first)
        longest = np.maximum.reduceat(gone[order], starts)
        gone[order[starts]] = longest
        later = order[~first]
        gone[later] = made[later]
    out, at = [], 0
    for p in parts:
        n = len(p[0])
        out += [made[at:at + n], gone[at:at + n]]
        at += n
    return out


# Note [A re-run in each backward pass]
# torch's checkpoint re-runs a region once per backward pass that reads what it dropped
# (its frame keeps the re-made tensors per graph task: `frame.recomputed[gid]`), and the
# replay inserts one segment per call. Where two passes read the call's dropped
# storages, that segment serves the second, and `_first_pass_copies` prices what the
# first pass's re-run leaves behind. But a call can also drop a storage only the first
# pass reads: a force field's `forces = -autograd.grad(energy, pos, create_graph=True)`
# reads a block's fc output once (the loss's backward reads the copy the force graph
# saved), so that read, earlier, placed the segment in the first pass, whose copies were
# then held through the second, with no second re-run, and `_first_pass_copies` added
# the first pass's copies once more. e3nn's Gate (an ElementwiseTensorProduct over the
# sigmoid gates, tests/clients/train_e3nn.py --mode forces, 2 blocks of mul 4):
# `checkpoint:blocks.*` predicted 340,904 B against 271,920 B measured, `checkpoint:
# blocks.0` 313,648 against 287,984. One segment cannot price two re-runs, so such a call
# is NotPredicted: `predict` refuses it in one line, `measure` runs it and `compare`
# measures and judges it.
# Where both passes read what the call dropped (two plain passes: memory replay backprop's
# `loss.backward(retain_graph=True)` and then the memories' backward), the first pass's
# re-run makes those storages again and lets go of each as its reader in that pass
# returns; `_first_pass_copies` prices those copies (from the first pass's first read of
# the call to `pass1_end`). Priced nowhere before: `checkpoint:blocks.0` of
# tests/clients/train_backward_twice.py --mode mrbp was 9,984 B under measured. What the
# first re-run makes and frees within itself (a Linear's output before its Tanh) is still
# not priced: one segment per call; on recurrent-memory-transformer-pytorch's mrbp
# (2 segments, dim 16) `checkpoint:transformer.layers.0.0` reads 7,980 B under measured
# (41,000 B before).
# A storage the call dropped that a later call saves too (a hidden state carried
# undetached to the next chunk) is read through the call's own saves alone: Note [A
# dropped storage a later call reads in the second pass]. That Note also prices a storage
# only the first pass reads where its reads all came in a backward phase before the
# second pass's, none by a pass that builds a graph or saved again by a backward (the
# carried state under `prev * 1.0`, st-moe's router under a second `aux.backward()`):
# the second re-run makes it for no reader. What stays refused here is the shape above,
# a storage the first pass reads while building a graph that saves it again for the
# second (e3nn's forces; tests/clients/train_forces.py in plain torch).
def _refuse_rerun_per_pass(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
                           dropped: np.ndarray, policy: Policy) -> None:
    """Note [A re-run in each backward pass]: refuse a re-run call whose segment the first
    backward pass starts while a second pass reads what it dropped."""
    if prep.pass2 is None or not len(calls) or not seg.has.any():
        return
    trig = np.full(len(calls), -1, dtype=np.int64)
    trig[seg.order] = seg.at
    d = np.flatnonzero(dropped & (own.made >= 0))
    d = d[seg.has[own.made[d]]]
    if not len(d):
        _refuse_save_read_in_later_pass(prep, calls, trig, policy)
        return
    k = own.made[d]
    # a storage both passes read whose first read comes at or after the segment: the
    # segment is the first pass's, and the second pass re-runs the call again
    late = (prep.pass2[d] >= 0) & (prep.unpack_first[d] >= trig[k])
    if late.any():
        i = int(k[np.flatnonzero(late)[-1]])   # the last such call: backward meets it first
        raise NotPredicted(rerun_per_pass_message(policy.text(), str(calls.mods[i])))
    _refuse_save_read_in_later_pass(prep, calls, trig, policy)


# Note [A save a later pass reads again]
# torch's checkpoint re-runs a region in every backward pass that unpacks any of its saves,
# a weight's or an argument's too, not only what the region dropped. A region that drops
# nothing (DeepXDE's first layer, `Linear(1, 16)`: its output is saved by the tanh after
# it, its input is numpy's memory, its weight is model state) has its one segment where
# the first pass first unpacks one of its saves; the u_xx of a physics-informed network
# reads that weight's save again in the second `autograd.grad(create_graph=True)` and the
# residual's backward, and measure's checkpoint re-runs the layer there again, with a
# second RNG state for the fork, which no segment priced: `checkpoint:linears.0` was
# predicted 33,504 B against 33,616 B measured on tests/clients/train_deepxde.py's
# Poisson, 19,008 against 21,840 at width 8. The ledger names the save each unpack reads
# (`pack_reread_ev`: the first read beyond its saves); a save of a re-run call read again
# in a later backward phase than the call's segment, where graph-building passes read its
# storage twice (`graph_reads`), has the call re-run in a pass whose graph holds that
# re-run's tensors while a further pass re-runs it again, which one segment per call
# cannot price: NotPredicted, as above. A save read again by one plain pass after one
# graph-building pass (WGAN-GP's critic: the penalty's `autograd.grad(create_graph=True)`,
# then the loss's backward) stays priced, exact as before (tests/clients/
# test_loop_clients.py); so does a segment that serves the second pass (what the call
# dropped is read by both), which reads the weights' saves again in that same pass.
def _refuse_save_read_in_later_pass(prep: Prepared, calls: _Calls, trig: np.ndarray,
                                    policy: Policy) -> None:
    if prep.pack_reread_ev is None or prep.phase_bw_start is None or prep.graph_reads is None \
            or not len(prep.phase_bw_start) or not len(prep.pack_ev):
        return
    kp = _pack_call(prep, calls)
    graphs = (prep.graph_reads >= 2) | (prep.graph_reads < 0)
    again = np.flatnonzero((kp >= 0) & (prep.pack_reread_ev >= 0) & graphs[prep.pack_row])
    again = again[trig[kp[again]] >= 0]   # calls with a segment (re-run)
    if not len(again):
        return
    k, ev = kp[again], prep.pack_reread_ev[again]
    phase = np.searchsorted(prep.phase_bw_start, np.stack([trig[k], ev]), side="right") - 1
    later = np.flatnonzero(phase[1] > phase[0])
    if len(later):
        i = int(k[later[np.argmin(ev[later])]])   # the first a later pass meets
        raise NotPredicted(rerun_per_pass_message(policy.text(), str(calls.mods[i])))


# Note [A copy the force graph holds, let go with its node]
# A graph-building backward (`autograd.grad(create_graph=True)`: a force field's forces)
# saves what it ran with; under a checkpoint that is the first pass's re-run copy, which
# the built graph's node holds as one of its saves (`_first_pass_copies`' `saved_again`).
# A node's saves go when autograd lets go of the node, after it summed a broadcast
# gradient to its input's shape (`validate_outputs`: the unpack record's `val`, the event
# after the last such sum or cast), not when its apply returned (the record's `end`,
# which is when a checkpoint's re-made tensor goes: Note [When an unpacked tensor goes],
# trace/collector.py), nor at the next node's first op (`rel`: the engine's `add` of two
# gradients into one input runs between, with the node gone; read so, 880 B over). torchmd-net's TensorNet with forces, `checkpoint:
# representation_model.tensor_embedding` (tests/clients/train_torchmdnet.py, width 16):
# the embedding's `CZij` (70 edges x 16, float32, 4,480 B), re-made by the forces'
# pass and saved by its `mul` for the loss's backward, whose node then sums the gradient
# of the cutoff factor (70 x 1 x 16) before it is let go: the peak is that sum, and the
# copy went one event early: predicted 1,365,728 B against 1,370,208 B measured.
def _let_go_by_its_graph(prep: Prepared, bw: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per storage of `e` (saved again by a graph-building backward, `bw` per save): when
    the first pass's copy goes, its reader's node let go of (Note [A copy the force graph
    holds, let go with its node]); the first pass's end where that is not known."""
    end = prep.pass1_end[e].copy()
    if prep.pack_unpack_val is None or not len(e):
        return end
    k = np.flatnonzero(bw)
    val = np.full(len(prep.created), -1, dtype=np.int64)
    np.maximum.at(val, prep.pack_row[k], prep.pack_unpack_val[k])
    return np.maximum(end, val[e])


def _first_pass_copies(prep: Prepared, calls: _Calls, own: _Owners, d: np.ndarray,
                       out: _Lifetimes, seg: _Segments, t: np.ndarray | None = None,
                       rng_bytes: int = 0) -> None:
    """A call whose dropped storages two backward passes read has its segment in the
    second pass (`_segments`), but the first pass re-ran it too, and two kinds of that
    run's copies outlive the first pass: one a backward saved again (`_saved_in_backward`:
    the graph it built holds the copy until its reader in the second pass returned,
    `pass1_end`), and one the first pass never read (`autograd.grad` of one weight skips
    the other weights' branches: checkpoint's frame keeps that copy, by its save's holder,
    until the second pass's node unpacked it and returned); and, where both passes read a
    dropped storage, the first pass's copy of it, from that pass's re-run of the call
    until its reader there returned (`pass1_end`). Gradient penalty over
    checkpointed blocks (tests/clients/train_mech.py --case penalty): each block's
    first-pass tanh or GELU output, and the first LayerNorm's mean and rstd, 99,840 B
    under measured on two blocks before."""
    if prep.pass2 is None or not len(d):
        return
    k = own.made[d]
    t1 = np.full(len(calls), _BIG, dtype=np.int64)   # the first pass's re-run of each call
    np.minimum.at(t1, k, np.where(prep.unpack_first[d] >= 0, prep.unpack_first[d], _BIG))
    trig = np.full(len(calls), -1, dtype=np.int64)   # where its segment went
    trig[seg.order] = seg.at
    # a second pass reads what the call dropped, and the segment is there
    two = np.zeros(len(calls), dtype=bool)
    np.logical_or.at(two, k, prep.pass2[d] >= 0)
    two &= (t1 < trig) & (trig >= 0)
    bw = _saved_in_backward(prep)
    again = np.zeros(len(prep.created), dtype=bool)
    again[prep.pack_row[bw]] = True
    saved_again = again[d] & (prep.pass2[d] >= 0) & (prep.unpack_first[d] >= 0)
    unread = two[k] & (prep.unpack_first[d] >= trig[k]) & (prep.pass2[d] < 0)
    # read by both passes: the first pass's re-run made it again for its own reader
    both = two[k] & ~again[d] & (prep.pass2[d] >= 0) & (prep.unpack_first[d] >= 0) \
        & (prep.unpack_first[d] < trig[k])
    b = d[both]
    # a storage a later call saves too: the copy is the call's, read by its own nodes alone
    # (Note [A dropped storage a later call reads in the second pass])
    p1_end = np.where(own.first_save[b] != own.last_save[b],
                      _own_save_end(prep, calls, own)[b], prep.pass1_end[b])
    out.add(seg.pos_c(t1[k[both]]), seg.pos_f(np.maximum(p1_end, prep.unpack_first[b] + 1)),
            prep.nbytes[b], prep.cat[b])
    e = d[saved_again]
    out.add(seg.pos_c(prep.unpack_first[e]),
            seg.pos_f(np.maximum(_let_go_by_its_graph(prep, bw, e), prep.unpack_first[e] + 1)),
            prep.nbytes[e], prep.cat[e])
    u = d[unread]
    end = np.minimum(np.maximum(prep.unpack_end[u], prep.unpack[u] + 1), prep.freed[u])
    out.add(seg.pos_c(t1[k[unread]]), seg.pos_f(end), prep.nbytes[u], prep.cat[u])
    # read by the first pass alone, through the call's own save (Note [A dropped storage a
    # later call reads in the second pass]): that pass's copy, until its reader returned
    fo = d[two[k] & seg.first_only[d]] if seg.first_only is not None else d[:0]
    own_end = _own_save_end(prep, calls, own)[fo]
    out.add(seg.pos_c(t1[own.made[fo]]),
            seg.pos_f(np.maximum(own_end, prep.unpack_first[fo] + 1)), prep.nbytes[fo],
            prep.cat[fo])
    if t is not None:
        at_t1 = np.concatenate([b, u, fo, e[prep.unpack_first[e] == t1[own.made[e]]]])
        _first_rerun_transients(prep, calls, own, seg, (two, t1), (d, t, at_t1), out,
                                rng_bytes)
        _middle_pass_copies(prep, calls, own, seg, (d, t), trig, out, rng_bytes)


# Note [A re-run in each of N backward passes]
# Truncated BPTT with the hidden state carried undetached over N chunks, each chunk's
# backward with `retain_graph=True` (tests/clients/train_carried_hidden.py --chunks N):
# chunk c's layer is read by the passes of chunks c .. N-1, each a backward phase of its
# own, and torch's checkpoint re-runs it once per pass (a frame per graph task,
# `frame.recomputed[gid]`), as offload reads its saves back once per pass. Past two passes
# predict refused (Note [Read by three backward passes or more]) what measure ran:
# `--case plain --chunks 3` `checkpoint:layers.*` 78,404 B, `--chunks 4` 88,076 B. The
# two-pass reading, made general:
# - the call's one segment serves its last pass: it starts at the first read, through the
#   call's own saves, in the last backward phase those reads come in (`OwnReads.last_first`,
#   replay/passes.py), where `pass2` is the second pass's;
# - a storage read, through the call's own saves, only in phases before that one places
#   no segment (Note [A dropped storage a later call reads in the second pass]); its last
#   phase is read from all those reads, as `pack_reread_ev` names only a save's second
#   pass: read so, chunk 0's sigmoids (read by all three passes) were "first pass only",
#   the call lost its segment, and `--chunks 3 --keep` read 91,220 B against 94,028;
# - the first pass's re-run is `_first_pass_copies`' as before, and each pass between
#   the first and the last (`_middle_pass_copies`) re-runs the call at its first read
#   there of what the call dropped: a storage that pass reads has its copy until its
#   reader there returned; one it does not read but a later pass does, until that reader
#   returned (as the first pass's unread copy: its holder keeps it in the frame); one no
#   later pass reads, none, or, where its save's node outlives the re-run, a copy until
#   that node dies (`--keep`: each chunk's loss held to the step, so chunk 0's `out` node
#   keeps a copy of its input from each pass's re-run: without them `--chunks 4 --keep`
#   read 110,108 B against 116,252); and the re-run's own peak and RNG fork
#   (`_first_rerun_transients`).
# Each as measured (1 step; 2 steps too for `--case plain`'s `checkpoint:layers.*`):
# `--case plain --chunks 3` 78,404 B, `--chunks 4` 88,076, `--keep` 94,028 and 116,252,
# `--depth 2 --chunks 3` 117,396 (`checkpoint:layers.0` 112,212, `layers.1` 114,772),
# `--depth 2 --chunks 4` 136,484 (128,036 and 132,644); `--chunks 3` with `--case log`
# 78,380, `lse` 89,200, `log,exp` 80,684, `exp` 80,452; minGRU-pytorch's third chunk
# (tests/clients/train_peer_mingru.py --model rnn --no-detach --chunks 3 --seq-len 15, 2
# steps) 158,320, `offload:layers.*` 101,076. Offload needed nothing new (its read-back rounds are per pass already, Note
# [Rounds of a read-back, replayed]): `offload:layers.*` `--case log --chunks 3` 42,796,
# `lse` 57,392, `log,exp` 44,844, `exp` 42,812, as measured. torchjd's one backward per
# example (`parallel_chunk_size=1`) is priced so too (165,044 B both, the peak outside).
# Where it stops (`one_phase_per_pass`, replay/passes.py): the passes that read a save of
# the storage are as many as the backward phases its reads come in, one read per save a
# phase, every read inside a backward phase, none by a graph-building pass, none unnamed
# (a re-run of the script's own checkpoint). A power series of `autograd.grad` inside one
# forward (normflows' residual flow) and passes a node's backward runs inside another
# (torchjd's autogram engine: Note [Passes inside one backward phase], replay/prepared.py)
# stay refused, and so does selective (one backward pass only).
def _middle_pass_copies(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
                        rows: tuple[np.ndarray, np.ndarray], trig: np.ndarray,
                        out: _Lifetimes, rng_bytes: int) -> None:
    """Note [A re-run in each of N backward passes]: per call whose dropped storages three
    backward phases or more read through its own saves, the re-run of each pass between
    its first (`_first_pass_copies`) and the one its segment serves: per dropped storage,
    a copy from that re-run until its reader in the pass returned; one the pass does not
    read but a later pass does, until that later reader returned (its holder keeps it in
    the frame); one no later pass reads, none, or until its save's node died where that
    outlives the re-run; and the re-run's own peak and RNG fork (`_first_rerun_transients`).
    `rows`: the rows the segment re-makes, dropped and not (`_recomputed_rows`)."""
    reads = seg.own_reads
    d, t = rows
    if reads is None or not len(d) or not (reads.last_first[d] >= 0).any():
        return
    m = len(calls)
    ours = np.zeros(len(prep.created), dtype=bool)
    ours[d] = True
    sel = ours[reads.row]
    row, phase, ev, end = reads.row[sel], reads.phase[sel], reads.ev[sel], reads.end[sel]
    k = own.made[row]
    starts = prep.phase_bw_start
    first_phase = np.full(m, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_phase, k, phase)
    seg_phase = np.searchsorted(starts, np.where(trig >= 0, trig, 0), side="right") - 1
    middle = (phase > first_phase[k]) & (phase < seg_phase[k]) & (trig[k] >= 0)
    if not middle.any():
        return
    node = _own_node_end(prep, calls, own)
    for kk, p in sorted(set(zip(k[middle].tolist(), phase[middle].tolist()))):
        here = middle & (k == kk) & (phase == p)
        t_j = int(ev[here].min())
        mine = d[own.made[d] == kk]
        read_end = np.full(len(prep.created), -1, dtype=np.int64)
        np.maximum.at(read_end, row[here], end[here])
        got = read_end[mine] >= 0
        later = reads.last[mine] > p
        unread_end = np.minimum(np.maximum(prep.unpack_end[mine], prep.unpack[mine] + 1),
                                prep.freed[mine])
        gone = np.where(got, read_end[mine], np.where(later, unread_end, node[mine]))
        keep = got | later | (node[mine] > t_j)
        at = mine[keep]
        made = np.full(len(at), t_j, dtype=np.int64)
        out.add(seg.pos_c(made), seg.pos_f(np.maximum(gone[keep], t_j + 1)),
                prep.nbytes[at], prep.cat[at])
        two = np.zeros(m, dtype=bool)
        two[kk] = True
        tj = np.full(m, _BIG, dtype=np.int64)
        tj[kk] = t_j
        _first_rerun_transients(prep, calls, own, seg, (two, tj), (d, t, at), out, rng_bytes)


# Note [The first pass's re-run, inside itself]
# Where two backward passes read what a call dropped, its one segment serves the second
# pass, and `_first_pass_copies` prices what the first pass's re-run leaves behind (the
# copies, from that re-run on). But that re-run also makes, inside itself, what it lets go
# of before it returns: an ANI potential's neighbor list (torchani's `AllPairs` under
# `checkpoint:aev.neighborlist`: the padding mask, `nonzero`, the detached `index_select`
# of both ends of each pair and their difference, its norm, then the same of the pairs in
# the cutoff), re-run by the force pass's `autograd.grad(create_graph=True)` at the norm's
# backward, and again by the loss's backward. None of that was priced: 270,081 B
# predicted against 272,297 B measured (tests/clients/train_torchani.py, 8 molecules of 8
# atoms, width 4, one step), 145,040 against 149,956 at 8 x 6 on the second step; the
# level the re-run starts from was right to the byte, and the re-run climbed 19,500 B over
# it, with the RNG state its fork saves (5,056 B on CPU, Rule 4) beside. Each such call's
# first re-run is now priced as two rows at its start: the peak of the re-run inside
# itself (what the segment would make, each row made where its original was and gone
# where the segment lets it go; what the call dropped stays to the end) above the copies
# `_first_pass_copies` already holds from that point, and the fork. What the first pass's
# backward does after its re-run (the angular terms' nodes, with the copies) is not this:
# `checkpoint:aev.angular` still reads 2,572 B under measured at 16 x 8, peaking there.
def _first_rerun_transients(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
                            first: tuple[np.ndarray, np.ndarray],
                            rows: tuple[np.ndarray, np.ndarray, np.ndarray], out: _Lifetimes,
                            rng_bytes: int) -> None:
    """Note [The first pass's re-run, inside itself]: per call in `two` (its segment in
    the second pass, re-run by the first too at `t1`), the peak of that re-run over the
    copies priced from `t1` on (`at_t1`: rows of `_first_pass_copies` made there), and the
    RNG state the re-run forks (Rule 4), each a row at `t1`. `d`, `t`: the rows the
    segment re-makes, dropped and not (`_recomputed_rows`)."""
    two, t1 = first
    d, t, at_t1 = rows
    ks = np.flatnonzero(two)
    if not len(ks):
        return
    cr, fr0, nb = prep.created, prep.freed, prep.nbytes
    kd, kt = own.made[d], own.made[t]
    held = np.bincount(own.made[at_t1], weights=nb[at_t1], minlength=len(calls)) \
        if len(at_t1) else np.zeros(len(calls))
    made_at, size = [], []
    for k in ks:
        e0, e1 = int(calls.ev0[k]), int(seg.end[k])
        rd, rt = d[kd == k], t[kt == k]
        rd, rt = rd[cr[rd] < e1], rt[cr[rt] < e1]
        c = np.concatenate([cr[rd], cr[rt]]) - e0
        f = np.concatenate([np.full(len(rd), e1), np.minimum(fr0[rt], e1)]) - e0
        w = np.concatenate([nb[rd], nb[rt]]).astype(np.float64)
        n = max(e1 - e0 + 1, 1)
        curve = np.cumsum(np.bincount(c, weights=w, minlength=n + 1)[:n]
                          - np.bincount(np.maximum(f, c), weights=w, minlength=n + 1)[:n])
        made_at.append(int(seg.pos_c(np.array([t1[k]]))[0]))
        size.append(max(int(round(curve.max() - held[k])), 0))
    if made_at:
        c = np.array(made_at, dtype=np.int64)
        out.add(c, c + 1, np.array(size, dtype=np.int64), CATEGORIES.index("temporary"))
        if rng_bytes:
            out.add(c, c + 1, np.full(len(c), rng_bytes, dtype=np.int64), OTHER)


def _own_save_end(prep: Prepared, calls: _Calls, own: _Owners) -> np.ndarray:
    """Per storage: when the node that unpacked the save of the call that made it returned
    (-1: no such save). A storage a re-run call makes and saves, and a node outside saves
    too, is kept, not dropped; the re-run makes it again and packs it again for its own
    node, which holds that copy until it returns (Rule 3). DiT's output layer calls the
    first block's embedding again, taking its linear's bf16 weight cast from autocast's
    cache: `checkpoint:transformer_blocks.*` under bf16 let the re-made cast (512 B) go at
    the early stop, 512 B under measured."""
    end = np.full(len(prep.created), -1, dtype=np.int64)
    if (mine := _own_read_packs(prep, calls, own)) is not None:
        np.maximum.at(end, prep.pack_row[mine], np.maximum(prep.pack_unpack[mine] + 1,
                                                           prep.pack_unpack_end[mine]))
    return end


def _own_read_packs(prep: Prepared, calls: _Calls, own: _Owners) -> np.ndarray | None:
    """Per pack: a save, read in backward, by the call that made its storage (None: no
    packs or no calls)."""
    if prep.pack_ev is None or not len(prep.pack_ev) or not len(calls):
        return None
    kp = _pack_call(prep, calls)
    return (kp >= 0) & (kp == own.made[prep.pack_row]) & (prep.pack_unpack >= 0)


def _own_node_end(prep: Prepared, calls: _Calls, own: _Owners) -> np.ndarray:
    """Per storage: when the last node that holds a save of it by the call that made it
    died (a kept graph's let-go, else autograd's release of the node that unpacked it;
    -1: no such save read). The checkpoint frame keeps a re-run's copy for a live save's
    holder (Note [A re-made save no backward reads])."""
    end = np.full(len(prep.created), -1, dtype=np.int64)
    if (mine := _own_read_packs(prep, calls, own)) is None:
        return end
    node = np.maximum(prep.pack_unpack_end, prep.pack_unpack_rel
                      if prep.pack_unpack_rel is not None else prep.pack_unpack_end)
    if prep.pack_let_go is not None:
        node = np.maximum(node, prep.pack_let_go)
    np.maximum.at(end, prep.pack_row[mine], node[mine])
    return end


def _restashed_rows(prep, calls, own, seg, restash: np.ndarray, out: _Lifetimes) -> None:
    """Rule 10: a tensor a call keeps as a plain attribute of its module (a pruned weight,
    Note [Tensors a call keeps on its module] in trace/collector.py) is made again by the
    call's re-run, which sets the attribute again: the one forward made goes right after
    its op in the re-run, and the re-made one stays (the module holds it) until the one
    forward made would have gone, the next forward's. Two blocks whose fc1 is pruned
    (`l1_unstructured`, a (128, 32) fp32 weight, 16,384 B): `checkpoint:blocks.*` was
    predicted with both copies live through each block's backward, 16,384 B over measured
    (tests/clients/train_mech.py --case prune)."""
    cr, fr0 = prep.created, prep.freed
    r = np.flatnonzero(restash)     # `_restashed`, computed once by the caller
    kr = np.maximum(own.made, 0)[r]
    at = seg.start[kr] + (cr[r] - calls.ev0[kr])
    out.f[0][r] = np.minimum(out.f[0][r], at + 1)
    # the re-made copy (Rule 3 left it out: `_restashed`) lives on as the module's attribute
    out.add(at, np.maximum(seg.pos_f(fr0[r]), at + 1), prep.nbytes[r], prep.cat[r])


def _kept_remakes(prep, calls, own,
                  restash: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rule 10's second half: per call, the latest creation and the latest original free
    (-1: none) of the storages its re-run makes again and the script keeps in a container
    of its own. The re-made copy was made with gradients on, and its `grad_fn` holds what
    the re-run saved before it, the region's input too, for as long as the script keeps
    the copy: three blocks whose ReLU output the script keeps (`acts[name] = h`),
    `checkpoint:blocks.*`: each block's re-run LayerNorm output, mean and rstd and its
    input stayed until the next forward, 159,936 B under measured when they went with the
    block's backward. A module attribute (`stash`) only when its graph runs deeper than
    one op on leaves (`stashed_graph`): a pruned weight (`weight_orig * mask`, made by a
    pre-hook) reaches no save of the re-run; a ReLU output kept as `self.h` was 159,936 B
    under measured. Third, per call: `walked`, where every such copy is a module attribute
    whose record names the saves its graph holds (`stash_reach`): only those are held.
    RecurrentGemma's RG-LRU keeps its scan's last state (`self.recurrent_states`), whose
    graph reaches the scan and the gates, not the layer's other branch (the GELU of
    `linear_y`): holding every save made before it read `checkpoint:model.layers.*`
    393,184 B over measured."""
    n = len(calls.ev0)
    last_cr, keep_to = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    if prep.stashed is not None:
        restash = restash & ~(prep.stashed & ~prep.stashed_graph)
    if prep.kept_plain is not None:   # Note [A buffer kept without a graph]
        restash = restash & ~prep.kept_plain
    r = np.flatnonzero(restash)
    walked = np.zeros(n, dtype=bool)
    if len(r):
        np.maximum.at(last_cr, own.made[r], prep.created[r])
        np.maximum.at(keep_to, own.made[r], prep.freed[r])
        if prep.stash_walked is not None:
            unwalked = np.zeros(n, dtype=bool)
            np.logical_or.at(unwalked, own.made[r], ~prep.stash_walked[r])
            walked[np.unique(own.made[r])] = True
            walked &= ~unwalked & _is_recomputed(calls.kind)
    return last_cr, keep_to, walked


# Note [A buffer kept without a graph]
# Rule 10's second half holds a re-run's saves for as long as the script keeps the re-made
# copy, because that copy's `grad_fn` holds them. A buffer the call makes and registers on
# its module (PaLM's rotary cache, `register_buffer("pos_emb_scale", ...)` on the first
# call; its attention's causal mask) is held into backward (`held`: the module keeps it to
# the end of the run), but it is made from other buffers, or is a bool mask: no graph, so
# it holds none of the re-run's saves. Read as one that does, `checkpoint:layers.0.fn`
# on a 2-layer PaLM (tests/clients/train_palm_rlhf.py, `--steps 1`) kept the re-run's
# saves to the end of the run: predicted 356,810 B against 324,282 B measured (32,528 B
# per block, 389,338 B for `checkpoint:layers.*`). The `kept` record now names those of
# its buffers whose graph runs deeper than one op on leaves (`graph`, as a `stash` record
# does, trace/collector.py `_deep_graph`); the others hold nothing. Older ledgers, whose
# `kept` records have no `graph`, read as before.


# Note [Kept by a call inside the region]
# Rule 10 re-makes a stashed storage in the re-run because the re-run runs the line that
# keeps it (`self.h = h`). That holds only where the call that keeps it runs inside the
# region: a model that appends a block's output to its own list (`self.kept.append(h)`
# between blocks, tests/clients/train_random.py `residual_keep`) keeps it in a line no
# re-run of the block runs, and `checkpoint:blocks.1` read it re-made and held: 126,004 B
# under measured once container attributes were read (trace/outside_state.py
# `attribute_tensors`). The innermost call that kept the storage must lie inside the
# re-run call (MONAI's DynUNet: the skip layer inside `skip_layers` that writes the head,
# while the model, which holds the same list, is outside). Older ledgers' stash records
# have no end: read as before.
def _stashed_inside(prep, calls, k: np.ndarray) -> np.ndarray:
    """Per storage (made by call `k`): stashed, by a call that lies inside call `k`."""
    if prep.stash_ev0 is None:
        return prep.stashed
    e0, e1 = prep.stash_ev0, prep.stash_ev1
    return prep.stashed & ((e1 < 0) | ((e0 >= calls.ev0[k]) & (e1 <= calls.ev1[k])))


# Note [What a call hands back]
# A storage the script holds into backward and no forward op reads after the call that
# made it returned was read as kept by a line of the call's own code (`acts[name] = h`),
# which its re-run runs again: the re-made copy held, and through its graph the re-run's
# saves, to the next forward. A call's output the caller keeps unread is the caller's:
# pytorch-forecasting's TemporalFusionTransformer hands each variable selection network's
# softmax weights back and puts them in the model's output (`encoder_variables`), which a
# loop written by hand keeps (`out = model(x)`) to the next step's forward. The re-run's
# copy goes with the region's backward, as measure's checkpoint frees it:
# `checkpoint:encoder_variable_selection` (tests/clients/train_pf.py --model tft --loop
# hand, 2 steps) was predicted 949,452 B, above the baseline's 941,324 B, against
# 766,848 B measured. The collector now writes what each call hands back (`ret` records:
# the storages its output holds that it made); a storage handed back by the call or by a
# call around it is left to Rule 3. An attribute the call keeps it in (`self.h = h;
# return h`) still re-makes it (`stashed`); older ledgers, without `ret`, read as before.
#
# Note [Held by a container the region made]
# A `stateful` record names what a call stored into an object it was handed (Note [State
# written outside a region], trace/outside_state.py), and those storages read as `held`:
# outside *that call*. A region around the call may have made the object itself: a body
# that builds a dict {h, v} and hands it to each block, which replaces both entries. The
# re-run builds its own dict, whose copies go with it at the early stop (Rule 3), not
# into an object that outlives the region (Rule 10). What the forward let go of by the
# region's return had no holder outside it, so it is left to Rule 3. A side output the
# loss drops (`v`, kept by the next block's `list(feats.items())` to its return, as
# se3-transformer's EGNN keeps `htypes`) was read as kept by the script and its re-made
# copy let go as it was made: tests/clients/train_side.py --depth 2, `checkpoint:0`,
# 535,944 B predicted against 568,712 B measured (one (128, 64) fp32 tensor under);
# se3-transformer-pytorch with its EGNN trunk, `checkpoint:se3`, 1,394,264 against
# 1,395,800 B. A module attribute (`stashed`) is the module's, which outlives any region:
# unchanged.
def _restashed(prep, calls, own, seg) -> np.ndarray:
    """Per storage: Rule 10 re-makes it (not Rule 3): kept as its module's attribute, or
    held by the script into backward (`acts[name] = h` in the region's code: the re-run
    runs that line again). Not what the call hands back to code that reads it after the
    call returned: there the caller keeps it (`hidden_states += (h,)` around a layer), a
    line no re-run runs again, and the re-run's copy goes as Rule 3 says. A random model
    keeping a block's output for the step (tests/clients/train_random.py,
    `residual_keep`): `checkpoint:blocks.*` held the re-made copy and, through its graph,
    the block's input to the next forward, 131,072 B over measured."""
    held = _held(prep)
    if not held.any() and (prep.stashed is None or not prep.stashed.any()) or not len(calls):
        return np.zeros(len(prep.created), dtype=bool)
    k = np.maximum(own.made, 0)
    fwd_last = np.where(prep.fwd_last >= 0, prep.fwd_last, prep.last_use)
    held = held & (fwd_last < calls.ev1[k])   # read after the call: its caller's to keep
    # gone by the call's return: what held it went with the call (Note [Held by a
    # container the region made])
    held &= prep.freed > calls.ev1[k]
    if prep.returned_ev0 is not None:   # Note [What a call hands back]
        held &= ~((prep.returned_ev0 >= 0) & (prep.returned_ev0 <= calls.ev0[k]))
    kept = held if prep.stashed is None else (_stashed_inside(prep, calls, k) | held)
    return kept & (own.made >= 0) & seg.has[k] & (prep.created < seg.end[k]) & \
        _is_recomputed(calls.kind[k])


# Note [A handed-back save no backward reads]
# Rule 8 ends a save-list output that SAC's cache hands the re-run where the node that
# unpacked it returns. But the re-run packs every save of the call again and keeps each
# copy in the checkpoint frame's `recomputed` until its holder unpacks it (Note [A re-made
# save no backward reads]); a handed-back output is the original storage itself, so a
# save of it no backward unpacks keeps it for as long as that save's node lives.
# infini-transformer-pytorch with the delta rule (`use_mem_delta_rule`,
# `learned_delta_update`) writes each attention layer's next memory from its `to_qkv`
# output (an `mm`, on the default save list) on a branch no loss reaches, and the README's
# wrapper calls `backward()` inside its forward while it holds the last segment's new
# memories: measure's layer 1.0 re-run handed back its (16, 48) fp32 qkv (3,072 B), which
# the frame held for the memory branch's nodes to the step's end, through layer 0.0's
# re-run where the peak is; the replay let it go as the loss path's node that unpacked
# it returned.
# `selective:@CausalAttention` (tests/clients/train_infini.py --mode wrapper --delta
# --learned-delta --segments 2, 1 step) was predicted 713,196 B against 715,084 B
# measured. A handed-back output with a save never unpacked whose node outlives the re-run
# (`_unread_holder_end` past the call's segment, or past the output's unpack for a call
# that drops nothing) keeps its baseline free. In plain torch:
# tests/clients/train_unread_handback.py (each of two layers' `fc` output saved by its
# `sin` and by a memory's `cos`), `selective:layers.*` 49,032 B against 51,080 B before.
def _handed_back_rows(prep: Prepared, own: _Owners, seg: _Segments, handed: np.ndarray,
                      out: _Lifetimes) -> None:
    """Rule 8: a save-list output the re-run takes back from SAC's cache goes when the node
    that unpacked it last returns, or at its own free if sooner. The re-run packs every
    save of the call again before its early stop, so it reaches this output's op whether
    or not the call drops anything (a segment). An output that a node alive past the
    re-run saved and never unpacks stays (Note [A handed-back save no backward reads])."""
    fr0 = prep.freed
    h = np.flatnonzero(handed & (own.made >= 0))
    end = prep.unpack_end[h]
    sooner = (end >= 0) & (end < fr0[h]) & (end > prep.unpack[h])
    # ... unless a save of it no backward reads has its node alive at the re-run: the
    # frame keeps the re-run's copy, this very storage, for that node until it dies
    # (Note [A handed-back save no backward reads])
    k = own.made[h]
    rerun = np.full(len(seg.has), -1, dtype=np.int64)
    rerun[seg.order] = seg.at
    rerun = np.where(seg.has[k], rerun[k], prep.unpack[h])
    sooner &= ~(_unread_holder_end(prep)[h] > rerun)
    out.f[0][h[sooner]] = seg.pos_f(end[sooner])


def _cached_in_kept_graph(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
                          kept: tuple[np.ndarray, np.ndarray, np.ndarray],
                          cached: np.ndarray, out: _Lifetimes) -> None:
    """Rule 10 under selective: a re-run's copy that the module keeps (`_kept_remakes`,
    walked) holds, through its graph, the save-list outputs SAC's cache handed the re-run
    and the re-run saved again, until the module lets the copy go. RecurrentGemma's
    `linear_x` and conv outputs, under `selective:model.layers.*`: 268,288 B under
    measured when they went with their node."""
    r = np.flatnonzero(cached & (own.made >= 0))
    k = own.made[r]
    held = _in_kept_graph(prep, kept, r, k)
    r, k = r[held], k[held]
    out.f[0][r] = np.maximum(out.f[0][r], seg.pos_f(np.maximum(kept[1][k], 0)))


def _in_kept_graph(prep: Prepared, kept: tuple[np.ndarray, np.ndarray, np.ndarray],
                   rows: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per row (made by call `k`): in the graph of a copy that call's re-run makes later and
    its module keeps, as the walk found it (`_kept_remakes`' `walked`, `stash_reach`)."""
    last_cr, _, walked = kept
    return walked[k] & (last_cr[k] > prep.created[rows]) & _in_reach(prep, rows)


def _cached_cast_rows(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
                      out: _Lifetimes) -> None:
    """Rule 9: a parameter's autocast cast that one call made and later calls of the same
    module took from autocast's cache is cast again by each later call's re-run.

    Candidates: a `_to_copy` output made inside a call, used after that call ended (its
    last forward use: the `fwdlast` record, else its last use) and gone from forward's
    cache before backward (`released`). A later call B of the same module, re-run, whose
    span starts by that last use and that was not handed the storage as an argument,
    re-makes it: in B's segment where B's own events resume after the cast (B ran none of
    the casts its first call made, so its offsets are the first call's less the cached
    casts before), until the node that unpacked B's save of it returns, or the re-run's
    end (the re-run's autocast region holds it in its cache until then)."""
    if prep.last_use is None or not len(calls):
        return
    cr = prep.created
    rel = prep.released if prep.released is not None else np.full(len(cr), -2, np.int64)
    rel = np.where((rel == -2) & (prep.saved_first < 0), prep.freed, rel)   # a bias's cast
    cand, pair = _cast_reusers(prep, calls, own,
                               (rel >= 0) & _is_recomputed(calls.kind[np.maximum(own.made, 0)]),
                               _is_recomputed(calls.kind) & seg.has)
    if pair is None:
        return
    pair &= seg.pos_f(rel[cand])[:, None] <= seg.start[None, :]
    if not pair.any():
        return
    ca = own.made[cand]
    # the casts the first call made before this one, and B took from the cache too
    before = np.cumsum(pair, axis=0) - pair
    first_of_call = np.searchsorted(ca, ca, side="left")
    j = before - before[first_of_call]
    ci, kb = np.nonzero(pair)
    off = cr[cand[ci]] - calls.ev0[ca[ci]] - j[ci, kb]
    keep = off < seg.length[kb]        # past the early stop: not re-made
    ci, kb, off = ci[keep], kb[keep], off[keep]
    seg_end = seg.start[kb] + seg.length[kb]
    gone = seg_end.copy()
    if prep.pack_row is not None and len(prep.pack_row):
        kp = _pack_call(prep, calls)
        slot = _position_in(cand, prep.pack_row)
        ok = (kp >= 0) & (slot >= 0) & (prep.pack_unpack_end >= 0)
        end = np.full(pair.shape, -1, dtype=np.int64)
        np.maximum.at(end, (slot[ok], kp[ok]), seg.pos_f(prep.pack_unpack_end[ok]))
        gone = np.maximum(gone, end[ci, kb])
    rows = cand[ci]
    out.add(seg.start[kb] + off, gone, prep.nbytes[rows], prep.cat[rows])


def _saves_of_casts_from_another_call(prep: Prepared, calls: _Calls,
                                      own: _Owners) -> np.ndarray:
    """The save records (indices) by which a re-run call saved a parameter's cast that an
    earlier call of another module made and autocast's cache handed on
    (`_cast_from_another_call`)."""
    if prep.acast is None or prep.pack_row is None or not len(prep.pack_row) or \
            not len(calls):
        return np.zeros(0, dtype=np.int64)
    kp = _pack_call(prep, calls)
    k = np.maximum(kp, 0)
    r = prep.pack_row
    maker = own.made[r]
    return np.flatnonzero(
        (kp >= 0) & prep.acast[r] & _is_recomputed(calls.kind[k]) &
        (prep.pack_unpack >= 0) & (prep.created[r] < calls.ev0[k]) &
        ((maker < 0) | (calls.mods[np.maximum(maker, 0)] != calls.mods[k])))


def _cast_from_another_call(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments,
                            out: _Lifetimes) -> None:
    """Note [Autocast's cache in a re-run] (trace/collector.py): a re-run call B saved a
    parameter's cast that autocast's cache handed it from an earlier call of another
    module (a Linear shared by two blocks, the whole forward under one autocast region):
    its re-run, in backward, finds the cache empty and casts again, at that save, held to
    the re-run's end or until the node that unpacked B's save returns. Rule 9
    (`_cached_cast_rows`) keeps the case of an earlier call of B's own module. Blocks 0
    and 1 calling one shared Linear under `--amp --accum 2`: `checkpoint:blocks.*` was
    2,048 B (the bf16 weight) under measured (tests/clients/train_random.py, deep seed 94)."""
    idx = _saves_of_casts_from_another_call(prep, calls, own)
    if not len(idx):
        return
    kp, r = _pack_call(prep, calls), prep.pack_row
    # one cast per re-run call and storage, at its first save there
    idx = idx[np.lexsort((prep.pack_ev[idx], r[idx], kp[idx]))]
    first = np.concatenate([[True], (np.diff(kp[idx]) != 0) | (np.diff(r[idx]) != 0)])
    kb = kp[idx]
    off = prep.pack_ev[idx] - calls.ev0[kb]
    end = np.where(prep.pack_unpack_end[idx] >= 0, seg.pos_f(np.maximum(
        prep.pack_unpack_end[idx], 0)), -1)
    # the latest unpack of each group, on its first row
    starts = np.flatnonzero(first)
    end_g = np.maximum.reduceat(end, starts)
    idx, kb, off = idx[starts], kb[starts], off[starts]
    # a call that drops nothing has no segment, and its re-run, at that save's unpack,
    # makes little besides the cast
    has = seg.has[kb]
    keep = ~has | (off < seg.length[kb])        # past the early stop: not re-made
    idx, kb, off, end_g, has = idx[keep], kb[keep], off[keep], end_g[keep], has[keep]
    at_unpack = seg.pos_c(prep.pack_unpack[idx])
    made = np.where(has, seg.start[kb] + off, at_unpack)
    gone = np.maximum(np.where(has, seg.start[kb] + seg.length[kb], at_unpack + 1), end_g)
    rows = r[idx]
    out.add(made, gone, prep.nbytes[rows], prep.cat[rows])


def _cast_reusers(prep: Prepared, calls: _Calls, own: _Owners, cand_ok,
                  later: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Rule 9's pairs, for `_cached_cast_rows` and `_refuse_selective_recast`: the
    candidates (a `_to_copy` output made inside a call and used after it ended, by its
    last forward use, else its last use; `cand_ok` narrows them), in creation order, and
    per candidate and call whether that call is a later call of the same module among
    `later`, starting by that last use, that was not handed the storage as an argument
    (handed, B's frame holds it and B casts nothing). (empty, None) without candidates."""
    is_cast = np.isin(prep.op_code, np.flatnonzero(prep.op_names == "_to_copy"))
    a = own.made
    fl = np.where(prep.fwd_last >= 0, prep.fwd_last, prep.last_use)
    cand = np.flatnonzero(is_cast & (a >= 0) & (fl >= calls.ev1[np.maximum(a, 0)]) & cand_ok)
    if not len(cand):
        return cand, None
    cand = cand[np.argsort(prep.created[cand], kind="stable")]
    ca = a[cand]
    pair = (calls.mods[None, :] == calls.mods[ca][:, None]) & later[None, :] & (
        calls.ev0[None, :] >= calls.ev1[ca][:, None]) & (
        calls.ev0[None, :] <= fl[cand][:, None])
    if prep.arg_row is not None and len(prep.arg_row):
        kb = which_call(calls.ev0, calls.ev1, prep.arg_ev0, prep.n_events)
        slot = _position_in(cand, prep.arg_row)
        ok = (kb >= 0) & (slot >= 0)
        pair[slot[ok], kb[ok]] = False
    return cand, pair


def _position_in(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Index of each of `values` in `rows` (distinct), -1 where absent."""
    if not len(rows):
        return np.full(len(values), -1, dtype=np.int64)
    o = np.argsort(rows, kind="stable")
    i = np.clip(np.searchsorted(rows[o], values), 0, len(rows) - 1)
    return np.where(rows[o][i] == values, o[i], -1)


def _rng_rows(calls: _Calls, seg: _Segments, rng_bytes: int, out: _Lifetimes) -> None:
    """Rule 4: each checkpointed call's RNG state until its backward ends, and the fork
    while it is recomputed."""
    ck = np.flatnonzero(_is_recomputed(calls.kind))
    end = np.where(seg.bw_end[ck] >= 0, seg.bw_end[ck], calls.ev1[ck])
    out.add(seg.pos_c(calls.ev0[ck]), seg.pos_f(end), np.full(len(ck), rng_bytes), OTHER)
    s = ck[seg.has[ck]]
    out.add(seg.start[s], seg.start[s] + seg.length[s], np.full(len(s), rng_bytes), OTHER)
    # a re-run that stops before its first op forks between two slots: `_fork_slots`


def _fork_slots(seg: _Segments, rng_bytes: int) -> np.ndarray:
    """Note [A re-run that stops before its first op]: the slots (new numbering) of the
    events whose unpack re-runs a call that stops before its first op. Its fork lives just
    before the slot's event, after the frees that land there: `pre` in `replay`."""
    if seg.empty_at is None or not rng_bytes:
        return np.zeros(0, dtype=np.int64)
    return np.unique(seg.pos_c(seg.empty_at[seg.empty_at >= 0]))


def _running_stats_rows(prep: Prepared, calls: _Calls, seg: _Segments,
                        out: _Lifetimes) -> None:
    """`measure` copies the running statistics of every training BatchNorm a re-run calls,
    and lets go of the copy when the re-run ends (Note [BatchNorm under recompute],
    measure/apply.py): once per module, however often the region calls it. peft LoRA on a
    conv net peaked inside such a re-run 136 B (2 x 16 channels x 4 B + 8 B) over the
    replay before."""
    if prep.scope_stats is None or not len(calls):
        return
    bn = np.flatnonzero(prep.scope_stats > 0)
    if not len(bn):
        return
    k = np.searchsorted(calls.ev0, prep.scope_ev0[bn], side="right") - 1   # enclosing call
    inside = (k >= 0) & (prep.scope_ev0[bn] < calls.ev1[np.maximum(k, 0)])
    bn, k = bn[inside], k[inside]
    k_mod = np.unique(np.stack([k, prep.scope_code[bn]]), axis=1, return_index=True)[1]
    per_call = np.bincount(k[k_mod], weights=prep.scope_stats[bn][k_mod],
                           minlength=len(calls)).astype(np.int64)
    s = np.flatnonzero(_is_recomputed(calls.kind) & seg.has & (per_call > 0))
    out.add(seg.start[s], seg.start[s] + seg.length[s], per_call[s], BUFFER)


def _scratch_rows(prep: Prepared, calls: _Calls, seg: _Segments, out: _Lifetimes,
                  policy: Policy | None = None) -> None:
    """Kernel scratch (Note [Kernel scratch]) for one event, and again where it is re-run:
    not for an op a selective part keeps, whose kernel the re-run does not call (its output
    comes from the cache: T5's bf16 `wo` mm, 7,168 B)."""
    se, sb = prep.scratch_ev, prep.scratch_bytes
    if not len(se):
        return
    out.add(seg.pos_c(se), seg.pos_c(se) + 1, sb, WORKSPACE)
    if len(calls):
        ks = which_call(calls.ev0, calls.ev1, se, prep.n_events)
        kk = np.maximum(ks, 0)
        rr = (ks >= 0) & seg.has[kk] & (se < seg.end[kk])
        if policy is not None and (calls.kind == Kind.SELECTIVE).any():
            ev_op = np.full(prep.n_events + 1, -1, dtype=np.int64)
            ev_op[prep.created] = prep.op_code
            for i, p in enumerate(policy.parts):
                if p.kind is PolicyKind.SELECTIVE:
                    rr &= ~((calls.kind[kk] == Kind.SELECTIVE) & (calls.part[kk] == i)
                            & np.isin(ev_op[se], _save_codes(prep, p)))
        rr = np.flatnonzero(rr)
        at = seg.start[ks[rr]] + (se[rr] - calls.ev0[ks[rr]])
        out.add(at, at + 1, sb[rr], WORKSPACE)


def _rewrapped_rows(prep: Prepared, calls: _Calls, seg: _Segments, out: _Lifetimes,
                    policy: Policy) -> None:
    """Selective checkpoint runs its region's forward and re-run under dispatch modes of its
    own, which wrap each Python number an op takes for a Tensor argument a second time
    (Note [Numbers wrapped again under a dispatch mode], trace/scalars.py): those bytes once
    more for one event at the op, in forward and where the re-run calls the op's kernel
    (not a save-list op, handed back from the cache: `_scratch_rows`)."""
    we, wb = prep.rewrap_ev, prep.rewrap_bytes
    if we is None or not len(we) or not len(calls) or not (calls.kind == Kind.SELECTIVE).any():
        return
    k = which_call(calls.ev0, calls.ev1, we, prep.n_events)
    kk = np.maximum(k, 0)
    sel = (k >= 0) & (calls.kind[kk] == Kind.SELECTIVE)
    f = np.flatnonzero(sel)
    out.add(seg.pos_c(we[f]), seg.pos_c(we[f]) + 1, wb[f], WORKSPACE)
    rr = sel & seg.has[kk] & (we < seg.end[kk])
    ev_op = np.full(prep.n_events + 1, -1, dtype=np.int64)
    ev_op[prep.created] = prep.op_code
    for i, p in enumerate(policy.parts):
        if p.kind is PolicyKind.SELECTIVE:
            rr &= ~((calls.part[kk] == i) & np.isin(ev_op[we], _save_codes(prep, p)))
    r = np.flatnonzero(rr)
    at = seg.start[k[r]] + (we[r] - calls.ev0[k[r]])
    out.add(at, at + 1, wb[r], WORKSPACE)


# ---- stage 7: the live curve, its peak, and the peak in the original numbering ------------
def _live(c, f, w, cat, at: int) -> dict[str, int]:
    lv = (c <= at) & (f > at)
    by = np.bincount(cat[lv], weights=w[lv], minlength=len(CATEGORIES))
    return {name: int(round(by[i])) for i, name in enumerate(CATEGORIES)}


def _live_before(c, f, w, cat, at: int) -> dict[str, int]:
    """`_live` just before slot `at`'s event: its frees done, nothing it makes yet."""
    lv = (c < at) & (f > at)
    by = np.bincount(cat[lv], weights=w[lv], minlength=len(CATEGORIES))
    return {name: int(round(by[i])) for i, name in enumerate(CATEGORIES)}


def _original_event(p: int, calls: _Calls, seg: _Segments) -> tuple[int, str]:
    """(event, module): inside a segment, the event that triggered it and the module."""
    if not len(seg.order):
        return p, ""
    starts = seg.at + seg.cum[:-1]
    j = int(np.searchsorted(starts, p, side="right")) - 1
    if j >= 0 and p < starts[j] + seg.length[seg.order[j]]:
        return int(seg.at[j]), str(calls.mods[seg.order[j]])
    return (int(p - seg.cum[j + 1]) if j >= 0 else p), ""


def slot_curve(curve: np.ndarray, created_bytes: np.ndarray, seg: _Segments,
               rng_bytes: int = 0) -> np.ndarray:
    """Live bytes on a fixed axis of 2 slots per original event, whatever the policy.

    Slot 2e+1: after event e. Slot 2e: just before it (frees at e done, nothing made at e
    yet), or the highest point of a recompute segment inserted before e. Every policy maps
    onto the same axis, so per-block effects can be added (memledger/replay/plan.py,
    Note [Blocks add up])."""
    n = seg.n
    e = np.arange(n, dtype=np.int64)
    q = seg.pos_f(e)
    out = np.empty(2 * n, dtype=np.float64)
    out[1::2] = curve[seg.pos_c(e)]
    pre = curve[q] - created_bytes[q]
    if len(seg.order):
        s0 = seg.at + seg.cum[:-1]
        seg_max = np.array([curve[a:a + ln].max() for a, ln in
                            zip(s0, seg.length[seg.order])], dtype=np.float64)
        np.maximum.at(pre, seg.at, seg_max)
    if seg.empty_at is not None and rng_bytes:   # a re-run stopped before its first op forks
        pre[np.unique(seg.empty_at[seg.empty_at >= 0])] += rng_bytes   # just before e
    out[0::2] = pre
    return out


# ---- stage 8: what the machine does (for the time model) ----------------------------------

# Note [What a call does, for the time model]
# The time model (memledger/replay/costs.py) prices each selected call by what torch and
# memledger's wrappers do in it, counted here from the ledger:
# - saves: the packs autograd makes inside the call, one per `saved` record, parameters
#   included (checkpoint's pack hook takes every one, and the recompute probe's count of
#   saves per region, which its call cost is net of, counts them all). Counted per storage
#   at its first save, a weight's saves of every step fell on step 1's call: a Linear's
#   warm calls had 0 or 1 save where they pack 2 (its input and its weight's `t`).
# - rerun_end: one past the last event the re-run makes. For a call that drops nothing,
#   that is its last pack, where torch's early stop raises, not its last event. MLP
#   example: fc1 = [t, addmm]; addmm packs x and t's output before its kernel runs, so the
#   re-run is `t` alone (17 us of op time), not `t` + `addmm` (257 us).
def _packs_per_call(prep: Prepared, calls: _Calls, own: _Owners) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """(saves, one past the last pack's event) per call: Note [What a call does, for the
    time model]. Ledgers without save records: saves per storage at its first save."""
    m = len(calls)
    if not m:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if prep.pack_ev is None or not len(prep.pack_ev):
        first = own.first_save >= 0
        saves = np.bincount(own.first_save[first], weights=prep.saves[first],
                            minlength=m)[:m].astype(np.int64)
        return saves, calls.ev1.copy()
    k = _pack_call(prep, calls)
    mine = k >= 0
    saves = np.bincount(k[mine], minlength=m)[:m].astype(np.int64)
    last = np.full(m, -1, dtype=np.int64)
    np.maximum.at(last, k[mine], prep.pack_ev[mine] + 1)
    return saves, np.where(last >= 0, last, calls.ev1)


def _work(prep: Prepared, calls: _Calls, own: _Owners, seg: _Segments, off: np.ndarray,
          policy: Policy, packs: tuple[np.ndarray, np.ndarray]) -> Work:
    """Note [What a call does, for the time model]. `packs`: `_packs_per_call`'s."""
    m = len(calls)
    saves, last_pack = packs
    # A checkpointed call that drops nothing (a Linear: it saves only its input and weight,
    # both kept) is still re-run in backward to refill its holders: its time, not its bytes,
    # up to its last pack (torch's early stop raises there)
    rerun_only = _is_recomputed(calls.kind) & ~seg.has & (saves > 0)
    stop = np.clip(last_pack, calls.ev0, calls.ev1) if m else calls.ev1
    rerun_end = np.where(seg.has, seg.end, np.where(rerun_only, stop, calls.ev0))
    # Written to disk: every storage an offloaded call packs that the offloader does not
    # skip (parameters and buffers), whether or not its bytes can leave (a ReLU output
    # saved by the ReLU too stays resident, but the offloader still writes the copy fc2
    # packs and reads it back; the batch the script holds, saved by the first Linear, too:
    # train_mlp.py's `offload:**` writes 3 storages, not the 2 activations)
    first, last = calls.at(calls.kind, own.first_save), calls.at(calls.kind, own.last_save)
    packer = np.where(first == Kind.OFFLOAD, own.first_save, own.last_save)
    written = written_by_offloader(prep) & (
        (first == Kind.OFFLOAD) | (last == Kind.OFFLOAD)) & (
        prep.nbytes >= calls.at(calls.min_b, packer))
    return Work(scope_row=calls.row, kind=calls.kind, part=calls.part, ev0=calls.ev0,
                ev1=calls.ev1, rerun_end=rerun_end, saves=saves,
                off_rows=np.flatnonzero(written), off_call=packer[written],
                off_bytes=prep.nbytes[written],
                save_ops=[p.save_ops() if p.kind is PolicyKind.SELECTIVE else ()
                          for p in policy.parts])


def _refuse_unseen_save_names(policy: Policy, torch_version: str) -> None:
    """Refuse an explicit save list naming no aten op, or one selective never sees, in
    measure's line (Note [Save names predict checks without torch], replay/aten_names.py),
    where the ledger's torch is the one the lists were read from."""
    for part in policy.parts:
        if part.kind is PolicyKind.SELECTIVE and part.save != DEFAULT_SAVE_OPS:
            line = refused_save_name(policy.text(), part.save, torch_version)
            if line is not None:
                raise PolicyError(line)


def _recomputed_running(calls: _Calls, at: tuple[tuple[int, int], ...]
                        ) -> list[tuple[str, int]]:
    """(path, checkpoint index) per recomputed selected call whose events hold a script
    checkpoint's first run (Note [A checkpoint met in a call, not under its path] in
    replay/script_checkpoint.py)."""
    if not at or not len(calls):
        return []
    rec = _is_recomputed(calls.kind)
    return [(str(calls.mods[c]), k) for c, k in calls_running(calls.ev0, calls.ev1, at)
            if rec[c]]


def replay(prep: Prepared, policy: Policy, rng_bytes: int = CPU_RNG_STATE_BYTES,
           probe: int | None = None, slots: bool = False) -> Replayed:
    """Predict the live curve of `prep`'s run under `policy`. See Note [Replay of a
    checkpointed region]. `rng_bytes`: device bytes per checkpoint frame (0 on CUDA).
    `probe`: an original event; `Replayed.at_probe` is then the bytes per category live
    right after it in the rewritten stream. `slots`: also return `slot_curve`."""
    calls = _select_calls(prep, policy)
    _refuse_unseen_save_names(policy, prep.torch_version)   # Note [Save names predict
    #                                                            checks without torch]
    prep = _unfolded_under_selective(prep, calls)
    if prep.stateful_mod is not None:   # never re-run a call that writes outside state
        refuse_recompute_of_stateful(policy.text(), calls.mods, calls.ev0,
                                     _is_recomputed(calls.kind), prep.stateful_mod,
                                     prep.stateful_ev0, prep.stateful_obj, calls.ev1)
    if prep.script_ckpt:   # every selected module, with gradients or not (reentrant)
        paths = np.array(list(calls.by_path), dtype=object)
        kinds = np.array([_KIND_CODE[p.kind] for p in calls.by_path.values()], dtype=np.int64)
        refuse_around_script_checkpoints(policy.text(), paths, _is_recomputed(kinds),
                                         kinds == Kind.OFFLOAD, prep.script_ckpt,
                                         _recomputed_running(calls, prep.script_ckpt_at))
    if prep.script_fn_ckpt:   # Note [A policy checkpoint around a checkpointed function]
        paths = np.array(list(calls.by_path), dtype=object)
        kinds = np.array([_KIND_CODE[p.kind] for p in calls.by_path.values()], dtype=np.int64)
        refuse_around_function_checkpoints(policy.text(), paths[_is_recomputed(kinds)],
                                           prep.script_fn_ckpt,
                                           _recomputed_running(calls, prep.script_fn_ckpt_at))
    _refuse_other_mode(prep, calls, policy)   # Note [A re-run in another mode]
    own = _owners(prep, calls)
    dropped, kept_cache, handed_back, in_save_list = _checkpoint_drops(prep, calls, own,
                                                                       policy)
    try:
        _refuse_selective_backward_twice(prep, calls, own, policy)
    except PolicyError:   # Note [A state write before the second pass]
        state = _refuse_rewritten_state(prep, calls, _packs_per_call(prep, calls, own)[1],
                                        _read_back(prep, calls, own), policy)
        if state is not None:
            raise PolicyError(state[1]) from None
        raise
    _refuse_graph_reads(prep, calls, own, policy)
    _refuse_read_inside_its_call(prep, calls, policy)
    packs = _packs_per_call(prep, calls, own)   # (saves, one past the last pack) per call
    _refuse_selective_mutated(prep, calls, own, policy, in_save_list, packs)
    read = _read_back(prep, calls, own)   # per call: re-run by a backward
    # Note [The re-run backward meets first]
    # Both refusals name the call whose re-run measure meets the trouble in: the first
    # step's backward comes first, and it re-runs the step's latest call first. In one
    # call, a re-run on another path fails inside it, before measure judges the state it
    # left. snntorch's `selective:2` (train_snntorch.py --mode seq): the first time step
    # of the first batch makes the membrane on another path (the buffer still empty), the
    # last replaces it from the one before; predict named the first, measure the last.
    # Each refusal also picks its own call so (`_met_order`): a state refusal named the
    # last call of the last step.
    # A fill's line before the others on one call (Note [A state filled on the first
    # call], replay/emptied_cache.py): the re-run fails on the buffer it finds full
    found = [r for r in (_refuse_emptied_cache(prep, calls, read, policy),
                         _refuse_selective_reused(prep, calls, read, policy),
                         _refuse_rewritten_state(prep, calls, packs[1], read, policy),
                         _refuse_first_call_setup(prep, calls, packs, read, policy)) if r]
    if found:   # ties: the first
        raise PolicyError(min(found, key=lambda r: _met_order(calls, r[0]))[1])
    _refuse_selective_recast(prep, calls, own, policy)
    off = _offloaded(prep, calls, own)
    seg = _segments(prep, calls, dropped, own)
    _refuse_rerun_per_pass(prep, calls, own, seg, dropped, policy)
    c, f, b, cat = _lifetimes(prep, calls, own, seg, dropped, kept_cache, off,
                              rng_bytes, policy, handed_back, in_save_list).arrays()
    total = seg.total
    w = b.astype(np.float64)
    made = np.bincount(c, weights=w, minlength=total + 1)
    curve = np.cumsum(made[:total] - np.bincount(f, weights=w, minlength=total + 1)[:total])
    # float64: exact below 2**53 bytes (8 PiB)
    p = int(np.argmax(curve)) if total else 0
    at_peak = _live(c, f, w, cat, p)
    peak = float(curve[p]) if total else 0.0
    forks = _fork_slots(seg, rng_bytes)
    if len(forks):   # Note [A re-run that stops before its first op]: between two slots
        pre = curve[forks] - made[forks] + rng_bytes   # the slot's frees done, not its makes
        j = int(np.argmax(pre))
        if pre[j] > peak:
            p, peak = int(forks[j]), float(pre[j])
            at_peak = _live_before(c, f, w, cat, p)
            at_peak["other"] += rng_bytes
    at_peak["workspace"] += prep.workspace
    at_probe = _live(c, f, w, cat, int(seg.pos_c(np.array([probe]))[0])) \
        if probe is not None else {}
    orig, where = _original_event(p, calls, seg)
    ledger_peak = int(round(peak))
    n = prep.n_events
    return Replayed(
        policy=policy, peak_bytes=ledger_peak + prep.workspace, ledger_peak_bytes=ledger_peak,
        peak_event=int(min(max(orig, 0), max(n - 1, 0))), in_recompute=where,
        at_peak=at_peak, recompute_events=int(seg.cum[-1]),
        offload_bytes=int(prep.nbytes[off].sum()), regions=list(calls.by_path),
        events=total, at_probe=at_probe, work=_work(prep, calls, own, seg, off, policy, packs),
        slots=slot_curve(curve, made, seg, rng_bytes) if slots else None,
    )
