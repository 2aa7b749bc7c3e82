"""The tensors an optimizer holds: its `state`, and what it keeps anywhere else on itself.

# Note [State outside optimizer.state]
torch's optimizers keep their state in `optimizer.state[p]`, and so do most others
(lion-pytorch, torch-optimizer, schedulefree, prodigyopt, adam-mini, came-pytorch). An
optimizer written by hand need not: a momentum kept in an attribute
(`self.momenta[id(p)] = p.grad.clone()`, made at the second step) read as `temporary`, the
whole 53,008 B of a residual MLP's momenta (tests/clients/train_optimizers.py `--opt
homegrown`), and a learning rate passed as a tensor (`Adam(ps, lr=torch.tensor(1e-3))`)
lives in every param group and read as `other`. Every tensor the optimizer object reaches is
its state: `state`, each param group's entries but `params`, and its own attributes, into
dicts, lists, tuples and plain objects (GaLore keeps a projector object in `state`), a few
levels down. Modules are not followed (an optimizer that holds the model holds its
parameters, which are parameters), nor are tensors that are the optimizer's parameters or
their gradients; another optimizer reached (a Lookahead around its base) is read the same
way. The walk runs at each optimizer step's pre and post hook, on the optimizer's own
objects only: no walk over the process. A copy the optimizer holds and its step then makes
a parameter's storage (an extragradient's `p.data = copy`) takes both roles; the ledger
reads it as this state until that step frees the parameter's old storage (Note [A copy
the optimizer keeps, then the parameter], ledger/held_roles.py).

# Note [A queue in the state]
AdaShift (pytorch_optimizer 4.1.0) keeps each parameter's last `keep_num` gradients in a
`collections.deque(maxlen=keep_num)` in `state[p]['grad_queue']` (`queue.append(
grad.clone())`: the oldest falls out when it is full). A deque is no list, so the walk
passed over it: after 2 steps of tests/clients/train_pto.py `--opt create:adashift` the
two clones per parameter, 154,656 B, read as `temporary` resident at the end beside
154,656 B of optimizer state (exp_avg, exp_avg_sq); 309,312 B now. Deques are walked as
lists are.

# Note [Blocks of state]
DASH (pytorch_optimizer 4.1.0) cuts each parameter into blocks and keeps, per block, a dict
whose `statistics` and `inverse_roots` are lists of preconditioner matrices:
`state[p]['blocks'][i]['statistics'][j]`, four containers below the optimizer. The walk
stopped at four (`_DEPTH`), one short: after 2 steps of tests/clients/train_pto.py `--opt
create:dash` the 737,536 B of statistics and inverse roots read as `temporary` resident at
the end, beside 154,656 B of optimizer state; 892,192 B now. Six levels: the walk is over
the optimizer's own objects, and `seen` cuts cycles.

# Note [A tensor as a key]
grokadamw 0.1.2's `GrokAdamW` keeps its state in `param_groups[i]['state']`, a dict keyed
by the parameters. `optimizer.load_state_dict()` deep-copies the saved param groups, so
after a checkpoint is loaded in the middle of a run (tests/clients/train_grokadamw.py
`--reload-at 1`) that dict is keyed by copies of the parameters, no longer by them. The
walk named a value by its key's `str()`, and a tensor's is its printed values: the state's
names ran to 14,955 characters (`param_groups[0].state.Parameter containing:\ntensor([[
1.6070e-02, ...`), printed again at every walk (each step hook, each root forward). And it
read only the values: the copies themselves, 109,692 B held as keys by the optimizer, read
as `other` (548,460 B of `other` resident at the end after 2 steps, with the checkpoint the
script still holds). A tensor key that is no parameter of the optimizer's is now held
state (`...state.keys[i]`), and the values under it are named by the key's position
(`...state[i].exp_avg`): 438,768 B of `other`, 767,844 B of optimizer state (6 x 109,692 B
of moments and EMAs, the reloaded and the fresh, + the 109,692 B of keys). A key that is a
parameter still names its values by the parameter's name.
"""

