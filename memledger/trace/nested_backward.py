"""A backward pass that a node's own backward starts: the node it runs inside, suspended.

# Note [A backward pass run inside a node]
Each unpack record says when the node that unpacked the save returned (`end`) and when
autograd let go of it (`rel`): the collector closes a node's records when an op or an
unpack of another node comes (Note [When an unpacked tensor goes], trace/collector.py). A
custom Function's backward may run backward passes of its own inside its apply:
torchdiffeq's `odeint_adjoint` (and torchcde's `cdeint(..., adjoint=True)`, which calls
it) unpacks the forward solve's output `y` and then solves the adjoint ODE, calling
`torch.autograd.grad` through the vector field at every solver stage, with `y` held in
its frame until it returns. The first node of the first nested pass closed the adjoint
node's records, so its unpack of `y` read as returned right there, thousands of events
before the node did. That record is what tells the replay how long a storage saved both
by a policy's region and by a node outside it stays (`_release_partly_saved`,
replay/engine.py): torchcde's neural CDE, `offload:readout` (the readout Linear saves its
input, a view of the adjoint's output, which the adjoint node saved too), let the (2, 8,
8) fp32 output go inside the adjoint's backward solve, and read 512 B under measured
(tests/clients/test_torchcde_clients.py). A reentrant checkpoint's backward is such a
node too (it runs `torch.autograd.backward` on its re-run).

So a node whose apply starts a nested pass is suspended with its unpacks (`Suspended`),
the nested pass's nodes are recorded as any, and the node resumes when an op or an unpack
of it comes again in its own graph task: its records then end where its apply really
ended (where another node of that task comes first, the node returned with its nested
pass, and ends there). A new graph task alone does not say "nested": two `backward()` calls with no op
between them start one task after the other, and a tensor hook may run a backward pass of
its own between two nodes (sentence-transformers' GradCache re-runs its mini-batches in
one), after the node that unpacked last has returned. So only the node whose own custom
`apply` frame is on the thread's stack above the nested engine call is set aside
(`started_inside`); that frame is there on a CUDA device thread too, where the script's
own frames are not.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

_GRAPH_PY = os.path.join("torch", "autograd", "graph.py")
_FUNCTION_PY = os.path.join("torch", "autograd", "function.py")
_NODE_APPLY = ("BackwardCFunction.apply", "BackwardCFunction.apply_boxed")


def started_inside(node: int) -> bool:
    """Whether the backward pass running now on this thread was started inside the apply
    of autograd node `node` (its sequence number): a custom Function's backward
    (`BackwardCFunction.apply`, whose `self` is the node) above the innermost engine call
    on the stack."""
    f = sys._getframe(1)
    engine = False
    while f is not None:
        code = f.f_code
        if not engine:
            engine = code.co_name == "_engine_run_backward" and \
                code.co_filename.endswith(_GRAPH_PY)
        elif getattr(code, "co_qualname", "") in _NODE_APPLY and \
                code.co_filename.endswith(_FUNCTION_PY):
            me = f.f_locals.get("self")
            try:
                if me is not None and me._sequence_nr() == node:
                    return True
            except (AttributeError, RuntimeError):
                pass
        f = f.f_back
    return False


@dataclass
class Suspended:
    """A node's unpack state, set aside while the backward pass it started runs."""

    node: int            # its sequence number
    task: int            # its graph task
    unpacks: list
    apply_end: int
    validated: bool
    released: bool
    saved_again: set = field(default_factory=set)
