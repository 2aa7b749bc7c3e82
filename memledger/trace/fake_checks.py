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
`_memledger_healthy`) comes first; a bool stored in a variable first is followed as Note
[A check on a stored bool] says; a value read by a check of another shape (compared with
`is`, handed to another function) keeps the plain stand-in.

# Note [A check on a stored bool]
`ok = torch.allclose(a, b)` then `assert ok` (or `if not ok: raise ...`) reads the bool at
the call, whose next instruction is a store, not the jump: the plain stand-in False failed
the check. The bytecode is followed further: the call's bool is stored into a variable
whose first use after the store, in the same straight-line code (no branch, no return
between), is a load of it straight into the conditional jump. Then the jump is read as if
the call fed it (the two ways, as above). Any scope: a function's local (`STORE_FAST`), a
script's top level (`STORE_NAME`), a module's variable by `global` (`STORE_GLOBAL`), a
cell a closure shares (`STORE_DEREF`), with other instructions between, calls included.
A call between may read a module's variable or a cell (a closure made of it, made before
or after the store, is no use of it): it reads the value the check then passes, which a
passing real run had too. The one shape read wrongly is a call that rebinds the variable
(`global ok` / `nonlocal ok` in the function called): the answer then reaches no check,
and the stand-in said at the line is the only trace of it. Before (fifty-sixth session) a
module's variable had to be loaded at once and a cell was not followed: exactness over
reach, which kept the False for a check written `flag = torch.allclose(...)`, a
`print(...)`, then `assert flag`. Where the variable is used first in any other way
(stored again, deleted, passed to a call, compared with `is`), or a branch comes first,
there is no answer: Rule 3's False. Worked example (3.11): `CALL; STORE_NAME ok; LOAD_NAME
print; ...; CALL; POP_TOP; LOAD_NAME ok; POP_JUMP_FORWARD_IF_TRUE L; LOAD_ASSERTION_ERROR;
...; RAISE_VARARGS 1; L:`: False raises, so True. 3.13 fuses a local's store and the load
after it (`ok = f(); assert ok` on one line: `STORE_FAST_LOAD_FAST (ok, ok)`), and a
closure's cell is loaded by `LOAD_FAST` to make the closure: each instruction is read as
the stores and loads it does, in order (`_TOUCH`); tests/unit/test_stored_checks.py reads
the shapes under each CPython 3.12 and 3.13 it finds. A bool tensor stored first (`ok =
(x == y).all()`) needs none of this: `if not ok` calls its `__bool__` from the jump itself.
The instruction read is the one at `f_lasti` or the one whose inline caches hold it: 3.11
leaves a caller of a Python function at its CALL's last cache entry.

The user is told: the stand-in record names the line and the value, and says why
(`ANSWERED`): `show` prints "stand-in True for aten.allclose.default at hl_gauss.py:131
... (a check a real run passes: the other way raises)". A check that a real run would
fail (the script's own bug) passes under --fake: a fake run has no values to fail it on.
"""

from __future__ import annotations

import dis
import os
import sys
from bisect import bisect_right
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
# Note [A check on a stored bool]: the instructions that store, load or delete a variable,
# each as ((what, scope), ...) in the order it does them (3.13's superinstructions do two:
# STORE_FAST_LOAD_FAST stores its first name and loads its second; 3.12's LOAD_FAST_CHECK
# and 3.14's LOAD_FAST_BORROW load a local; 3.12's LOAD_FAST_AND_CLEAR, which an inlined
# comprehension uses to save and clear its loop variable, is neither a plain load nor store)
_S, _L, _X = "store", "load", "other"
_TOUCH = {
    "STORE_FAST": ((_S, "fast"),), "LOAD_FAST": ((_L, "fast"),),
    "LOAD_FAST_CHECK": ((_L, "fast"),), "LOAD_FAST_BORROW": ((_L, "fast"),),
    "LOAD_FAST_AND_CLEAR": ((_X, "fast"),), "DELETE_FAST": ((_X, "fast"),),
    "STORE_FAST_LOAD_FAST": ((_S, "fast"), (_L, "fast")),
    "LOAD_FAST_LOAD_FAST": ((_L, "fast"), (_L, "fast")),
    "LOAD_FAST_BORROW_LOAD_FAST_BORROW": ((_L, "fast"), (_L, "fast")),
    "STORE_FAST_STORE_FAST": ((_S, "fast"), (_S, "fast")),
    "STORE_DEREF": ((_S, "cell"),), "LOAD_DEREF": ((_L, "cell"),),
    "DELETE_DEREF": ((_X, "cell"),), "LOAD_CLOSURE": ((_L, "closure"),),
    "STORE_NAME": ((_S, "name"),), "LOAD_NAME": ((_L, "name"),),
    "DELETE_NAME": ((_X, "name"),),
    "STORE_GLOBAL": ((_S, "global"),), "LOAD_GLOBAL": ((_L, "global"),),
    "DELETE_GLOBAL": ((_X, "global"),),
}
_MEMLEDGER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # memledger/
_SCAN = 64   # instructions looked at on each way: a raise's message is built in fewer


def passing_value(frame: FrameType | None) -> bool | None:
    """The bool that takes `frame` past a check that would raise (Note [A check a run that
    trains passes]); None where the frame is not at such a check."""
    if frame is None:
        return None
    try:
        ins, at = _instructions(frame.f_code)
        # the instruction at `f_lasti`, or the one whose inline caches hold it: 3.11 leaves
        # a caller of a Python function at its CALL's last cache entry
        i = bisect_right(ins, frame.f_lasti, key=_offset) - 1
    except Exception:   # a code object dis cannot read: no answer, the plain stand-in
        return None
    if i < 0:
        return None
    if ins[i].opname not in _JUMPS:   # the call that gives the bool: the jump follows it
        i = _past(ins, i + 1)
        touched = _touches(ins[i]) if i < len(ins) else ()
        if touched and touched[0][0][0] == _S:   # Note [A check on a stored bool]
            i = _stored_then_jumped(ins, i)
            if i is None:
                return None
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


def _offset(op) -> int:
    return op.offset


def _past(ins: list, i: int) -> int:
    """The first instruction from `i` that is not a pass-through."""
    while i < len(ins) and ins[i].opname in _PASS_THROUGH:
        i += 1
    return i


def _touches(op) -> tuple:
    """((what, scope), name) for each variable `op` stores, loads or deletes, in order."""
    did = _TOUCH.get(op.opname)
    if did is None:
        return ()
    names = op.argval if isinstance(op.argval, tuple) else (op.argval,)
    return tuple(zip(did, names))


def _stored_then_jumped(ins: list, i: int) -> int | None:
    """For the bool stored by `ins[i]` (Note [A check on a stored bool]): the conditional
    jump on it where its first use after the store, in the same straight-line code, is a
    load of it straight into that jump; None where it is used otherwise or not so."""
    ((_, scope), name), *rest = _touches(ins[i])
    k = i
    while True:
        for n, ((what, where), other) in enumerate(rest):
            if other != name or scope == "cell" and what == _L and where != "cell":
                continue   # a closure made of the cell (3.13 loads it by LOAD_FAST)
            if what != _L or where != scope or n != len(rest) - 1:
                return None   # stored again, deleted, a closure made of it, or loaded
            j = _past(ins, k + 1)   # ... not straight into a jump
            return j if j < len(ins) and ins[j].opname in _JUMPS else None
        k += 1
        if k >= min(i + _SCAN, len(ins)):
            return None
        op = ins[k]
        if op.opname in _ENDS or op.opname in _JUMPS or op.opcode in dis.hasjrel \
                or op.opcode in dis.hasjabs:
            return None   # a branch first: the value may be read elsewhere
        rest = list(_touches(op))


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
