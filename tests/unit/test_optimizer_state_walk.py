"""The walk over what an optimizer holds (memledger/trace/optimizer_state.py), on optimizers
shaped as pytorch_optimizer's keep their state (tests/clients/train_pto.py runs the real
ones): a deque of past gradients (AdaShift) and per-block dicts of lists of matrices (DASH)."""

from __future__ import annotations

import collections

import torch

from memledger.trace.optimizer_state import held_tensors


class _StateOpt(torch.optim.Optimizer):
    """An optimizer whose step only fills each parameter's state with `fill(state, p)`."""

    def __init__(self, params, fill):
        super().__init__(params, {"lr": 0.1})
        self.fill = fill

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                self.fill(self.state[p], p)


def _queue(st, p):
    """AdaShift's layout: `state[p]['grad_queue']`, a deque of gradient clones."""
    if not st:
        st["grad_queue"] = collections.deque(maxlen=3)
        st["exp_avg"] = torch.zeros_like(p)
    st["grad_queue"].append(p.grad.clone())


def _blocks(st, p):
    """DASH's layout: `state[p]['blocks'][i]['statistics'][j]`."""
    if not st:
        rows, cols = p.shape
        st["blocks"] = [{"exp_avg_sq": torch.zeros_like(p),
                         "statistics": [torch.zeros(rows, rows), torch.zeros(cols, cols)]}]


def _found(opt) -> dict[str, int]:
    return {name: t.untyped_storage().nbytes() for t, name in held_tensors(opt, lambda k: "w")}


def test_a_deque_in_the_state_is_walked():
    """Note [A queue in the state]: the two clones in the deque were not found."""
    w = torch.nn.Parameter(torch.zeros(4, 8))
    opt = _StateOpt([w], _queue)
    for _ in range(2):
        w.grad = torch.ones(4, 8)
        opt.step()
    assert _found(opt) == {"w.grad_queue[0]": 128, "w.grad_queue[1]": 128, "w.exp_avg": 128}


def test_lists_of_matrices_in_per_block_dicts_are_walked():
    """Note [Blocks of state]: the statistics, five containers deep, were not found."""
    w = torch.nn.Parameter(torch.zeros(4, 8))
    w.grad = torch.ones(4, 8)
    opt = _StateOpt([w], _blocks)
    opt.step()
    assert _found(opt) == {"w.blocks[0].exp_avg_sq": 128,
                           "w.blocks[0].statistics[0]": 4 * 4 * 4,
                           "w.blocks[0].statistics[1]": 8 * 8 * 4}


class _Applier:
    """An optimizer of the Keras API (Note [An optimizer that applies gradients],
    trace/optimizer_like.py): no torch.optim.Optimizer, no `step()`; its moments and counter
    are tensors inside plain objects, beside the model's own weights."""

    class _Var:
        def __init__(self, value):
            self._value = value

    def __init__(self, params):
        self._trainable_variables = [self._Var(p) for p in params]
        self._variables = [self._Var(torch.zeros((), dtype=torch.int32))] + \
            [self._Var(torch.zeros_like(p)) for p in params]

    def apply_gradients(self, pairs):
        for g, v in pairs:
            v._value.data.add_(g, alpha=-0.1)


def test_an_optimizer_that_applies_gradients_is_found_and_holds_its_state_alone():
    """Found by the walk over live objects, its state is its moments and its int32 counter
    (4 + 2 x 12 B), not the model's weights it holds (12 + 12 B)."""
    from memledger.trace.optimizer_like import optimizer_like_alive

    w, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(3))
    opt = _Applier([w, b])
    found: list = []
    assert optimizer_like_alive(found)[0] == ""   # no step(): not named in the line
    assert any(x is opt for x in found)
    held = list(held_tensors(opt, lambda k: "", [w, b]))
    assert sum(t.untyped_storage().nbytes() for t, _ in held) == 4 + 2 * 12
    assert [name for _, name in held] == ["_variables[0]._value", "_variables[1]._value",
                                          "_variables[2]._value"]


def test_a_dead_weakref_proxy_among_the_live_objects_is_walked_past():
    """Note [A dead proxy among the live objects] (trace/optimizer_like.py): a
    `weakref.proxy` whose referent is gone raises ReferenceError when `isinstance` asks it
    its class; the walk raised it from the collector's first backward."""
    import weakref

    from memledger.trace.optimizer_like import optimizer_like_alive

    class Thing:
        pass

    thing = Thing()
    proxy = weakref.proxy(thing)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    del thing
    found, optimizers = optimizer_like_alive()
    assert found == "" and any(o is opt for o in optimizers)
    assert proxy is not None


class _GroupStateOpt(torch.optim.Optimizer):
    """GrokAdamW's layout (grokadamw 0.1.2): the state in `param_groups[i]['state']`, a dict
    keyed by the parameters, which `load_state_dict` deep-copies with the groups."""

    def __init__(self, params):
        super().__init__(params, {"lr": 0.1})

    @torch.no_grad()
    def step(self, closure=None):
        for g in self.param_groups:
            for p in g["params"]:
                g.setdefault("state", {}).setdefault(p, {"exp_avg": torch.zeros_like(p)})


def test_tensor_keys_are_state_and_never_printed_into_names():
    """Note [A tensor as a key]: after `load_state_dict` the group's state is keyed by copies
    of the parameters. The copies (128 B) were not found, and the moment under each was named
    by the key's printed values; a key that is a parameter still names its values."""
    w = torch.nn.Parameter(torch.full((4, 8), 0.25))
    opt = _GroupStateOpt([w])

    def found() -> dict[str, int]:
        return {name: t.untyped_storage().nbytes()
                for t, name in held_tensors(opt, lambda k: "w" if k is w else "")}

    opt.step()
    assert found() == {"param_groups[0].state.w.exp_avg": 128}
    opt.load_state_dict(opt.state_dict())   # the copied groups: keys are copies of w
    opt.step()                              # a fresh state for w beside the loaded one
    assert found() == {"param_groups[0].state.keys[0]": 128,
                     "param_groups[0].state[0].exp_avg": 128,
                     "param_groups[0].state.w.exp_avg": 128}
