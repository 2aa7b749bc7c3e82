"""Forwards under gradients whose graph no backward used.

# Note [A graph no backward used]
A forward run with gradients on builds a graph and saves, for its backward, what its ops
need (activations, masks, the inputs of every Linear): the training step's memory. An
evaluation or logging forward left outside `torch.no_grad()` (a validation loop, metrics
on the training batch, a teacher whose output is detached) does the same for a backward
that never comes: its saves stay until the graph is dropped, often through the peak of the
step that follows. At each top-level module call under gradients (no module call around it,
not inside backward: a checkpoint's re-run is backward's own), the probe registers one
pre-hook on the graph nodes that made the call's outputs; the hook fires when a backward or
`torch.autograd.grad` runs any of them. An object the hooks share notes the call; it dies
with the last of those nodes, and if no hook fired, the graph went unused: one
`unused_graph` record (the call's line, its variable, the step). A graph kept past the run's
end is not judged.

Example: `tests/doctor/eval_mode.py --fixed --grad-validation` validates on 2 batches after
each step without `torch.no_grad()`: "`model` (Sequential) ran 4 forwards under gradients
in step 2, 3 whose graph no backward used" at the validation line (a call after a step's
boundary is the next step's; the last step's is not judged: the doctor's stop drops graphs
the next step would have used). WGAN-GP's critic step `fake = G(z).detach()`
(`gradient_penalty.py --fixed`): 3 forwards of `G`.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.nn.utils import parametrize

from memledger.crash import internal
from memledger.trace.where import (frame_names, is_user_file, library_caller, library_runner,
                                   user_frame, user_name_of)

_Tensor = torch.Tensor
_PARAMETRIZED = parametrize.ParametrizationList


class UnusedGraphWatch:
    """Kept by the doctor's probe: appends `unused_graph` records to `records` while
    entered; `step()` gives the training step running."""

    def __init__(self, records: list[dict[str, Any]], step: Callable[[], int],
                 backwards: Callable[[], int] = lambda: 0) -> None:
        self.records, self.step, self.backwards = records, step, backwards
        self.active = False
        self._depth = 0
        self._backwards_at_call = 0   # Note [A call that runs backward itself]
        self._handles: list[Any] = []

    def __enter__(self) -> "UnusedGraphWatch":
        self._handles = [
            nn_module.register_module_forward_pre_hook(internal(self._pre)),
            nn_module.register_module_forward_hook(internal(self._post), always_call=True),
        ]
        self.active = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active = False   # graphs alive at the end are not judged
        for h in self._handles:
            h.remove()
        self._handles = []

    def _pre(self, module: nn.Module, args: Any) -> None:
        if not self._depth:
            self._backwards_at_call = self.backwards()
        self._depth += 1

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth or not torch.is_grad_enabled() or \
                torch._C._current_graph_task_id() != -1 or type(module) is _PARAMETRIZED:
            return   # a parametrization's call is a weight read (`spectral_norm`), no forward
        if self.backwards() != self._backwards_at_call:
            return   # Note [A call that runs backward itself]
        nodes = {id(n): n for n in (t.grad_fn for t in _tensors_in(output)) if n is not None}
        if not nodes or not _saved_anything(list(nodes.values()), args):
            return   # Note [A graph that saved nothing]
        f = user_frame(2)
        file, line = (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)
        var = user_name_of(module)[0]
        call = _Call(self, {"k": "unused_graph", "step": self.step(),
                            "var": var, "cls": type(module).__name__,
                            # Note [Calls inside a model the script names]
                            "owner": "" if var else _owner_of(module),
                            "training": bool(module.training), "file": file, "line": line,
                            # Note [A call that runs backward itself]
# A module may run backward inside its own forward and return a loss that still carries the
# graph it backpropagated: recurrent-memory-transformer's wrapper with
# `memory_replay_backprop=True` re-runs each segment, calls `backward(retain_graph=True)`
# on its weighted loss and returns their sum, as the repository's train.py uses it (the
# script sums the returned losses and steps; it never calls backward). The sum's own node
# never runs, so the watch read "`wrapper` ran 4 forwards under gradients in step 1, 2
# whose graph no backward used ... run it under torch.no_grad()", advice that would stop
# the training. A top-level call during which the probe saw a backward begin is not
# judged: its graph's nodes below the returned sum are the ones that backward ran.

# Note [A library's call no backward used]
                            "via": library_caller(f),
                            # Note [A library's own forward from the script's line]
                            # Note [A forward called as a method] (trace/where.py)
                            "ran_by": library_runner(2, past_forwards=True)})
        for n in nodes.values():
            try:
                n.register_prehook(call.ran)   # the node holds the call, not the reverse
            except (AttributeError, RuntimeError):
                call.used = True   # a node that takes no hook: not judged
                return


# Note [A library's call no backward used]
# The line of a finding is the innermost frame of the script's own code; when a library's
# code called it, the fix may not be the script's to make. torchsde's `sdeint` checks its
# SDE's shapes by calling the user's `f` and `g` once per solve, under gradients, and drops
# the results (`check_contract`, torchsde/_core/sdeint.py): "a `Drift` ran 3 forwards under
# gradients ... whose graph no backward used" pointed at the user's `def f` body, where no
# `no_grad()` can go. The record keeps the library frame that called the script's (`via`),
# and the finding names it. torch's and memledger's frames are not a library's here.


# Note [A library's own forward from the script's line]
# A library may run the script's model itself, under gradients, because it needs the graph:
# torch-pruning's `DependencyGraph().build_dependency(model, example_inputs)` runs one
# forward and walks its outputs' `grad_fn`s to learn which layers' channels depend on which
# (under no_grad there is no graph and it fails). The script's line is the
# `build_dependency` call; the doctor said "`model` (ConvNet) ran 1 forward under gradients
# in step 1 whose graph no backward used: ... (an evaluation or logging forward?); run it
# under torch.no_grad() or torch.inference_mode()", advice that breaks the library
# (tests/clients/train_pruning.py --prune dg: the graph, 99.1 KiB of a batch of one, was
# kept by the dependency graph's reference cycle through step 1's peak). The record keeps
# the library line that made the module call (`ran_by`: the first frame outside torch,
# memledger and the standard library, when it is not the user's), and the finding names it
# and says what to do when the library needs the graph.


# Note [Calls inside a model the script names]
# A model run through a method of its own rather than its call makes each submodule's call
# top-level (Note [Calls no variable names], doctor/unused.py): MEGABYTE-pytorch's
# `generate`, which its train.py calls between training steps (`model.generate(prime)`),
# runs `self.forward(seq)` per sampled byte, under gradients (the method has no
# `no_grad`). The doctor said "modules no variable of the script names (`Identity` x4,
# `Sequential` x8, `Transformer` x8, `Embedding` x4, `Linear` x4) ran 28 forwards under
# gradients ..." on the script's `model.generate` line, though the script names them all:
# they are `model`'s (tests/clients/train_megabyte.py --generate). The record now keeps
# the innermost user frame's variable (a local, a global, an attribute of a local) holding
# a module the call's module sits inside, and the finding names it where every call of the
# line's finding is that model's (TabNet's `explain` also calls a `ReLU()` it makes inline,
# no module of `network`: its finding keeps the old words).
def _owner_of(module: nn.Module) -> str:
    """The name of the innermost user frame's variable that holds a module `module` is a
    submodule of; "" when none does."""
    f = sys._getframe(1)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            for name, v in frame_names(f):
                if isinstance(v, nn.Module) and v is not module and \
                        any(m is module for m in v.modules()):
                    return name
        f = f.f_back
    return ""


class _Call:
    """One top-level call's graph: dies with the last of its output nodes."""

    def __init__(self, watch: UnusedGraphWatch, rec: dict[str, Any]) -> None:
        self.watch, self.rec, self.used = watch, rec, False

    def ran(self, grad_outputs: Any) -> None:
        self.used = True

    def __del__(self) -> None:
        if not self.used and self.watch.active:
            self.watch.records.append(self.rec)


