"""An unexpected exception (a bug in memledger) becomes one line and a file.

`cli.main` calls `report_crash(exc)`: the full traceback, the command line and the versions
go to a file in the temporary folder, and the user reads one line naming it, with exit 70
(EXIT_INTERNAL). A bug must never read as "over budget" (1) or "bad input" (2).
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import sys
import tempfile
import time
import traceback
from typing import Any, Callable


# Note [memledger's own hooks fail as memledger]
# memledger runs inside the user's script through hooks (module, optimizer, storage
# resize); an exception one of them raises unwinds through the script and read as the
# script's ("script raised TypeError: 'list' object is not a mapping", exit 3, when the
# step pre-hook met skorch's NeuralNet, whose `_modules` is a list). A hook wrapped by
# `internal` marks what it raises (not memledger's deliberate errors, nor StopTracing or
# Ctrl-C, which are no Exception), and the run is classified as a bug in memledger: exit
# 70, the traceback in a file. The saved-tensor hooks and the dispatch mode are not
# wrapped: they run the script's own ops and raise autograd's errors in its place.
def internal(hook: Callable[..., Any]) -> Callable[..., Any]:
    """`hook`, whose exceptions are memledger's own (see the Note above)."""
    from memledger.errors import MemledgerError

    @functools.wraps(hook)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return hook(*args, **kwargs)
        except Exception as e:
            if not isinstance(e, MemledgerError):
                e.memledger_internal = True
            raise
    return run


def is_internal(exc: BaseException) -> bool:
    """Raised by one of memledger's hooks (`internal`)."""
    return getattr(exc, "memledger_internal", False) is True


def write_crash_file(exc: BaseException) -> str | None:
    """The path of the file now holding the traceback, or None if it could not be written."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        from memledger import __version__ as version
    except ImportError:  # pragma: no cover
        version = "?"
    head = (f"memledger {version} crashed: {' '.join(sys.argv)}\n"
            f"python {platform.python_version()} on {platform.platform()}\n\n")
    try:
        fd, path = tempfile.mkstemp(prefix=f"memledger-crash-{time.strftime('%Y%m%d-%H%M%S')}-",
                                    suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(head + text)
        return path
    except OSError:
        return None


def environment_error(exc: BaseException):
    """A full disk or quota met anywhere is the machine's state, not a bug: an OutputError."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        from memledger.outputs import os_error

        return os_error(exc, repr(exc.filename) if exc.filename else "an output")
    return None


def crash_line(exc: BaseException) -> str:
    """`memledger: internal error (ValueError: ...); the traceback is in /tmp/...`."""
    what = f"{type(exc).__name__}: {exc}".splitlines()[0][:200] if str(exc) else \
        type(exc).__name__
    path = write_crash_file(exc)
    if path is None:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        where = "its traceback is above"
    else:
        where = f"the traceback is in {path}"
    return (f"memledger: internal error ({what}); {where}. This is a bug in memledger, not "
            "in your script or budget: please report it with that file")
