"""Which names of the script's own frames hold a saved storage as a step ends (`holders`
records), for the ledger's rule on the last step's carried state.

# Note [Who holds a saved storage at a step's end]
The ledger knows when a storage was made, saved, read and freed, not who held it. For a
step's carried state that is enough while a next step follows (Note [A state carried
into the next step], ledger/carried.py: that step reads it); at the close no step follows,
and the last step's state and the output the script holds until the next forward replaces
it have the same lifetime (saved, read by the backward, held past the step's end). What
tells them apart is the script: the loop binds its state to the same name every step
(`h`, `hiddens`), and its output to another (`out`). So as each step ends (the `step`
record's event; the last step's too, before the stop unwinds the script) the collector
reads the frames of the script's own files, innermost first (Note [A frame's locals, let
go of], trace/where.py: the snapshot a read makes before Python 3.13 is emptied after it),
and writes, per name, the live saved storages it holds (tests/clients/
train_carried_state.py, step 2 of 3; the batch `xs`, `y` is saved by the Linear and the
loss):

    {"k": "holders", "step": 2, "ev": 146, "names": {"main:h": [39], "main:xs": [30],
     "main:y": [31], "main:carried": [12], "main:out": [40]}}

A name is `function:variable`, an item of a tuple, list or dict (a `dict_values` view
among them: HRM-pytorch hands its hidden states so) `function:variable[i]` or
`function:variable['key']` (the first 64 items), an attribute of a method's receiver
`function:self.attr`. Only storages saved for a backward and still live are written
(the rule reads no other), so the record is a few entries a step; a walk that raises
(an object of the script's whose `__class__` raises) writes none for that step. Cost: one walk of the
script's frames per step end: about 0.4 ms for a frame holding a list of 100,000 tensors
(64 items read), a list of 20 and a dict, on this session's AMD EPYC at load 12 on 2
cores. Older ledgers have none: their last step's saves stay `activation` (Note [The last
step's state, by its holder], ledger/carried.py).
"""

from __future__ import annotations

import inspect
from itertools import islice
from types import FrameType
from typing import Any, Callable, Iterator

import torch

from memledger.trace.where import frame_locals, is_user_file

_ITEMS = 64   # items of one container, attributes of one receiver, looked at
_DICT_VIEWS = (type({}.values()), type({}.items()))


def step_holders(frame: FrameType | None, sid_of: Callable[[Any], int]) -> dict[str, list[int]]:
    """{name: sids} of the saved storages the script's own frames hold, from `frame`
    outwards (Note [Who holds a saved storage at a step's end]); `sid_of(tensor)` is the
    live saved storage's sid, or -1."""
    out: dict[str, list[int]] = {}
    f = frame
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            fn = f.f_code.co_name
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
        f = f.f_back
    return out


def _named_tensors(var: str, value: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of a variable holding a tensor, or tensors as the items of a tuple,
    list, dict or dict view (one level)."""
    if isinstance(value, torch.Tensor):
        yield var, value
    elif isinstance(value, (tuple, list, *_DICT_VIEWS)):   # a data set's list: its first
        for i, x in enumerate(list(islice(value, _ITEMS))):  # items only, never copied whole
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
