"""The ledger's vocabulary: categories, phases, record kinds and the file schema.

No torch here: a ledger is read anywhere.

# Note [Ledger file format]
A ledger is JSON Lines, one record per line, written as the run goes (so a crash, an OOM or
Ctrl-C leaves every line written so far). Line 1 is the header. Every record has `k` (its
kind). Events are the ops the dispatch mode saw, numbered 0, 1, 2, ...; a storage created by
event 7 and freed after event 11 is live on [7, 12): `created=7`, `freed=12`.

    {"k":"header","schema":"memledger.ledger/1","device":"cpu",...}
    {"k":"alloc","sid":3,"ev":7,"bytes":4096,"dev":"cpu","dtype":"float32","shape":[32,32],
     "op":"aten.mm.default","mod":"blocks.0.mlp.fc","ph":"forward","step":1}
                                 # + "external": true for memory torch's allocator did not
                                 # hand out (`torch.from_numpy`), which no curve counts
                                 # (Note [Memory torch's allocator did not hand out])
    {"k":"role","sid":3,"role":"activation"}           # a storage's role, learned as it happens
    {"k":"saved","sid":3,"ev":8,"mod":"blocks.0.mlp"}   # packed by autograd (saved for backward)
                                 # + "sparse": 1 when the saved tensor was a sparse one
                                 # (COO, CSR, ...), recorded by its values; offload leaves
                                 # it on the device (absent in older ledgers: read as
                                 # dense; Note [A sparse save stays on the device] in
                                 # replay/engine.py); + "script": 1 when no module's
                                 # forward was running (the script's code: a loss after the
                                 # model returned; Note [A save just after the model's
                                 # forward returned] in ledger/model.py)
    {"k":"unpack","sid":3,"ev":40,"end":44,"rel":46}    # unpacked by backward; `end`: the
                                 # event its node returned at (or let go of what the unpack
                                 # handed it, if before: Note [What a node lets go of before
                                 # it returns]), `rel`: the event before which
                                 # autograd let go of the node (both optional: older ledgers
                                 # lack them); + "sev": the event of the save it read back
                                 # (Note [Which save an unpack reads] in replay/prepared.py)
                                 # + "val": where the node's gradients were summed to
                                 # their inputs' shapes after it returned, the event after
                                 # the last such sum (Note [A copy the force graph holds,
                                 # let go with its node] in replay/engine.py)
    {"k":"free","sid":3,"ev":12,"last":11}              # freed; `last` = last event that used it
                                 # + "gc": 1 when Python's garbage collector freed it (a
                                 # reference cycle held it: trace/gc_window.py)
                                 # + "into": the sid an op outside forward and backward
                                 # wrote in place at `last`, reading this one (Note
                                 # [Written in place from the step before] in
                                 # ledger/held_roles.py; absent in older ledgers)
    {"k":"live","sid":5,"last":90}                      # still live when tracing stopped
                                 # (+ "into", as a free record's)
    {"k":"phase","ev":12,"ph":"backward","step":1}      # phase from this event on
    {"k":"scope","mod":"blocks.0","ev0":3,"ev1":20,"ph":"forward","step":1,"ns":123456}
                                 # + "nograd": true for a call made without gradients
                                 # + "stats": bytes of a training BatchNorm's running
                                 # statistics, which `measure` copies around a re-run
                                 # (Note [BatchNorm under recompute], measure/apply.py)
                                 # + "unowned": true for a module no top-level module
                                 # holds, named `caller.Class` (Note [Modules the model
                                 # makes in its forward], trace/collector.py)
    {"k":"step","step":1,"ev":99,"ns":...}              # optimizer step `step` ended after event ev
    {"k":"measured","source":"cpu-profiler","device":"cpu","peak_bytes":...,"step_ns":[...]}
    {"k":"end","ev":100,"status":"ok","message":""}     # + "held": true when no free was
                                 # written after the last step (Note [Resident at the end])

Kinds for replay and the CUDA path, kept in `Ledger.extra`: `fwdlast` (the last forward use
of each saved storage, written when backward starts), `opscratch` (kernel-internal scratch
per op, from the allocator pass; Note [Kernel scratch] in trace/allocator.py; `bare`: its
calls that made nothing, Note [Calls that made nothing]; `inside`: its calls made inside
calls of other ops, with their names, Note [Calls inside another op]; `nested`: its calls
whose inner calls kept what they made, with the scratch without them, Note [Inputs a
fallback copies before the op]), `bare` (`op`,
`ev`: the events at which an op that is no view made no storage, `torch.mm(.., out=)`, an
in-place op, so that its calls' scratch has an event to go to; Note [Ops that made
nothing, placed] in trace/collector.py), `oom` (the
CUDA allocator's counters when the script ran out of memory) and `stateful` (a module call
that stored storages it made into an object it was handed, e.g. a KV cache: `mod`, `ev0`,
`ev1`, `obj`, `sids`; Note [State written outside a region] in trace/outside_state.py),
`released` (`sid`, `ev`: the first event at which only autograd held a saved storage, -1 if
the script still held it at backward; Note [When a saved storage is released] in
trace/collector.py), `between` (`sid`, `ev`: a storage the script still held as one
backward pass began (`released` -1) and let go of at `ev`, outside backward, before the
step's next pass; Note [Let go of between two backward passes] in trace/collector.py),
`unheld` (`sid`, `ev`: one of those -1 storages, let go of by the script after a backward
began while a graph the backward kept still held it; Note [Let go of after backward, while
a kept graph holds it] in trace/collector.py) and `acast` (`sid`: a parameter's
low-precision copy that autocast keeps
in its cache to the exit of its outermost context; Note [Autocast's cache in a re-run] in
trace/collector.py) and `unread` (`sid`, `sev`, `ev`: the save made at event `sev`, let go of
by autograd before backward at `ev` without being unpacked: its node died with an output the
script dropped; optional `nth`: its place among that event's saves of the storage; Note [A
save autograd let go of unread] in trace/collector.py) and `let_go` (the same fields: a save
that a node read at `sev`'s pairing unpack and that a graph the backward kept held on to `ev`;
Note [A node a kept graph holds on] in trace/collector.py; an `unpack` record's optional `g: 1`
says a backward that builds a graph read it, Note [Read by a backward that builds a graph],
and `again: 1` that the node's ops saved it again; `again` records (`sid`, `uev`: that
unpack's event, `ev`) say when the graph let go of that second save, Note [Saved again by a
graph-building backward])
and `inplace`
(`sid`, `op`: a storage made by an op the untraced run calls in place, `add_` for `add`;
Note [In place but for the mode] in trace/collector.py; read into the storage's `op`) and
`garbage` (`sids`: storages still live when `memledger trace` closed that were unreachable
garbage then, held by reference cycles; trace/gc_window.py) and
`lent` (`sid`, `ev`, `until`: a sparse gradient kept the storage, as its indices or values,
from `ev` to `until`, -1: to the end; or `sid`, `own`: the script let go of it at `own`,
before the gradient did, so its free is the gradient's; Note [A sparse gradient kept as
made] in trace/collector.py) and
`ungrad` (`sid`, `ev`: a gradient storage no parameter's `.grad` held from `ev` on while
it lived, `ev` -1: a `.grad` again, the drop taken back, with `at`: the event it was seen
so (Note [A gradient dropped from .grad, then put back]); the last record of a sid says;
absent in older ledgers; Note [A gradient dropped from .grad] in trace/dropped_grads.py) and
`holders` (`step`, `ev`: the step record's event, `names`: {`function:variable`: sids}, the
live saved storages the frames the step ends in hold (the script's; from the fifty-sixth
session the libraries' too, `module.function:variable`, listed in `libs`), by variable,
item (`h[0]`, `d['k']`) or receiver attribute (`self.h`); `products` (optional, the same
shape): the live storages the step before made that are not saved; absent in older
ledgers; Note [Who holds a saved storage at a step's end] in trace/step_holders.py, read by
Note [The last step's state, by its holder] in ledger/carried.py and Note [A history the
script keeps] in ledger/held_roles.py) and
`wrote_grads` (`ev`: a backward pass that ended at `ev` changed a parameter's `.grad`, a
new storage or one accumulated in place; `torch.autograd.grad` writes none; absent in
older ledgers; Note [The pass that writes the gradients] in ledger/model.py) and
`sparse` (`sid`: the storage was a part of a sparse COO tensor, the indices or values of a
sparse gradient; its free is the gradient's: Note [A sparse gradient's part ends no
backward] in replay/engine.py) and
`args` (`mod`, `ev0`, `sids`: the storages a module call was handed, parameters and buffers
left out; checkpoint holds them until the call's backward) and
`ret` (`mod`, `ev0`, `sids`: the storages a module call made that its output holds; the
caller keeps those, not a line a re-run runs again: Note [What a call hands back] in
replay/engine.py) and
`script_ckpt` (`mod`, `first`, `ev`: a checkpoint call of the script's own, the module it
checkpoints and the first module call under it; Note [The script's own checkpoint] in
trace/script_checkpoint.py) and `script_ckpt_fn` (`mod`, `fn`, `at`, `lib`, `ev`: a
checkpoint call of the script's own on a function under which no module ran, the module
whose call ran it, the function's name, the file:line of the call and the installed package
it lies in, '' for the user's own code (absent before the forty-ninth session); Note [A
policy checkpoint around a checkpointed function] in trace/script_checkpoint.py) and `root` (`mod`: a
top-level module other than the model, named as the script calls it
(Note [Root names] in trace/roots.py), as its modules'
paths begin; policies do not reach it, because
`measure` applies a policy to the model only) and `retired` (`mods`, `ev`: `root` labels that name
no top-level module from `ev` on: absorbed by the module called there, or taken by a
child of it as the model; Note [A label the model's child takes] in trace/roots.py) and `model` (`ev`: from this event on the
model's names are another module's, the student of a teacher that held them until the
first optimizer step; Note [The model] in trace/roots.py) and `stopped` (`sid`, `ev`: an
output of op `ev` freed inside that op by a checkpoint re-run's early stop, which the
allocator pass measured as the op's scratch; Note [The script's own checkpoint], 3, in
trace/script_checkpoint.py) and `hooks` (`ev`, `pack`, `module`: the script ran its
forward under saved-tensor hooks of its own, which hide its saves from the ledger; Note
[The script's own saved-tensor hooks] in trace/collector.py) and `mutated` (`sid`, `ev`, `op`: the
first op of each step that wrote a storage in place in forward or the loss (an `out=`
argument included), through the output that made it or a view of it; selective refuses to
keep it, and checkpoint and selective refuse to re-run a buffer's writer that read it
first; `rd`: the last forward event at or before the write whose op read the storage's
values, -1 if none, absent in older ledgers (read as the write's own);
Notes [Written in place in forward] and [A state the region reads before it writes] in
trace/collector.py, [State a re-run writes again] in replay/stateful.py) and `container` (`mod`, `cls`, `ev`: a module of the model with no
forward of its own, an nn.ModuleList or nn.ModuleDict, which no policy selects; Note
[Containers] in replay/policies.py) and `aliases` (`mods`, `ev`: each second path of a
module the model registers under several, tied layers, -> the path `named_modules()` names
it by; Note [A module under a second path] in trace/roots.py) and `classes` (`cls`, `ev`: path -> class name of the
model's modules that hold parameters, for a `@Class` selector over modules that never run
as calls; Note [Modules run through another method] in replay/policies.py) and `own_call`
(`mods`, `ev`: those of the model's modules holding parameters whose class has a
`__call__` of its own, which runs `forward` without torch's module hooks; Note [A class
with a call of its own] in replay/policies.py) and `method` (`mod`, `name`, `ev`: the
first time a module of the model's public method made a storage where no module call was
open, its outermost such method on the stack; Note [Work a module's method does outside
any call] in trace/collector.py, Note [The method that ran] in replay/policies.py) and
`scalars` (`device`,
`ev`, `bytes`: lists, one entry per op that was handed Python numbers for Tensor
arguments, the bytes of their 0-dim wrapped tensors and casts, transient at that op; a
number autograd saved is a storage of its own instead, op `(wrapped number)`; Note
[Wrapped scalars] in trace/scalars.py; optional `cev`, `cbytes`: the copies an op made to
cast mixed-dtype inputs, Note [Inputs an op casts]; optional `wev`, `wbytes`: per op, the
bytes of the numbers torch wrapped before it, which a dispatch mode wraps again, Note
[Numbers wrapped again under a dispatch mode]) and `stash` (`mod`, `ev0`, `sids`: storages a module
call made and kept as plain attributes of its module, a pruned `weight`, or in a list,
tuple or dict attribute; checkpoint's re-run replaces them; optional `graph`: those of them
whose autograd graph runs deeper than one op on leaves; optional `ev1`: one past the call's
last event (older ledgers lack it); Note [Tensors a call keeps on its module] in
trace/collector.py) and
`kept` (`mod`, `ev0`, `sids`: storages a module call made and put in its module's buffers,
which later calls may reuse; Note [A buffer a call makes and later calls reuse] in
trace/collector.py; optional `graph`: those of them whose autograd graph runs deeper than
one op on leaves, Note [A buffer kept without a graph] in replay/engine.py; optional
`fill`: 1 where one of them filled a name the module held no tensor under as the call
began, 2 where such a one has an autograd graph, Note [A cache emptied before every call]
in replay/engine.py; older ledgers lack it) and
`compiled` (`mod`: the class, `path`, `backend`: a torch.compile'd module, whose ledger is
its eager run; `path` and `backend` optional: older ledgers lack them) and `compiles`
(`frames`: frames Dynamo compiled in the allocator pass, which ran the compiled code; Note
[Policies inside compiled code] in trace/compiled.py; `aot`: graphs of those an AOT-autograd
backend compiled, Note [A compile by the eager backend]; optional, older ledgers lack it) and `modes` (`ev`: the first event of a
backward pass that found modules in another training mode than their latest call under
grad since the previous pass had, `from`: that previous pass's first event, -1 before the
first; `mods`, `train`: those modules' paths and the `training` flag their forward had;
`reads`: the paths of the model's modules whose code may read a flag, Note [Which modules
read a training flag] in trace/mode_readers.py, absent in older ledgers, where every module
counts; none on a loop that keeps the mode, and older ledgers lack it; Note [A re-run in
another mode] in trace/modes.py). Fake runs add `real`, `standin`, `flops` and `fake_aware`
(`lib`, `what`: a library the script imported that branches on FakeTensor; Note [Fake
runs], Rule 7, in trace/fake.py).

`memledger trace` appends, last, a `summary` record (`of`, `blake2b`, `code`, `top`, `summary`:
the summary it printed, which `show` reuses while it holds; Note [The summary kept in the
ledger] in ledger/summary_cache.py).

`memledger doctor -o` appends a `doctor` record (schema memledger.doctor/1, steps) and one
`finding` record per finding (check, severity, message, evidence, where), read with
`DoctorReport.from_ledger_extra` (memledger/doctor/findings.py); no `doctor` record means
the ledger was never doctored.

Readers ignore record kinds they do not know (a newer writer may add some); a different
schema major version is refused.
"""

