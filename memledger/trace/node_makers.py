"""The module whose call made each autograd node, by the node's sequence number.

# Note [The module that made a node]
A backward op was named by the module whose save its node unpacked (Note [The module of a
backward op], trace/collector.py, which now names it by the module this finds first). A
node that unpacks nothing (a `chunk`'s, a `stack`'s, a `sum`'s or a `mean`'s, a product
with a Python number's, a cast's) kept the module of whatever node unpacked last, another
module's: lucidrains' `ReversibleSequence` ends its
forward with `torch.stack(out.chunk(2, dim=-1)).sum(dim=0)`, and in backward the
`chunk`'s node makes the gradient of its input, a 2 x 32 x 32 `cat` (8,192 B, live at the
step's peak), right after the output LayerNorm's node unpacked: `show` read it "temporary
in net.to_logits.0", where it is `net.layers`' work (tests/clients/train_hlong.py --lib h
--causal --reversible; plain torch: tests/integration/test_backward_module_names.py).

Autograd gives each node a sequence number as it makes it, from a counter of the thread
that makes it, and the counter only goes up (`torch.autograd._get_sequence_nr()` reads
it). The module call running changes only at the module hooks, so the hooks note the
counter and the innermost module call open (or None: no call open) each time it changes
(`note`): every node made until the next change was made in that call. Nothing is added
to the dispatch hook in forward (most module calls make a node, so the list grows by
about one entry per module call under gradients, two ints' worth); in backward, each
node's first op asks `of` once (a bisect).

The counters are per thread. Only the tracing thread's changes are noted; a node made on
another thread (a CUDA device thread re-running a checkpointed region or building a
double-backward graph; its counter starts at 0) could carry a number from the tracing
thread's ranges, so `of` asked on a thread other than the tracing one answers only for
numbers that thread's own counter has not reached yet (nodes it cannot have made).
Nodes with no number of their own (AccumulateGrad, the graph's root: the counter's
maximum) are nobody's. DataParallel's replica threads make nodes the hooks do not note
(Note [Other threads' modules]) and are not guarded against: their numbers may read as
the tracing thread's.

The list is pruned as each backward pass ends: what was noted before the previous pass
ended goes, so what a forward made is named through the pass that follows it and the
one after (a GAN's generator graph, backward-ed after the discriminator's pass), and the
list holds about two passes' worth of entries, however many steps run. A graph kept
longer (retain_graph across steps) reads the old way for its nodes that unpack nothing.
"""

from __future__ import annotations

import bisect
import threading

import torch

# private, so looked up softly: without it no node is named by its maker
_peek = getattr(torch._C._autograd, "_get_sequence_nr", None)
# AccumulateGrad's and GraphRoot's number: no counter gave it
_NO_NUMBER = 2 ** 64 - 1


class NodeMakers:
    """Ranges of sequence numbers (`_at`, ascending) and the module call that made the
    nodes numbered from each one up to the next (`_by`; None: no call open)."""

    __slots__ = ("_owner", "_at", "_by", "_kept")

    def __init__(self, owner: int) -> None:
        self._owner = owner   # the tracing thread
        self._at: list[int] = []
        self._by: list[str | None] = []
        self._kept = 0   # entries noted before the last backward pass ended

    def note(self, mod: str | None) -> None:
        """From now on, the tracing thread's nodes are made in `mod`'s call."""
        if _peek is None or threading.get_ident() != self._owner:
            return
        seq = _peek()
        at, by = self._at, self._by
        if at and at[-1] == seq:   # no node made since the last change
            at.pop()
            by.pop()
            self._kept = min(self._kept, len(at))
        if not by or by[-1] != mod:
            at.append(seq)
            by.append(mod)

    def of(self, node: int) -> str | None:
        """The module whose call made node number `node`, or None where not known."""
        at = self._at
        if node < 0 or node >= _NO_NUMBER or not at or node < at[0]:
            return None
        if threading.get_ident() != self._owner and node < _peek():
            return None   # this thread may have made it
        return self._by[bisect.bisect_right(at, node) - 1]

    def pass_ended(self) -> None:
        """A backward pass ended: forget what was noted before the previous one ended
        (the entry open then stays: the nodes made since, until the next change)."""
        drop = max(self._kept - 1, 0)
        del self._at[:drop], self._by[:drop]
        self._kept = len(self._at)

    def __len__(self) -> int:
        return len(self._at)
