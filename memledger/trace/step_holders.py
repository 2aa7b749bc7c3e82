"""Which names of the frames a step ends in hold a saved storage (`holders` records), for
the ledger's rule on the last step's carried state, which hold what the step before
made (their `products`, for Note [A history the script keeps] in ledger/held_roles.py)
and what the step made unsaved (`made`, Note [A state no op saved] in ledger/carried.py);
the frames of generators suspended at the step end too (Note [A state a suspended
generator holds], below).

# Note [Who holds a saved storage at a step's end]
The ledger knows when a storage was made, saved, read and freed, not who held it. For a
step's carried state that is enough while a next step follows (Note [A state carried
into the next step], ledger/carried.py: that step reads it); at the close no step follows,
and the last step's state and the output the script holds until the next forward replaces
it have the same lifetime (saved, read by the backward, held past the step's end). What
tells them apart is the script: the loop binds its state to the same name every step
(`h`, `hiddens`), and its output to another (`out`). So as each step ends (the `step`
record's event; the last step's too, before the stop unwinds the script) the collector
reads the frames the step passes through, the script's and the libraries' (Note [A loop a
library runs], below), innermost first (Note [A frame's locals, let
go of], trace/where.py: the snapshot a read makes before Python 3.13 is emptied after it),
and writes, per name, the live saved storages it holds (tests/clients/
train_carried_state.py, step 2 of 3; the batch `xs`, `y` is saved by the Linear and the
loss):

    {"k": "holders", "step": 2, "ev": 146, "names": {"main:h": [39], "main:xs": [30],
     "main:y": [31], "main:carried": [12], "main:out": [40]}}

A name is `function:variable` (a function of another module than the script's, a
library's among them, `module.function:variable`), an item of a tuple, list, deque or
dict (a `dict_values` view among them: HRM-pytorch hands its hidden states so)
`function:variable[i]` or `function:variable['key']` (the first 64 items), an attribute
of a method's receiver `function:self.attr`. `names` holds the storages saved for a
backward and still live; `products` (where any) the live storages the step before made
that are not saved (a loss it kept: Note [A history the script keeps]); `made` (where
any) the live storages this step made that are not saved (a hidden state no op saved:
Note [A state no op saved], ledger/carried.py; the step's output and loss beside it);
`libs` the library functions among `names`' and `made`'s (Note [A loop a library runs]).
So the record is a few entries a step; a frame whose walk raises (an object whose
`__class__` raises) adds none, the other frames still do. Cost: one walk of the step's frames per step end: about
0.4 ms for a frame holding a list of 100,000 tensors (64 items read), a list of 20 and a
dict, on the fifty-fifth session's AMD EPYC at load 12 on 2 cores; reading the
libraries' frames too (Note [A loop a library runs]) costs a Lightning step end about 0.5
ms where the script's alone cost 0.15 (about 30 more frames, each one dict and a
receiver's attributes; measured at load 13 on 2 cores), and the first step end 2 to 20 ms
more, once: each code object's file is resolved once (`_function_of`). Older ledgers
have none: their last step's saves stay `activation` (Note [The last
step's state, by its holder], ledger/carried.py).
"""

from __future__ import annotations

import gc
import inspect
import os
import weakref
from collections import deque
from itertools import islice
from types import CodeType, FrameType, GeneratorType
from typing import Any, Callable, Iterable, Iterator

import torch

from memledger.trace.where import frame_locals, is_library_file, is_user_file, library_path

_ITEMS = 64   # items of one container, attributes of one receiver, looked at
_DICT_VIEWS = (type({}.values()), type({}.items()))


