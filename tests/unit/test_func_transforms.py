"""Note [torch.func transforms under memledger's hooks] (memledger/trace/func_transforms.py):
memledger's own saved-tensor hooks step aside while a transform runs; a stack with a hook
of the script's is left to torch, which refuses as it does without memledger."""

import pytest
import torch
from torch.func import grad

from memledger.trace.func_transforms import func_transforms_step_aside, in_func_transform


def _ours_pack(t):
    return t


_ours_pack.__module__ = "memledger.trace.collector"   # as the collector's pack hook


def _loss(w, x):
    return (w.sin() * x).sum()


def test_memledger_hooks_step_aside_and_come_back():
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    seen, inside = [], []

    def pack(t):
        seen.append(t.shape)
        return t
    pack.__module__ = "memledger.trace.collector"

    def loss(w_):
        inside.append(in_func_transform())
        return _loss(w_, x)

    with func_transforms_step_aside(), torch.autograd.graph.saved_tensors_hooks(pack,
                                                                                  lambda t: t):
        g = grad(loss)(w)
        assert torch._C._autograd._top_saved_tensors_default_hooks(True)[0] is pack
        (w.cos() * x).sum()   # after the transform the hook sees saves again
    assert torch.equal(g, w.cos() * x)
    assert inside == [True] and not in_func_transform()
    assert seen == [torch.Size([3])]   # cos(w), after; sin(w) saved inside it is not seen
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def test_a_hook_of_the_scripts_own_is_refused_as_torch_refuses():
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    with func_transforms_step_aside(), \
            torch.autograd.graph.saved_tensors_hooks(_ours_pack, lambda t: t), \
            torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        with pytest.raises(RuntimeError, match="don't yet support saved tensor hooks"):
            grad(lambda w_: _loss(w_, x))(w)
        top = torch._C._autograd._top_saved_tensors_default_hooks(True)
        assert top is not None and top[0] is not _ours_pack   # both still on the stack
    assert torch.autograd.graph.disable_saved_tensors_hooks.__module__ == "torch.autograd.graph"


def test_a_transform_inside_the_scripts_own_checkpoint_is_said_so(tmp_path):
    """The one line once advised "an option that does without torch.func" for every script
    that differentiated with it; it is said now only where a hook of the script's own (its
    checkpoint here) is around the transform, which torch refuses without memledger too."""
    from memledger.errors import EXIT_USAGE
    from memledger.ledger.writer import MemorySink
    from memledger.trace.collector import Collector
    from memledger.trace.script import run_and_classify

    script = tmp_path / "own_checkpoint.py"
    script.write_text(
        "import torch\n"
        "from torch.func import grad\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "lin = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(lin.parameters(), lr=0.1)\n"
        "def inner(x):\n"
        "    g = grad(lambda w: (x @ w).pow(2).sum())(torch.ones(4, 4))\n"
        "    return lin(x) * g.sum()\n"
        "checkpoint(inner, torch.randn(3, 4), use_reentrant=False).sum().backward()\n"
        "opt.step()\n")
    with Collector(MemorySink()):
        outcome = run_and_classify(script, [])
    assert outcome.code == EXIT_USAGE
    assert outcome.reason == (
        "the script differentiates with torch.func (grad, vjp, jacrev) under saved-tensor "
        "hooks of the script's own (its checkpoint or offload around the call), which "
        "torch.func's transforms refuse with or without memledger; call the transform "
        "outside those hooks")
