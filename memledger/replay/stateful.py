"""Calls that write state outside themselves: never re-run them (and the one-line refusal
of a selective region a second backward pass would re-run). No torch.

See Note [State written outside a region] in memledger/trace/outside_state.py: the trace
writes a `stateful` record for each module call that stored storages it made into an
object it was handed (transformers' KV cache with `use_cache=True`). Re-running such a call
(checkpoint, selective) stores them a second time, so the policy would change what the
script computes: replay refuses it before predicting anything, with the fix. Offload
re-runs nothing and is allowed; the storages the object holds stay on the device.
"""

from __future__ import annotations

import numpy as np

from memledger.errors import PolicyError

INPUT_WRITTEN = "<input>"   # a `stateful` record's object when the call changed an argument
# a `stateful` record's object when the call replaced a tensor attribute of its module by one
# made from the tensor it replaced (Metric.forward's running sums: Note [State a re-run
# writes again]); judged with the in-place writes, at the call's last event
OWN_STATE = "<own state>"
# a `stateful` record's object when a list or dict the call was handed changed after the call
# returned: Note [A list changed after the call] in memledger/trace/outside_state.py
ARGUMENT_CHANGED = "<argument changed>"
# a `stateful` record's object when the module pairs forward hooks with full backward hooks:
# Note [Hooks paired across forward and backward] in memledger/trace/outside_state.py
PAIRED_HOOKS = "<paired hooks>"


