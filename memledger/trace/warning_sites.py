"""Where a warning is shown while one of memledger's torch function modes passes calls on.

# Note [A warning the script's op raised]
Python shows a warning at a frame: a warning torch raises in C++ (`float(t)` of a tensor
that requires grad: "Converting a tensor with requires_grad=True to a scalar ...", a list
of slices as an index: "Using a non-tuple sequence for multidimensional indexing is
deprecated") at the innermost Python frame, and `warnings.warn(msg, stacklevel=2)` in
torch's Python code (`F.softmax` without `dim`: "Implicit dimension choice for softmax has
been deprecated") at its caller. A `TorchFunctionMode` of memledger's (the doctor's probe,
the fake run's `KnownLiterals`) is a Python frame between the library and torch on every
call it passes on, so both kinds landed on the mode's own line: `memledger doctor` printed
"memledger/trace/doctor_probe.py:971: UserWarning: ..." (tests/clients/train_hf.py
--eval-bug sum-loss, `print(f"eval loss {float(total) ...}")`), and `trace --fake`
"memledger/trace/fake_literals.py:129: UserWarning: Using a non-tuple sequence ..." and
`return func(*args, **(kwargs or {}))` where the script run alone and `memledger trace`
show frame-averaging-pytorch's `frame_averaging.py:50`. (A dispatch mode, the collector's,
runs below C++ and is no such frame.)

While a run records, `WarningSites` re-issues a warning shown at a line of a registered
mode at the frame a run without the mode names: out from the mode's frame, past
memledger's frames and torch's function dispatch (`torch/overrides.py`), and past the
frame of the torch function the mode passed on where that function is the one that
warned (its outer call, which sent it to the mode, is the same code: with several modes,
each adds one). Worked example, `F.softmax(x)` from `lib.py:6` under `KnownLiterals`:
frames `lib.py:6` > `functional.py` softmax (outer) > `overrides.py` > the mode's
`__torch_function__` > `functional.py` softmax (inner, warns with stacklevel 2): the
warning lands on the mode; out from it, `overrides.py` and the outer softmax are skipped,
and it is shown at `lib.py:6`, as without memledger. The re-issued warning goes through
`warnings.warn_explicit` with the library frame's module, registry and globals, so the
script's filters by module (`ignore::UserWarning:frame_averaging`) and "once per
location" apply as in a run without memledger; for that, a filter `always` for the
modes' own modules sits first while the run records (a warning at a mode's line is never
shown there, and leaves nothing in the mode's registry that would hide the next one).
Known limitations: a filter the script puts first (`simplefilter("once")`) acts on the
mode's line before this does; `warnings.catch_warnings(record=True)` inside the script
records the mode's line (it resets `showwarning`).
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from types import FrameType

_MEMLEDGER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # memledger/
_SKIPPED = (os.sep + os.path.join("torch", "overrides.py"),)   # torch's function dispatch


class WarningSites:
    """While entered, a warning shown at a line of one of `modules` (a memledger torch
    function mode) is shown where a run without it shows it (Note [A warning the script's
    op raised]).

    Example usage::

        with WarningSites(__name__):   # around the run the mode is active in
            ...
    """

    def __init__(self, *modules: str) -> None:
        self.modules = modules
        self._files = frozenset(os.path.abspath(sys.modules[m].__file__) for m in modules)
        self._show = self._show_warning   # one bound method: compared by identity at exit
        self._previous = None
        self._filter = None

    def __enter__(self) -> "WarningSites":
        self._previous = warnings.showwarning
        warnings.showwarning = self._show
        warnings.filterwarnings("always", module="|".join(
            re.escape(m) + r"\Z" for m in self.modules))
        self._filter = warnings.filters[0]
        return self

    def __exit__(self, *exc) -> None:
        if warnings.showwarning is self._show:
            warnings.showwarning = self._previous
        if self._filter in warnings.filters:
            warnings.filters.remove(self._filter)

    def _show_warning(self, message, category, filename, lineno, file=None, line=None):
        site = _site(filename, lineno) if os.path.abspath(filename) in self._files else None
        if site is None:
            return self._previous(message, category, filename, lineno, file, line)
        g = site.f_globals
        warnings.warn_explicit(message, category, site.f_code.co_filename, site.f_lineno,
                               module=g.get("__name__", "<unknown>"),
                               registry=g.setdefault("__warningregistry__", {}),
                               module_globals=g)


def _site(filename: str, lineno: int) -> FrameType | None:
    """The frame a run without memledger's mode shows a warning at, for one shown at the
    mode's `filename:lineno` (None where that frame is not on the stack)."""
    here = os.path.abspath(__file__)
    f, inner = sys._getframe(2), None
    while f is not None and not (f.f_code.co_filename == filename and f.f_lineno == lineno):
        if f.f_code.co_filename not in (warnings.__file__, here):
            inner = f.f_code   # the code that warned, where it is Python's
        f = f.f_back
    if f is None:
        return None
    f = f.f_back
    while f is not None and (f.f_code.co_filename.startswith(_MEMLEDGER)
                             or f.f_code.co_filename.endswith(_SKIPPED)
                             or f.f_code is inner):
        f = f.f_back
    return f
