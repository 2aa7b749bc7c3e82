"""Loading a pickle someone else wrote, without running their code.

# Note [Why a restricted unpickler is enough]
Unpickling runs code only through *globals*: the GLOBAL / STACK_GLOBAL / INST / OBJ opcodes
(and the EXT1/2/4 extension-registry ones) resolve a callable by name through
`Unpickler.find_class`, and REDUCE / NEWOBJ / BUILD then call or populate what was resolved.
Plain containers and scalars (dict, list, tuple, set, str, bytes, int, float, bool, None)
have their own opcodes and never go through `find_class`. So refusing every global (but
the four that older protocols use to spell `set`, `frozenset`, `bytearray` and `bytes`, see
ALLOWED), and every persistent id, leaves a loader that can only build those. A pickle carrying
`os.system` fails at `find_class("posix", "system")`, before anything is called.

A CUDA snapshot (`torch.cuda.memory._dump_snapshot`) is exactly such plain data: dicts of
lists of dicts of ints and strings (pool ids are tuples), so it loads; a pickle that needs
anything else is refused with the name it asked for.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

from memledger.errors import MemledgerError


class UnsafePickleError(MemledgerError):
    """A pickle asked for a Python object other than plain data; nothing was executed."""


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """What pickle protocols 0-2 call (`_codecs.encode(s, 'latin1')`) to rebuild `bytes`."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise UnsafePickleError("refusing a pickle that encodes bytes with codec "
                                f"{encoding!r} (only latin1 is plain data)")
    return text.encode("latin1")


# The only globals a plain-data pickle may name: constructors of built-in containers that
# protocols 0-3 spell as calls (a set is `builtins.set([...])`, bytes `_codecs.encode`).
ALLOWED: dict[tuple[str, str], Any] = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("_codecs", "encode"): _latin1_bytes,
}


class PlainDataUnpickler(pickle.Unpickler):
    """Builds only plain containers, numbers, strings and bytes. See Note above."""

    def __init__(self, fh, source: str) -> None:
        super().__init__(fh)
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        allowed = ALLOWED.get((module, name))
        if allowed is not None:
            return allowed
        raise UnsafePickleError(
            f"refusing to load {self._source!r}: it asks for the Python object "
            f"{module}.{name}, and loading it could run code; memledger only reads pickles "
            "of plain data (a torch.cuda.memory._dump_snapshot file)")

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(
            f"refusing to load {self._source!r}: it uses persistent ids (not plain data)")


def load_plain_pickle(path: str | Path) -> Any:
    """Unpickle a file that holds plain data only; raise a clear MemledgerError otherwise."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise MemledgerError(f"cannot read {str(path)!r}: {e.strerror}") from None
    return loads_plain(data, str(path))


def loads_plain(data: bytes, source: str = "<bytes>") -> Any:
    try:
        return PlainDataUnpickler(io.BytesIO(data), source).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError,
            KeyError, AttributeError, MemoryError) as e:
        raise MemledgerError(f"{source!r} is not a readable pickle ({type(e).__name__}: {e}); "
                             "pass a file written by torch.cuda.memory._dump_snapshot") from None