def stateful_calls(records: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(module path, first event, object class) per `stateful` record."""
    mod = np.array([r["mod"] for r in records], dtype=object)
    ev0 = np.array([r["ev0"] for r in records], dtype=np.int64)
    obj = np.array([r.get("obj", "") for r in records], dtype=object)
    return mod, ev0, obj


def held_sids(records: list[dict]) -> set[int]:
    """Storages an outside object keeps (they outlive the call that made them)."""
    return {int(s) for r in records for s in r.get("sids", ())}


def refuse_recompute_of_stateful(policy_text: str, mods: np.ndarray, ev0: np.ndarray,
                                 recompute: np.ndarray, st_mod: np.ndarray,
                                 st_ev0: np.ndarray, st_obj: np.ndarray,
                                 ev1: np.ndarray | None = None) -> None:
    """Raise PolicyError if a call to be re-run (`recompute` mask over the selected calls
    `mods`/`ev0`, ending at `ev1`) is one that wrote state outside itself, or (a
    `PAIRED_HOOKS` record) holds, or is, a call of a module with paired hooks."""
    if not len(st_mod) or not recompute.any():
        return
    calls = set(zip(mods[recompute].tolist(), ev0[recompute].tolist()))
    spans = list(zip(mods[recompute].tolist(), ev0[recompute].tolist(),
                     (ev1 if ev1 is not None else ev0)[recompute].tolist()))
    changed = []   # Note [A list changed after the call] (trace/outside_state.py)
    for m, e, o in zip(st_mod.tolist(), st_ev0.tolist(), st_obj.tolist()):
        if o == OWN_STATE:   # judged with the in-place writes (early stop, reads)
            continue
        if o == ARGUMENT_CHANGED:
            if (m, e) in calls:
                changed.append((e, m))
            continue
        if (m, e) in calls:
            raise PolicyError(stateful_message(policy_text, m, o))
        if o == PAIRED_HOOKS:   # the hooked module's call inside a region that is re-run
            for r, r0, r1 in spans:
                if r0 <= e < r1 and (not r or m == r or m.startswith(r + ".")):
                    raise PolicyError(paired_hooks_message(policy_text, r, m))
    if changed:   # the call backward re-runs first, as measure meets it: the last one
        raise PolicyError(stateful_message(policy_text, max(changed)[1], ARGUMENT_CHANGED))


def paired_hooks_message(policy_text: str, region: str, module: str) -> str:
    """One line: a re-run region holds a module whose forward hooks pair with its full
    backward hooks (Note [Hooks paired across forward and backward])."""
    inside = ", which" if region == module else f", whose {module}"
    return (f"{policy_text} would re-run {region}{inside} has forward hooks paired with full "
            "backward hooks, or with an autograd Function they route its outputs through "
            "(what one forward hook stores, the backward consumes: Opacus's per-sample "
            "gradients, torchjd's autogram Engine), and the re-run fires the forward hooks a "
            "second time with no backward to match (Opacus then fails: \"Per sample "
            "gradient is not initialized\"); offload that module instead")


def stateful_message(policy_text: str, module: str, obj: str) -> str:
    """One line: which call, what it writes, and the fix."""
    if obj == INPUT_WRITTEN:
        return (f"{policy_text} would re-run {module}, whose forward changes the tensor it is "
                "handed in place (`x *= noise`, a router's jitter), so the re-run would "
                "start from the changed tensor (torch's checkpoint fails in backward); "
                "checkpoint a module around it, make the change out of place, or offload "
                "that module instead")
    if obj == ARGUMENT_CHANGED:
        return (f"{policy_text} would re-run {module}, which is handed a list (or dict) that "
                "the script changes after the call returns (x-unet's `history` of stage "
                "outputs, appended to after each stage), so the re-run in backward would "
                "read the changed list and compute something else (or fail); hand it a "
                "copy (`list(history)`), or offload that module instead")
    hint = (" (transformers' KV cache: the model runs with use_cache=True, or is handed "
            "past_key_values, as peft's prefix tuning does)" if obj.endswith("Cache") else "")
    # not a cache: a container the module writes its outputs into, as tensordict's
    # `TensorDictModule` writes into the TensorDict it is handed; the module it wraps
    # (`module.0.module`) computes them and checkpoints exactly (docs/accuracy.md, "A
    # twenty-second round"): use_cache=False alone was no advice there
    inside = ("" if obj.endswith("Cache") else
              "checkpoint the modules inside it, which compute what it stores, ")
    return (f"{policy_text} would re-run {module}, whose forward stores new tensors into the "
            f"{obj} it is handed{hint}, so the recompute would store them twice and change "
            f"what the script computes; {inside}pass use_cache=False in the model's call (as "
            "transformers' gradient checkpointing does; a config's use_cache may not reach "
            "every part: T5's decoder keeps its own) where the cache is the model's own, or "
            "offload that module instead")


def mode_message(policy_text: str, region: str, module: str, forward_training: bool) -> str:
    """One line: a region backward would re-run in another mode than its forward ran in
    (Note [A re-run in another mode], trace/modes.py); predict and measure both say it."""
    was, now = ("train", "eval") if forward_training else ("eval", "train")
    whose = "" if module == region else f" (its {module} first)"
    how = ": an evaluation run before `loss.backward()`" if forward_training else ""
    return (f"{policy_text} would re-run {region} in {now} mode{whose}, while its forward ran "
            f"in {was} mode: the script switches the model's mode between a forward and its "
            f"backward (`model.{now}()` after the forward{how}), so dropout and batch norm "
            "would compute other values in the re-run (torch's checkpoint fails, or the "
            "gradients change); call "
            f"`model.{'train()' if forward_training else 'eval()'}` again before the "
            "backward, or offload that module instead")


def passes_read_message(policy_text: str, module: str, offload: bool, passes: int) -> str:
    """One line: a region one of whose saves three backward passes or more read (Note [Read
    by three backward passes or more] in replay/engine.py); predict refuses, measure runs."""
    how = "offload" if offload else "re-run"
    return (f"{policy_text} would {how} {module}, whose saves {passes} backward passes read "
            "(`torch.autograd.grad(..., retain_graph=True)` taken again and again through "
            "it: a power series of vector-Jacobian products, as a residual flow's log-det "
            "estimator takes inside its forward, or one per example or per layer, as "
            "torchjd's Jacobians are taken), and each pass makes its own re-made or "
            "read-back copies, which the replay does not price past two; `memledger "
            "measure` runs it, and `memledger compare` measures and judges it")


def graph_reads_message(policy_text: str, module: str, offload: bool, grads: bool) -> str:
    """One line: a region whose saves two graph-building backward passes read, or one that
    also wrote the gradients (Note [Read by a backward that builds a graph] in
    trace/collector.py); predict refuses, measure runs."""
    how = "offload" if offload else "re-run"
    why = ("a backward that builds a graph and writes the gradients reads "
           "(`loss.backward(create_graph=True)`: AdaHessian, Hessian-trace penalties), and "
           "`.grad` holds that graph, with the re-made or read-back copies in it, past the "
           "optimizer step" if grads else
           "two backward passes that build graphs read (`torch.autograd.grad(..., "
           "create_graph=True)` taken twice through it: higher-order gradients, as a "
           "physics-informed network's u_xx), and each pass holds its own re-made or "
           "read-back copy")
    return (f"{policy_text} would {how} {module}, whose saves {why}, which the replay does "
            "not price; `memledger measure` runs it, and `memledger compare` measures and "
            "judges it")


def read_in_call_message(policy_text: str, module: str, offload: bool) -> str:
    """One line: a region whose saves a backward reads before the region's call returns
    (Note [A save read before its call returns] in replay/engine.py); predict refuses,
    measure runs."""
    how = "offload" if offload else "re-run"
    then = ("offload reads them back inside that forward, and saves the graph that backward "
            "builds too" if offload else
            "torch's checkpoint re-runs it inside its own forward and again for the loss's "
            "backward")
    return (f"{policy_text} would {how} {module}, whose forward takes a gradient of its own "
            "work before it returns (`torch.autograd.grad(..., create_graph=True)` inside "
            "the forward, as torch-struct's marginals are taken): that backward reads the "
            f"call's saves while the call is still open, and {then}, which the replay does "
            "not price; `memledger measure` runs it, and `memledger compare` measures and "
            "judges it")


def rerun_per_pass_message(policy_text: str, module: str) -> str:
    """One line: a re-run call two backward passes read, whose re-run the first pass
    starts (Note [A re-run in each backward pass] in replay/engine.py); predict refuses,
    measure runs."""
    return (f"{policy_text} would re-run {module} in each of two backward passes (a "
            "backward with `retain_graph=True` and another through the same graph, or one "
            "that builds a graph, `torch.autograd.grad(..., create_graph=True)` as forces "
            "from an energy, then the loss's backward), some of whose saves only the first "
            "reads: the replay prices one re-run per call; `memledger measure` runs it, and "
            "`memledger compare` measures and judges it")


def selective_twice_message(policy_text: str, module: str) -> str:
    """One line: a selective region a second backward pass would re-run (predict and
    measure both refuse it; torch raises "Trying to backward an extra time")."""
    return (f"{policy_text} would re-run {module} for a second backward pass through it "
            "(retain_graph=True, a gradient penalty, or a backward through the graph "
            "`autograd.grad(..., create_graph=True)` built: a physics-informed network's "
            "residual), and torch's selective checkpoint allows one backward per region; "
            "checkpoint or offload that module instead")


# Note [The kept op a re-run finds changed]
# The line said "keeps an op's output in blocks.1 that is changed in place afterwards ...;
# leave that op out of save=", and never said which op: egnn-pytorch's EGNN layer fills its
# coordinate weights in place (`coor_weights.masked_fill_(~mask, 0.)`, then `clamp_`), a
# view of its `coors_mlp`'s last `addmm`, under a default save list of five kinds and the
# fused attention kernels (tests/clients/train_egnn.py). Both sides now name the op kind
# the re-run meets changed: torch's cache fails at the first such op of the region's
# re-run (the call backward re-runs first), so predict takes, of that call's outputs kept
# and changed, the one made first, and measure reads the op torch's cached mode was
# replaying off the error's traceback (`func` in its `__torch_dispatch__` frame; "an op"
# where none is found).
def selective_mutated_message(policy_text: str, module: str, op: str = "an op") -> str:
    """One line: a selective region keeps an op's output that is then changed in place
    (Note [Written in place in forward], trace/collector.py); predict and measure both
    refuse it (torch raises "Tensor cached during selective activation checkpoint has been
    mutated" in the re-run). `op`: the kept op's kind (`addmm`)."""
    which = f"{op}'s output" if op != "an op" else "an op's output"
    leave = f"leave {op} out of save=" if op != "an op" else "leave that op out of save="
    return (f"{policy_text} keeps {which} in {module} that is changed in place "
            "afterwards (an inplace=True activation, `x += ...`, a mask filled in place, "
            f"nn.LSTMCell's kernel), and torch's selective checkpoint cannot hand back a "
            f"changed tensor; {leave}, make the change out of place, or checkpoint that "
            "module instead")


def selective_reused_message(policy_text: str, module: str, keeper: str,
                             remade: bool = False, plain: bool = False) -> str:
    """One line: a selective region whose forward call made a buffer that later calls reuse
    (Note [A buffer a call makes and later calls reuse], trace/collector.py): its re-run
    finds the buffer and runs other ops than its forward, which torch's selective
    checkpoint refuses ("... encountered during backward but not found in storage").
    `remade`: a buffer made anew from the last on every call, whose next call ran other
    ops. `plain`: a tensor kept as a plain attribute of its module, not a buffer (Note [A
    cache kept as a plain attribute], replay/engine.py)."""
    what = "kept a tensor on {k} (a plain attribute)" if plain else "made a buffer of {k}"
    how = (what + " anew from the one before, and the next call, reading it, ran other ops"
           if remade else what + " that later calls reuse (a cache filled on the first call)")
    return (f"{policy_text} would re-run {module}, whose forward call "
            f"{how.format(k=keeper)}, so the re-run would run other ops than its forward, "
            "which torch's selective checkpoint cannot replay; checkpoint or offload that "
            "module instead")


def emptied_cache_message(policy_text: str, module: str, keeper: str,
                          selective_plain: bool = False) -> str:
    """One line: a re-run region whose forward call filled an empty buffer of `keeper` that
    the re-run would find full (Note [A cache emptied before every call], Note [A state
    filled on the first call], replay/emptied_cache.py); predict and measure (torch's
    checkpoint refused the re-run) both say it, from what both know: the buffer was empty
    as the call began and full as its re-run begins. `selective_plain`: selective, on a
    fill without a graph (checkpoint re-runs it)."""
    how = "selective checkpoint" if selective_plain else "checkpoint"
    fix = "checkpoint or offload that module instead" if selective_plain else \
        "offload that module instead" + ("" if keeper == module else
                                         f", or keep {keeper} out of the region")
    return (f"{policy_text} would re-run {module}, whose forward call filled an empty "
            f"buffer of {keeper}, so the re-run would find it full, holding what the "
            "forward left, and run other ops than its forward (a cache the module fills "
            "when it finds it empty: tranception's ALiBi bias; or a state later calls "
            f"carry on: a spiking neuron's membrane), which torch's {how} cannot replay; "
            f"{fix}")


def selective_recast_message(policy_text: str, module: str) -> str:
    """One line: under autocast, a selective region called again after the call that cast
    its weights took the casts from autocast's cache; its re-run casts them again
    (`aten._to_copy.default`), which torch's selective checkpoint refuses (measure's words
    for the same error: measure/apply.py `_SAC_FAILURES`)."""
    return (f"{policy_text} would re-run {module}, whose forward took a weight's autocast "
            "cast from autocast's cache (the module called more than once under autocast), "
            "so the re-run would cast it again (aten._to_copy.default), which torch's "
            "selective checkpoint cannot replay; checkpoint or offload that module instead")


# Note [State a re-run writes again]
# A region's forward that writes its own buffers in place is not the same computation when
# checkpoint or selective re-runs it in backward: spectral_norm's power
# iteration (`F.normalize(..., out=self._u)`) starts the re-run from the `_u` and `_v` the
# forward left and computes another sigma, so another weight; a QAT fake-quantizer's
# observer moves its running min and max again and quantizes with other scales; an EMA
# codebook or counter steps twice. The gradients then differ from the baseline (a
# spectral-normed residual MLP, `checkpoint:blocks.*`: 5.1e-05 max abs on step 0's first
# gradient, rejected by `compare`'s gate), though `predict` and `plan` priced the policy as
# any other. Both now refuse it in one line: predict by the trace's `mutated` records of
# buffers (an `out=` write included), measure as the re-run starts, by the version counters
# of the region's buffers since its forward began (so a call no backward goes through, never
# re-run, is not refused: I-BERT's observers under LoRA). Not a training BatchNorm's
# statistics: its output does not read them, and measure puts them back after the re-run
# (Note [BatchNorm under recompute], measure/apply.py); its call's scope carries `stats`.
# Not parameters: peft adds a LoRA delta into a Mixtral expert's weight in place and takes
# it out again within the forward, which a re-run repeats exactly. A write through `.data`
# bumps no version counter (vector-quantize-pytorch's EMA codebook): predict refuses it,
# and measure, which ran it (compare's gradient gate rejected it: rel 4.36), refuses it
# too since the fifty-second session, by digests (Note [A re-run's write through .data],
# measure/apply.py). Offload re-runs nothing and is allowed.
# Not buffers alone: a tensor a module keeps as a plain attribute is state too, and so is
# any tensor made before the region's call that its forward writes in place. torchmetrics
# keeps a metric's running sums so (`add_state` sets attributes, not buffers), and a block
# that updates a metric in its forward (`self.dead.update(...)`: `mean_value += ...`,
# `weight += ...`) counted each batch twice under checkpoint and selective (MeanMetric's
# `weight` 2.0 after one step, 1.0 without), with the gradients unchanged, so compare's
# gate passed it and predict priced it (tests/clients/train_ema_metrics.py --mode metrics,
# `checkpoint:blocks.*`: 193,216 B, = measured). predict now takes every `mutated` write
# but a parameter's (`_state_writes` in prepared.py: a buffer wherever it was made, another
# storage where it was made before the re-run call: an `inplace=True` ReLU on what the
# region made is its own), measure the version counters of the region's tensor attributes
# beside its buffers. A metric called as a module (`self.acc(preds, y)`: Metric.forward)
# replaces its states by assignment instead of writing them in place: no counter moves
# and no `mutated` record is written, so that call is not refused (a re-run still counts
# its batch twice): the trace now writes a `stateful` record with the object `OWN_STATE`
# for a call that replaced a tensor attribute of its module by a tensor made in the call
# after reading the one it replaces (the old sums cloned and added to), and the replay
# takes it as a state write at the call's last event; measure compares, as the re-run
# ends, each tensor attribute the re-run replaced with the one it replaced (a pure
# recompute, pruning's `weight = weight_orig * mask`, makes the same values again).
# Not a state the forward fills without reading it first, once (a cache: Note [A state
# the region reads before it writes], trace/collector.py).


# Note [The state named first, by name]
# The refusal names one state the region's forward wrote. predict named the first the
# trace saw written in the call (event order), measure the first of the region's buffers
# in the order the modules hold them (`_buffers`, then tensor attributes) among those the
# re-run wrote again. A module that registers its buffers in one order and writes them in
# another got two lines: hl-gauss-pytorch's `RunningStats` registers `step`, then
# `running_mean` and `running_estimate_p`, and writes `running_mean`, `running_estimate_p`,
# then `step.add_(1)`, so `checkpoint:head` (tests/clients/train_hl_gauss.py
# --running-stats) read "writes head.hl_gauss_loss.running_stats.running_mean in place"
# from predict and "...running_stats.step in place" from measure. Measure cannot order
# writes (a version counter says that a tensor moved, not when), so both now name the
# first by its dotted name of what the forward wrote in that call: predict of the call's
# writes before its last save, measure of the states that moved between the forward's start
# and the re-run's (the re-run's own writes where none did). The same line on both sides,
# ("...running_stats.running_estimate_p in place"), pinned in plain torch by
# tests/clients/train_running_stats.py. Lines that changed with it: a QAT block names its
# activation observer's `max_val` before the weight's `min_val`; routing's `Kmeans` its
# `initted` flag before its `means`.
def state_rewritten_message(policy_text: str, module: str, name: str,
                            replaced: bool = False) -> str:
    """One line: a re-run region whose forward writes a buffer in place, or (`replaced`)
    replaces a buffer or tensor attribute by one made from it (predict and measure name
    the last such call, which backward re-runs first, and the first by name of the states
    its forward wrote: Note [The state named first, by name])."""
    what = name or "a tensor it keeps from before (a metric's running sums, a counter)"
    how = (f"replaces {what} by a tensor made from the one before (a state kept across "
           "calls: a metric's running sums, a spiking neuron's membrane)") if replaced \
        else f"writes {what} in place"
    return (f"{policy_text} would re-run {module}, whose forward {how}, "
            "so the re-run would start from what the forward left and compute other values "
            "(other gradients, or a metric that counts the batch twice); offload that module "
            "instead, or keep that write out of the region")
