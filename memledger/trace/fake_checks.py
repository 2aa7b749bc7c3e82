"""Rule 34 of Note [Fake runs] (trace/fake.py): a bool read off values that decides whether
the code reading it raises.

# Note [A check a run that trains passes]
A check a script or a library makes on values (`assert torch.allclose(a, b)`, `assert
torch.equal(x, y)`, `assert (x == y).all()`, `if not ok.all(): raise ValueError(...)`) is
a bool a fake run does not have. Rule 3's stand-in False failed every such check that a
real run passes: hl-gauss-pytorch checks at init that its symlog transform is inverted by
its symexp, `assert torch.allclose(symexp(symlog(t)), t, atol=1e-4)` on `torch.randn(10) *
10`, and `trace --fake -- --symlog` stopped there with the library's AssertionError
(tests/clients/train_hl_gauss.py, exit 3).

The answer is read off the code that asks, not off the values: the frame that reads the
bool (the innermost one outside memledger: the library's line, or torch's own where torch
asks, `torch._assert`) is at a conditional jump, either the call that gives the bool
followed by one (`torch.allclose(...)`, `.item()`, `bool(t)`) or the jump itself (an
`assert` or an `if` on a tensor calls `__bool__` from it). Where one of the two ways on
goes straight to a `raise` (its straight-line code, the exception built and raised, no
branch, no return first: an `assert`'s own failure, or `raise X(...)` as the `if`'s body)
and the other does not, the stand-in is the value that goes on: a real run that trains
does not raise there. Worked example: `assert torch.allclose(y, x, atol=1e-4), 'msg'`
compiles (Python 3.11) to `CALL; POP_JUMP_FORWARD_IF_TRUE L; LOAD_ASSERTION_ERROR;
LOAD_CONST 'msg'; PRECALL; CALL; RAISE_VARARGS 1; L: ...`: False falls through to the
raise, so the stand-in is True. `if torch.allclose(x, y): return identity` (equiformer's
rotation of an edge already on the y axis) raises on neither way: Rule 3's False, as
before, since random points are not on the axis. A finiteness answer (Rule 3's
`_memledger_healthy`) comes first; a value read by a check of another shape (stored in a
variable first, compared with `is`, handed to another function) keeps the plain stand-in.

The user is told: the stand-in record names the line and the value, and says why
(`ANSWERED`): `show` prints "stand-in True for aten.allclose.default at hl_gauss.py:131
... (a check a real run passes: the other way raises)". A check that a real run would
fail (the script's own bug) passes under --fake: a fake run has no values to fail it on.
"""

from __future__ import annotations

import dis
import os
import sys
from functools import lru_cache
from types import CodeType, FrameType

# what a stand-in record says of a value answered so
ANSWERED = "a check a real run passes: the other way raises"

# conditional jumps, by whether they jump when the value is true (3.11 names the direction,
# 3.12 and later do not; JUMP_IF_*_OR_POP are `a or b` / `a and b` kept as a value)
_JUMPS = {
    "POP_JUMP_IF_TRUE": True, "POP_JUMP_FORWARD_IF_TRUE": True,
    "POP_JUMP_BACKWARD_IF_TRUE": True, "JUMP_IF_TRUE_OR_POP": True,
    "POP_JUMP_IF_FALSE": False, "POP_JUMP_FORWARD_IF_FALSE": False,
    "POP_JUMP_BACKWARD_IF_FALSE": False, "JUMP_IF_FALSE_OR_POP": False,
}
# between the call that gives the bool and the jump (3.13's TO_BOOL, 3.14's NOT_TAKEN)
_PASS_THROUGH = frozenset({"TO_BOOL", "NOT_TAKEN", "CACHE", "EXTENDED_ARG", "NOP"})
_ENDS = frozenset({"RETURN_VALUE", "RETURN_CONST", "RERAISE", "YIELD_VALUE",
                   "RETURN_GENERATOR"})
_RAISE = "RAISE_VARARGS"
_MEMLEDGER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # memledger/
_SCAN = 64   # instructions looked at on each way: a raise's message is built in fewer


def passing_value(frame: FrameType | None) -> bool | None:
    """The bool that takes `frame` past a check that would raise (Note [A check a run that
    trains passes]); None where the frame is not at such a check."""
    if frame is None:
        return None
    try:
        ins, at = _instructions(frame.f_code)
        i = at.get(frame.f_lasti)
    except Exception:   # a code object dis cannot read: no answer, the plain stand-in
        return None
    if i is None:
        return None
    if ins[i].opname not in _JUMPS:   # the call that gives the bool: the jump follows it
        i += 1
        while i < len(ins) and ins[i].opname in _PASS_THROUGH:
            i += 1
        if i >= len(ins) or ins[i].opname not in _JUMPS:
            return None
    jump = ins[i]
    if not isinstance(jump.argval, int) or jump.argval not in at:
        return None
    on_true = _JUMPS[jump.opname]          # the value with which the jump is taken
    jumped, fell = _raises(ins, at[jump.argval]), _raises(ins, i + 1)
    if jumped == fell:
        return None
    return (not on_true) if jumped else on_true


def _raises(ins: list, i: int) -> bool:
    """Whether the straight-line code from instruction `i` raises before any branch."""
    for k in range(i, min(i + _SCAN, len(ins))):
        op = ins[k]
        if op.opname == _RAISE:
            return True
        if op.opname in _ENDS or op.opcode in dis.hasjrel or op.opcode in dis.hasjabs:
            return False
    return False


@lru_cache(maxsize=512)
def _instructions(code: CodeType) -> tuple[list, dict[int, int]]:
    """`code`'s instructions, and each one's index by its offset (`f_lasti`)."""
    ins = list(dis.get_instructions(code))
    return ins, {op.offset: k for k, op in enumerate(ins)}


def reading_frame() -> FrameType | None:
    """The frame that reads a value off a fake tensor: the innermost one outside memledger
    (torch's own where torch asks: `torch._assert`)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_MEMLEDGER):
        f = f.f_back
    return f