# Note [A graph that saved nothing]
# The finding's cost is what the call's graph saved for backward. A call can build a graph
# that saves nothing: cooper's `DenseMultiplier` returns `torch.clone(self.weight)`, called
# once for the primal Lagrangian, which uses the value detached (`multiplier.detach() *
# violation`: the primal update takes no gradient of the multiplier), and once for the dual
# one, which backpropagates it. The first clone's graph (one CloneBackward0 node, then the
# weight's AccumulateGrad) saves no tensor and goes unused by design, every roll of every
# constrained optimizer, and the doctor warned "a `DenseMultiplier` ran 1 forward under
# gradients in step 1 whose graph no backward used ... autograd kept what it saved ...
# turn that forward off by the library's setting where it has one, or tell its authors"
# (tests/clients/train_cooper.py, 3 steps), about 0 B. The call's own nodes (those its
# outputs reach, short of its inputs' nodes and the leaves' AccumulateGrad) are walked for
# a tensor saved for backward (`_raw_saved_*`, which reads no save back: Note [A graph read
# unseen] in trace/collector.py, a custom Function's ctx counted as saving): one found
# (a Linear's at the first node, for a model's forward) keeps the record, none drops it.
# A graph past `_WALK_BUDGET` nodes is taken to have saved something.
_WALK_BUDGET = 2_000
_RAW_SAVED: dict[type, bool] = {}


def _saves(node: Any) -> bool:
    """Whether `node`'s type saves tensors for backward (a custom Function's always may)."""
    tp = type(node)
    got = _RAW_SAVED.get(tp)
    if got is None:
        got = _RAW_SAVED[tp] = any(a.startswith("_raw_saved_") for a in dir(tp)) or \
            hasattr(tp, "saved_tensors")
    return got


def _saved_anything(outputs: list[Any], args: Any) -> bool:
    """Whether the graph a call built (from its outputs' nodes `outputs` down to its
    inputs' nodes) saved any tensor for backward: Note [A graph that saved nothing]."""
    # sequence numbers, not id(): a node's Python wrapper is made per access
    stop = {t.grad_fn._sequence_nr() for t in _tensors_in(args) if t.grad_fn is not None}
    seen: set[int] = set()
    todo = list(outputs)
    while todo:
        node = todo.pop()
        if node is None or hasattr(node, "variable"):
            continue   # a leaf's AccumulateGrad
        seq = node._sequence_nr()
        if seq in seen or seq in stop:
            continue   # met already, or an input's history
        if _saves(node) or len(seen) >= _WALK_BUDGET:
            return True
        seen.add(seq)
        todo.extend(f for f, _ in node.next_functions)
    return False


def _tensors_in(x: Any, depth: int = 3) -> list[_Tensor]:
    """The tensors of a module's output: itself, or inside tuples, lists and dicts
    (transformers' ModelOutput), `depth` levels down."""
    if isinstance(x, _Tensor):
        return [x] if x.requires_grad else []
    if depth == 0:
        return []
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors_in(v, depth - 1)]
    return []
