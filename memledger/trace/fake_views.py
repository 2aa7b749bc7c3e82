"""A view written in place, as its backward runs in a real run (Rule 17 of Note [Fake runs]).

# Note [A view written in place, in backward]
An in-place op on a view (`F.relu(linear(x), inplace=True)` on a 3-D input, whose output is
a view of `addmm`'s) makes autograd rebuild the view's backward node, lazily, the next time
its `grad_fn` is read. For a plain tensor it is `AsStridedBackward0`, whose backward makes a
zeroed buffer the size of the base (`new_zeros`), writes the gradient into its view of it,
and hands it to the base's `CopySlices`, which holds it until it has run. For a tensor
subclass (FakeTensor) autograd replays the view instead (`ViewBackward0` here), which makes
nothing. The choice is made in C++ by the tensor's type, so a fake run cannot take the
other branch: its ledger lacked the buffer, 131,072 B in backward for a (64, 16, 32) fp32
base (tests/clients/train_random.py, `relu_inplace`), and checkpoint over such a block was
predicted 131,072 B under from a fake ledger.

So the fake run makes the buffer itself, through the collector, where the real run does:

1. Forward: an in-place op whose written tensor is a view that requires grad is noted;
   at the next op its `grad_fn` is read (which rebuilds it, as the real run would read it
   at the next use; not while autograd replays the view for that rebuild, under the
   view's lock) and, when it is a view's backward that allocates nothing and feeds a
   `CopySlices`, a post-hook is hung on the node (once: its `metadata` says so).
2. Backward: a post-hook on that node (autograd's own `Node.register_hook`) hands on a
   fresh zeroed tensor of the gradient's shape in place of the node's view of it: made
   through the collector, an event and a storage (`new_zeros`), as the real node's buffer
   is. `CopySlices` holds it as it holds the real buffer, and the gradient the node got
   goes when the engine lets it go: at once, or later where another branch holds it too
   (a residual's), as in the real run. Two first tries did not do: a buffer made beside
   the view, held until `CopySlices` ran, read 131,072 B over where the gradient was not
   shared (the view kept it alive too); and answering the view op itself with the buffer
   left it a view of the gradient (the op's autograd wrapper makes whatever it returns
   one), which so lived through `CopySlices` all the same.

View backward nodes that allocate themselves (`SliceBackward0`, `SelectBackward0`: their
own zeros of the input's size) are left as they are. Real runs never come here.
"""

from __future__ import annotations

import torch

# backward nodes of views that make nothing (a view of the incoming gradient)
NO_ALLOC_VIEW_NODES = frozenset({
    "ViewBackward0", "UnsafeViewBackward0", "TransposeBackward0", "TransposeBackward1",
    "PermuteBackward0", "TBackward0", "UnsqueezeBackward0", "SqueezeBackward0",
    "SqueezeBackward1", "SqueezeBackward2", "AliasBackward0", "ReshapeAliasBackward0"})



class RebuiltViews:
    """Rule 17: the buffer a real run's `AsStridedBackward0` makes, made in a fake run."""

    def __init__(self) -> None:
        # views written in place, until the next op (the collector reads it first: empty
        # nearly always)
        self.written: list[torch.Tensor] = []

    def note_written(self, args: tuple, written: tuple[int, ...]) -> None:
        if not torch.is_grad_enabled():   # autograd rebuilds no node: nothing to hook (and
            return   # a view made so may refuse its `grad_fn` later: SpeechT5's init)
        for i in written:
            t = args[i] if i < len(args) else None
            if isinstance(t, torch.Tensor) and t._base is not None and t.requires_grad:
                self.written.append(t)

    def before_op(self, func, args: tuple) -> None:
        """Step 1, at an op the fake collector records while views wait to be read."""
        if not self._replaying(func, args):
            written, self.written = self.written, []
            for t in written:
                self._tag(t)

    def _replaying(self, func, args: tuple) -> bool:
        """The op may be autograd rebuilding a written view's node: a view op on its
        storage, run while autograd holds the view's lock. Reading `grad_fn` then waits on
        that lock for ever; it is read at the next op instead. Any view of the storage,
        not only of the base: a view of a view is rebuilt one view at a time (Deformable
        DETR's `delta_bbox[..., :2] += reference`, an alias and then a slice: its fake run
        hung at the slice)."""
        if not getattr(func, "is_view", False) or not args or \
                not isinstance(args[0], torch.Tensor):
            return False
        storage = args[0].untyped_storage()._cdata
        return any(t.untyped_storage()._cdata == storage for t in self.written)

    def _tag(self, t: torch.Tensor) -> None:
        g = t.grad_fn
        if g is None or type(g).__name__ not in NO_ALLOC_VIEW_NODES or not g.next_functions:
            return
        nxt = g.next_functions[0][0]
        if nxt is not None and type(nxt).__name__ == "CopySlices" and \
                not g.metadata.get(_HOOKED):
            g.metadata[_HOOKED] = True
            g.register_hook(_hand_on_a_fresh_buffer)


_HOOKED = "memledger_fresh_buffer"


def _hand_on_a_fresh_buffer(grad_inputs, grad_outputs):
    """Step 2: the node hands on a fresh buffer (made through the collector, as the real
    run's `new_zeros` is) in place of its view of the gradient, which then goes when the
    engine lets it go."""
    return tuple(g.new_zeros(g.shape) if isinstance(g, torch.Tensor) else g
                 for g in grad_inputs)
