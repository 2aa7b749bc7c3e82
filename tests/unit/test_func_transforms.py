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
