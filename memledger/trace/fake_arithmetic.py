"""A fake run's stand-in zero that the script then divides by (Note [Fake runs], Rule 31).

# Note [Arithmetic on a stand-in]
A fake tensor has no values, so `.item()` and its kin get Rule 3's stand-in: 0.0 for a
float (0, False for integer and bool tensors). A script that only logs the value runs on;
one that computes with it can meet the one number Python arithmetic refuses. D-Adaptation's
DAdaptSGD takes the gradients' norm as `math.sqrt` of `(grad * grad).sum().item()` sums and
divides by it (`dlr = d*lr/g0_norm`): a fake run raised `ZeroDivisionError` in the library,
printed the traceback and ended as the script's own failure (exit 3), with a line that
named the last stand-in as a branch it may have taken. The script runs fine; it is the
fake run that cannot go on, which is Rule 3's exit 2, in one line, as for the other value
reads a fake run lacks.

The rule: a `ZeroDivisionError`, or `math`'s "math domain error" (`math.log(0.0)`), that
the script (or a library it called) raises after the run handed out a stand-in zero is a
fake run's limit, not the script's failure: exit 2, one line that names the script's line,
the library's line where a library raised it, and the last stand-in zero (its op and its
line), no traceback. A script that divides by zero with no stand-in zero made before is
the script's own failure (exit 3, as before). Which value fed the division is not known
(Python floats carry no history), so the line names the last zero handed out; a real run
that divides by zero too is then told to trace for real, which shows its own traceback.

Why not a non-zero stand-in (1.0), which would let DAdaptSGD trace: Rule 3's 0.0 is
documented and pinned across the fake tier (losses logged, stopping rules such as `if
loss.item() < target` that stop at once), and a non-zero one is as made-up: it moves
D-Adaptation's step size `d` to values no real run has, and a script that branches on it
may run code the real run never runs, silently. Stopping says so. Nothing here is on the
per-op path: it runs once, on the exception that ended the script.
"""

from __future__ import annotations

import os

# the errors Python raises for a zero where a number must be non-zero
_ZERO_ERRORS = (ZeroDivisionError,)
_DOMAIN = "math domain error"

# how the stand-in's op is called in the script's words
_CALLED = {"aten._local_scalar_dense": "`.item()` (aten._local_scalar_dense)",
           "Tensor.numpy": "`.numpy()`"}


def is_zero_error(err: BaseException) -> bool:
    """A division (or modulo) by zero, or `math`'s domain error (`math.log(0.0)`)."""
    return isinstance(err, _ZERO_ERRORS) or \
        (isinstance(err, ValueError) and str(err) == _DOMAIN)


def zero_arithmetic_line(err: BaseException, where: str, raised: tuple[str, str] | None,
                         standin: dict) -> str:
    """The one line (exit 2) for `err`, raised at the script's line `where` (inside the
    library `raised` = (package, "dir/file.py:line") where one raised it) after the stand-in
    zero `standin` (a `{"k": "standin"}` record)."""
    at = where
    if raised is not None:
        pkg, loc = raised
        code = _code_at(err)
        at += f": `{pkg}` (called by the script) at {loc}" + (f" `{code}`" if code else "")
    what = "divides by zero" if isinstance(err, _ZERO_ERRORS) else f"raised {_DOMAIN}"
    op = _CALLED.get(standin["op"], standin["op"])
    return (f"memledger: cannot run fake at {at}: {what} after the stand-in "
            f"{standin['value']!r} a --fake run gives {op} at {_site(standin)} (a fake "
            "tensor has no values; a real run reads them there); trace it for real "
            "(docs/fake.md, Values)")


def _code_at(err: BaseException) -> str:
    """The source text of the frame `library_caller` names: the innermost of `err`'s
    traceback outside torch, memledger and the standard library."""
    from memledger.trace.script import _outside_frames

    frames = _outside_frames(err)
    return (frames[-1].line or "").strip() if frames else ""


def _site(rec: dict) -> str:
    """`file:line `code`` of a stand-in record: a library's file as `package/file.py`."""
    from memledger.trace.where import is_user_file

    filename, line = rec["file"], rec["line"]
    if not filename:
        return "?"
    shown = os.path.relpath(filename) if is_user_file(filename) else \
        "/".join(os.path.realpath(filename).split(os.sep)[-2:])
    return f"{shown}:{line}" + (f" `{rec['code']}`" if rec.get("code") else "")