from __future__ import annotations

import collections
from typing import Any, Iterator

import torch

# optimizer -> attribute -> dict -> object -> tensor, and state[p] -> list -> dict -> list ->
# tensor (Note [Blocks of state])
_DEPTH = 6
_SKIP_ATTRS = frozenset({"state", "param_groups", "defaults"})   # read on their own
_ATOMS = (str, bytes, int, float, bool, complex, type(None))


def held_tensors(opt: torch.optim.Optimizer, param_name,
                 params: Iterator = ()) -> Iterator[tuple[torch.Tensor, str]]:
    """(tensor, name) for each tensor `opt` holds but its parameters and their gradients.
    `param_name(key)`: the parameter's name for a state key (a parameter, or its `id()` as
    hand-written optimizers key them), or "". `params`: more parameters that are not its
    state (the model's: an optimizer with no param groups, Note [An optimizer that applies
    gradients] in trace/optimizer_like.py, holds the model's weights in its own objects)."""
    groups = getattr(opt, "param_groups", None)
    mine = [p for g in groups for p in g["params"]] if groups is not None else []
    mine += list(params)
    own = {id(p) for p in mine} | {id(p.grad) for p in mine if p.grad is not None}
    seen: set[int] = {id(opt)}
    if groups is None:
        for attr, v in vars(opt).items():
            yield from _walk(v, attr, param_name, own, seen, _DEPTH)
        return
    yield from _walk_optimizer(opt, param_name, own, seen, "")


def _walk_optimizer(opt, param_name, own, seen, prefix) -> Iterator[tuple[torch.Tensor, str]]:
    for p, state in opt.state.items():
        pname = param_name(p)
        yield from _walk(state, f"{prefix}{pname}" if pname else prefix.rstrip("."),
                         param_name, own, seen, _DEPTH)
    for i, group in enumerate(opt.param_groups):
        for key, v in group.items():
            if key != "params":
                yield from _walk(v, f"{prefix}param_groups[{i}].{key}", param_name, own,
                                 seen, _DEPTH)
    for attr, v in vars(opt).items():
        if attr not in _SKIP_ATTRS and not attr.startswith("_optimizer_"):   # torch's hooks
            yield from _walk(v, f"{prefix}{attr}", param_name, own, seen, _DEPTH)


def _walk(v: Any, name: str, param_name, own, seen, depth: int):
    if isinstance(v, _ATOMS) or depth == 0:
        return
    if isinstance(v, torch.Tensor):
        if id(v) not in own:
            yield v, name
        return
    if id(v) in seen or isinstance(v, (torch.nn.Module, type)) or callable(v):
        return
    seen.add(id(v))
    if isinstance(v, torch.optim.Optimizer):
        yield from _walk_optimizer(v, param_name, own, seen, f"{name}.")
    elif isinstance(v, dict):
        for i, (k, x) in enumerate(v.items()):
            pname = param_name(k) if isinstance(k, (torch.Tensor, int)) else ""
            if isinstance(k, torch.Tensor):   # Note [A tensor as a key]
                yield from _walk(k, _join(name, f"keys[{i}]"), param_name, own, seen,
                                 depth - 1)
                pname = pname or f"[{i}]"
            yield from _walk(x, _join(name, pname or str(k)), param_name, own, seen,
                             depth - 1)
    elif isinstance(v, (list, tuple, collections.deque)):   # Note [A queue in the state]
        for i, x in enumerate(v):
            yield from _walk(x, f"{name}[{i}]", param_name, own, seen, depth - 1)
    elif hasattr(v, "__dict__") and type(v).__module__ != "builtins":
        for k, x in vars(v).items():
            yield from _walk(x, _join(name, k), param_name, own, seen, depth - 1)


def _join(name: str, key: str) -> str:
    return key if not name else f"{name}{key}" if key.startswith("[") else f"{name}.{key}"