from __future__ import annotations

from enum import Enum

SCHEMA = "memledger.ledger/1"
SCHEMA_FAMILY = "memledger.ledger/"
SUMMARY_SCHEMA = "memledger.summary/1"
# the `op` of a storage that is a Python number an op's autograd node saved (Note [Wrapped
# scalars saved for backward] in trace/scalars.py)
WRAPPED_NUMBER_OP = "(wrapped number)"
# the `op` of a storage another process handed over in shared memory, a DataLoader worker's
# batch (Note [Batches from other processes] in trace/collector.py)
SHARED_MEMORY_OP = "(shared memory)"
# the `op`s of a CPU generator state (`torch.get_rng_state()`, 5,056 B): one the script or a
# library keeps (Note [Generator states the script keeps] in trace/rng_state.py), torch's
# checkpoint's kept state and its re-run's fork (Note [A checkpointed function that calls no
# module] in trace/collector.py). Read back only by `torch.set_rng_state`, no op
# (Note [A generator state's read is never seen] in ledger/model.py).
GENERATOR_STATE_OPS = ("torch.get_rng_state", "get_rng_state", "fork_rng")


class Category(str, Enum):
    """What a storage is for. Every byte of the measured peak lands in exactly one."""

    PARAMETER = "parameter"              #: a module parameter (by storage identity)
    BUFFER = "buffer"                    #: a module buffer (BatchNorm running stats, ...)
    GRADIENT = "gradient"                #: a `.grad` storage of a parameter
    OPTIMIZER_STATE = "optimizer_state"  #: held in `optimizer.state` (exp_avg, step, momentum)
    ACTIVATION = "activation"            #: saved for backward by autograd, not a parameter
    TEMPORARY = "temporary"              #: created in a step, never saved: intermediates, scratch
    INPUT = "input"                      #: the batch (model inputs and loss targets)
    WORKSPACE = "workspace"              #: allocator bytes no tracked tensor explains
    OTHER = "other"                      #: created outside any step and in no role above
    COMMUNICATION = "communication"      #: a collective's buffer: all-gather / reduce-scatter
    #: in or out, a DDP gradient bucket (sharded training; Note [Sharded storages])