def step_holders(frame: FrameType | None, sid_of: Callable[[Any], int],
                 suspended: Iterable[FrameType] = ()
                 ) -> tuple[dict[str, list[int]], list[str]]:
    """({name: sids}, library functions): the storages `sid_of` knows that the frames from
    `frame` outwards hold, the script's and the libraries' (Note [Who holds a saved storage
    at a step's end]; Note [A loop a library runs]), then the `suspended` generators'
    frames (Note [A state a suspended generator holds]); `sid_of(tensor)` is the storage's
    sid, or -1. The second item lists the name prefixes (`module.function`) of library
    frames."""
    out: dict[str, list[int]] = {}
    libs: list[str] = []
    for f in _frames(frame, suspended):
        fn = _function_of(f)
        if fn:
            try:
                _read_frame(f, fn, sid_of, out)
            except Exception:   # noqa: BLE001 - an object of a frame's that refuses to be
                pass            # read (a proxy's `__class__`): the other frames still count
            if not is_user_file(f.f_code.co_filename) and fn not in libs and \
                    any(k.startswith(fn + ":") for k in out):
                libs.append(fn)
    return out, libs


def _frames(frame: FrameType | None, suspended: Iterable[FrameType]) -> Iterator[FrameType]:
    """The stack from `frame` outwards, then the suspended generators' frames."""
    f = frame
    while f is not None:
        yield f
        f = f.f_back
    yield from suspended


# Note [A state a suspended generator holds]
# The walk reads the frames the step ends in. A library that runs its loop as a generator
# the script iterates (compressive-transformer-pytorch's `AutoregressiveWrapper(
# return_loss=True)` yields a loss per segment and keeps the segment's memories in its own
# `new_mem` for the next one; the script steps its optimizer between two yields) holds the
# state in a frame that is suspended at the step end: no frame of the stack, and the
# iterator of the script's `for` is on its frame's value stack, which no Python API reads
# (`gc.get_referents` of a running frame is empty). So no `holders` record named it:
# tests/clients/train_carried_runner.py `--runner generator` (the cell of `--runner
# library`, its loop a generator) read every state unnamed and the last step's
# `activation` (resident `activation` 544 B, `other` 512); the compressive tier's memories
# unnamed, its last step's `temporary`. What finds the generator cheaply is a forward: a
# generator whose frame keeps a step's state runs the model from that frame, so as a root
# forward begins (`Collector._module_pre`) the frames above it are looked at, and a
# generator's frame of the script's or a library's (not torch's, memledger's, the standard
# library's: `_function_of`) is kept as its generator, by weak reference, so the trace
# holds nothing of it (a frame object kept would keep a finished generator's locals
# alive). A frame names its generator from Python 3.14 only (`f_generator`); before, the
# generator is the running one (`gi_running`) whose `gi_frame` is this frame, found among
# the garbage collector's young generations first (0 and 1: it began a moment ago, at the
# `for`), the whole heap only where neither holds it (once per generator: about 40 ms with
# torch imported, 170,000 objects, on this session's box). At each step end the kept
# generators that are suspended (alive, not running: one running is on the stack already)
# are read as frames of their function, after the stack. After: `--runner generator` as
# `--runner library` (resident `activation` 32, `other` 1,024, `chunks.h (carried by
# memledger_test_tbptt)`); the compressive memories `forward.new_mem[0] (carried by
# compressive_transformer_pytorch)`, the last step's `other`. Cost: a walk of the frames
# above each root forward that begins (a few dozen attribute reads; nothing kept where no
# generator is met), and nothing at a step end where none was met.
class SuspendedGenerators:
    """Generators whose frames ran a root forward (Note [A state a suspended generator
    holds]), by weak reference."""

    def __init__(self) -> None:
        self._gens: weakref.WeakSet = weakref.WeakSet()

    def note(self, frame: FrameType | None) -> None:
        """At a root forward's start: keep the generators among the frames from `frame`
        outwards."""
        f = frame
        while f is not None:
            if f.f_code.co_flags & inspect.CO_GENERATOR and _function_of(f):
                self._keep(f)
            f = f.f_back

    def _keep(self, f: FrameType) -> None:
        if any(g.gi_frame is f for g in self._gens):
            return
        for generation in (0, 1, 2):
            for o in gc.get_objects(generation=generation):
                # running: a suspended one's `gi_frame` would be made for the comparison
                if type(o) is GeneratorType and o.gi_running and o.gi_frame is f:
                    self._gens.add(o)
                    return

    def frames(self) -> list[FrameType]:
        """The kept generators' frames, suspended now."""
        if not self._gens:
            return []
        return [g.gi_frame for g in list(self._gens)
                if not g.gi_running and g.gi_frame is not None]


