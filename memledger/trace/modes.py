"""The modules whose training flag a backward finds other than their forward had.

# Note [A re-run in another mode]
A checkpoint (or selective checkpoint) re-runs its region in backward with the modules as
they are then, not as the forward had them. pytorch-accelerated's
`StepBasedEvaluationCallback` runs an evaluation between a micro-batch's forward and its
backward and leaves the model in eval mode (tests/clients/train_eval_between.py does the
same in plain torch): the forward ran dropout and batch norm in train mode, the re-run
would run them in eval mode and compute other values. torch's checkpoint failed the re-run
("A different number of tensors was saved"), which measure said as "cannot re-run ...:
torch's checkpoint found the re-run unlike the first run", while predict, which saw no
mode, priced every such policy (hunt49b: `checkpoint:blocks.*` 90,876 B, `selective:@Block`
99,068 B). A module that reads its flag in a way no check of torch's sees (a noise scale)
would have given other gradients silently.

The trace now keeps each module's training flag at its latest call under grad since the
last backward began (one dict store per call), and as a backward pass begins writes one
`modes` record (`ev`: the pass's first event, `from`: the previous pass's, -1 before the
first; `mods`, `train`: the paths whose flag changed, and the flag their forward had;
`reads`: the paths of the model's modules whose code may read a flag, Note [Which modules
read a training flag] in trace/mode_readers.py) where any changed; an ordinary loop writes
none. predict refuses a re-run call made between `from` and `ev` whose region holds such a
module and a module that reads a flag (replay/engine.py, `_refuse_other_mode`), and
measure checks each region's flags as its re-run starts against those its first run began
with, and its modules' code (`_Recompute` in measure/apply.py): both say `mode_message`'s
line (replay/stateful.py), naming the region backward re-runs first and the first module
of it, by path, whose mode moved. Offload re-runs nothing and stays predicted.

Until the fiftieth session every moved module counted, a Linear too (a block of Linear,
GELU and LayerNorm re-run in eval mode computes what its forward did, and was refused);
a region now counts only where some module of it reads a flag (the moved one, or a parent
reading its child's). Older ledgers have no `reads`: every module counts there, as before.
"""

from __future__ import annotations

import weakref

from typing import Callable, Iterable

from memledger.ledger.writer import Sink
from memledger.trace.mode_readers import reads_a_flag


def modes_at_backward(sink: Sink, seen: dict[str, tuple[weakref.ref, bool]], began: int,
                      ev: int, modules: Callable[[], Iterable]) -> int:
    """As a backward pass begins at `ev`: write a `modes` record for the modules of `seen`
    (path -> (weak module, flag at its forward)) whose flag is now another, with the paths
    of `modules()` ((module, path) pairs: the model's) whose code may read a flag, then
    forget them. Returns `ev`, the new `from`."""
    moved = [(path, was) for path, (ref, was) in seen.items()
             if (m := ref()) is not None and bool(m.training) != was]
    if moved:   # Note [Which modules read a training flag] (trace/mode_readers.py)
        reads = sorted({path for m, path in modules() if reads_a_flag(m)})
        sink.write({"k": "modes", "ev": ev, "from": began,
                    "mods": [p for p, _ in moved], "train": [w for _, w in moved],
                    "reads": reads})
    seen.clear()
    return ev
