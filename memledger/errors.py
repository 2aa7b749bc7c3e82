"""One error hierarchy; each error carries the exit code the CLI returns for it.

Exit codes (design contract): 0 ok; 1 a check failed (over budget, a gate failed);
2 memledger could not do its job (bad input); 3 the traced script itself failed
(its traceback is shown, the partial ledger is kept); 70 memledger itself failed (a bug:
one line naming the file that holds the traceback); 130 interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import re

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_SCRIPT_FAILED = 3
EXIT_INTERNAL = 70        # EX_SOFTWARE (sysexits.h): a bug in memledger, never "over budget"
EXIT_INTERRUPTED = 130


# a terminal's escape sequences: torch's `weights_only` message bolds a phrase, which a
# CI log shows as "[1mdo those steps only if you trust ...[0m"
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """`text` without terminal escape sequences."""
    return _ESCAPES.sub("", text)


class MemledgerError(Exception):
    """Base of every error memledger raises on purpose. The message is one line."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str) -> None:
        message = plain(message)
        super().__init__(message if message.startswith("memledger") else f"memledger: {message}")


class LedgerFormatError(MemledgerError):
    """A ledger file is missing, corrupt, truncated beyond use, or of an unknown schema."""


class PolicyError(MemledgerError):
    """A policy string or file is malformed, or cannot apply to the model."""


class MatchesNoModule(PolicyError):
    """A selector that matches no module of the model as it is when resolved: the model may
    register the module later (Note [A region registered after the first call],
    measure/apply.py)."""


class PolicyRefused(PolicyError):
    """A well-formed policy that this model cannot run (a region holding a TorchScript
    module): exit 2 where it is the one policy asked for (`measure`), that policy's
    `REJECT refused:` among others (`compare`), never the end of a whole comparison."""


class NotPredicted(PolicyRefused):
    """A policy that runs but that the replay cannot predict (its region is inside code a
    compiler owns: memledger/replay/compiled.py): `predict` refuses it, `measure` runs it,
    `compare` measures and judges it with no prediction."""


class BudgetError(MemledgerError):
    """A budget is malformed (unknown category, size without a unit, ...)."""


class UnitError(MemledgerError):
    """A size string could not be read (`800` without a unit, `-1GiB`, `1.5XB`)."""


class ScriptError(MemledgerError):
    """The traced script could not be run, or failed."""

    def __init__(self, message: str, exit_code: int = EXIT_SCRIPT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class CheckFailed(MemledgerError):
    """A check ran and failed (over budget, a gate failed): exit 1."""

    exit_code = EXIT_CHECK_FAILED


class OutputError(MemledgerError):
    """An output cannot be written (missing folder, read-only, disk full) or would destroy
    an input (`-o` naming the script or the ledger read): exit 2, checked before running."""