# Note [A loop a library runs]
# fix55b read the script's own frames only, so a loop a library runs (a trainer's `fit`
# that carries `h` from chunk to chunk; tests/clients/train_carried_runner.py `--runner
# library`) wrote no `holders` record: the step's frames are the library's, and the
# script's frame holds the model and the data, no saved storage. Its last step's state
# stayed `activation`, and its carried states were named by their op. The frames the step
# passes through are read whoever's they are, but torch's, memledger's and the standard
# library's (their locals are the machinery's: a module call's `args`, an optimizer
# wrapper's), and named so that no two functions read as one: a frame of the script
# (`__main__`) `function:variable` as before; of another module of the user's
# `module.function:variable` (two files' `train`); of a library `module.function:variable`
# with the module its path under site-packages (`memledger_test_tbptt.loop.fit:h`), listed
# in the record's `libs` so that `show` says whose loop carries it (Note [A carried state,
# named by its holder], ledger/carried.py).
def _function_of(f: FrameType) -> str:
    """The name prefix of frame `f`'s function (Note [A loop a library runs]); "" for a
    frame of torch, memledger, the standard library or code with no file. Once per code
    object: the paths' `realpath` was four fifths of a Lightning step end's walk."""
    known = _PREFIX.get(f.f_code)
    if known is None:
        known = _PREFIX[f.f_code] = _prefix_of(f)
    return known


_PREFIX: dict[CodeType, str] = {}


def _prefix_of(f: FrameType) -> str:
    path, fn = f.f_code.co_filename, f.f_code.co_name
    if is_user_file(path):
        mod = f.f_globals.get("__name__")
        if mod == "__main__":
            return fn
        if not isinstance(mod, str) or not mod:
            mod = os.path.splitext(os.path.basename(path))[0]
        return f"{mod}.{fn}"
    if path.startswith("<") or not is_library_file(path):
        return ""
    return f"{os.path.splitext(library_path(path))[0].replace(os.sep, '.')}.{fn}"


def _read_frame(f: FrameType, fn: str, sid_of: Callable[[Any], int],
                out: dict[str, list[int]]) -> None:
    """Into `out`: `fn:name` -> sids of the tensors frame `f` names (its locals, their
    items, its method receiver's public attributes)."""
    with frame_locals(f) as local:
        names = list(local.items())
        me = local.get("self") if f.f_code.co_flags & inspect.CO_OPTIMIZED else None
    if me is not None:
        names += [(f"self.{k}", v) for k, v in _attributes(me)]
    for var, value in names:
        for name, t in _named_tensors(var, value):
            if (sid := sid_of(t)) >= 0:
                sids = out.setdefault(f"{fn}:{name}", [])
                if sid not in sids:
                    sids.append(sid)


def _named_tensors(var: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of a variable holding a tensor, or tensors as the items of a tuple,
    list, dict or dict view (one level)."""
    if isinstance(value, torch.Tensor):
        yield var, value
    elif isinstance(value, (tuple, list, deque, *_DICT_VIEWS)):   # a data set's list: its
        for i, x in enumerate(list(islice(value, _ITEMS))):  # first items, never copied
            if isinstance(x, torch.Tensor):
                yield f"{var}[{i}]", x
    elif isinstance(value, dict):   # a model's output dict too (`out["logits"]`)
        for i, (k, x) in enumerate(list(islice(dict.items(value), _ITEMS))):
            if isinstance(x, torch.Tensor):
                yield (f"{var}[{k!r}]" if type(k) in (str, int) else f"{var}[#{i}]"), x


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    """A receiver's own public attributes (never through `__getattr__`)."""
    try:
        held = object.__getattribute__(obj, "__dict__")
    except Exception:   # noqa: BLE001 - no attributes we can read
        return []
    if type(held) is not dict:
        return []
    return [(k, v) for k, v in list(islice(held.items(), _ITEMS)) if not k.startswith("_")]