CATEGORIES: tuple[str, ...] = tuple(c.value for c in Category)

# When a storage has several roles, the first in this order wins: a parameter that autograd
# saves is still a parameter; the batch saved by the first Linear is still the input.
ROLE_PRIORITY: tuple[str, ...] = (
    "parameter", "buffer", "gradient", "optimizer_state", "input", "activation",
    "communication",
    "other",   # only to name it: a module the script keeps and never calls (an EMA copy)
)

# A parameter's share of the model on this rank (role records' `shard`; "" elsewhere):
# `sharded` = the local shard a rank keeps (FSDP2), `unsharded` = gathered for compute, freed
# after. Parameters of unsharded training have no shard ("").
SHARDS: tuple[str, ...] = ("sharded", "unsharded")


class Phase(str, Enum):
    """Where in the training step an event happened."""

    SETUP = "setup"            #: before the first forward (model and optimizer creation)
    FORWARD = "forward"        #: inside the forward of a module that has parameters
    LOSS = "loss"              #: after the model's forward, before backward (loss function)
    BACKWARD = "backward"      #: inside the autograd engine
    OPTIMIZER = "optimizer"    #: inside `optimizer.step()`
    ZERO_GRAD = "zero_grad"    #: inside `optimizer.zero_grad()`
    OTHER = "other"            #: between those: the next batch, gradient clipping, logging


PHASES: tuple[str, ...] = tuple(p.value for p in Phase)

# Phases whose new storages are "the batch" when the model or the loss consumes them.
INPUT_PHASES = frozenset({"setup", "other"})
