"""The summary a ledger keeps of itself, so that `memledger show` need not read it into pandas.

# Note [The summary kept in the ledger]
A ledger is traced once and shown many times, and `show` spent most of its second in
pandas (its import alone ~0.5 s here) to print a summary that `memledger trace` had just
computed for its own last line. So `trace` appends that summary as the ledger's last record,
through the file it read the ledger from (a ledger another trace renames over the same name
meanwhile does not get it), under a lock and only if nothing was appended since it read (two
traces that opened the same file keep one summary):

    {"k":"summary","of":N,"blake2b":"...","code":"...","top":10,"summary":{...}}

`of` is the byte length of the ledger before this line, `blake2b` the digest of those bytes,
`code` the digest of the code that computes a summary (every module of memledger/ledger/ and
memledger/values.py: a memledger that summarizes differently computes it again) and
`summary` the `memledger.summary/1` object for `--top top`. `show` uses it only when it is the
file's last line and all of that still holds; anything else (a record appended after it, a
byte changed, a corrupt line, other code, another `--top`, `--timeline`) reads the ledger
whole, as a ledger without the record is read. Readers that do not know the kind ignore it
(Note [Ledger file format]). Only complete ledgers get one: a partial ledger is shown with
its note. No pandas, no torch here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from pathlib import Path

from memledger.ledger.reader import decode
from memledger.ledger.writer import encode_record

KIND = "summary"


def read_all(fd: int) -> bytes:
    """The bytes of the open file `fd`, from its start."""
    with open(fd, "rb", closefd=False) as f:
        return f.read()


def append(fd: int, data: bytes, summary: dict, top: int) -> bool:
    """Append the record that keeps `summary` (a `Summary.model_dump(mode="json",
    by_alias=True)` of the ledger whose bytes are `data`) to `fd`, opened with O_APPEND on
    that ledger. False, and the file as it was, when it cannot be kept: a cut-off last line
    (not a complete ledger), no sources to digest, bytes appended since `data` was read
    (another trace that opened the same file kept its summary first), a full disk (a line
    half written is cut off again: the summary is a convenience, never damage)."""
    line = record_line(data, summary, top)
    if line is None:
        return False
    with _locked(fd):   # the size checked and the line written as one, among memledgers
        if os.fstat(fd).st_size != len(data):
            return False
        try:
            if os.write(fd, line) == len(line):
                return True
        except OSError:
            pass
        with contextlib.suppress(OSError):
            os.ftruncate(fd, len(data))
        return False


@contextlib.contextmanager
def _locked(fd: int):
    try:
        import fcntl
    except ImportError:   # pragma: no cover - not POSIX: unlocked
        yield
        return
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def record_line(data: bytes, summary: dict, top: int) -> bytes | None:
    """The line that keeps `summary` of the ledger whose bytes are `data`, or None."""
    if not data.endswith(b"\n") or not code_digest():
        return None
    record = {"k": KIND, "of": len(data), "blake2b": _digest(data), "code": code_digest(),
              "top": top, "summary": summary}
    return encode_record(record) + b"\n"


def load(path: str | Path, top: int) -> dict | None:
    """The summary kept in the ledger at `path` for `--top top`, or None when there is none
    that still holds (Note [The summary kept in the ledger])."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if not data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    if start == 0:   # one line: a header alone
        return None
    try:
        rec = decode(data[start:])
    except ValueError:
        return None
    if not (isinstance(rec, dict) and rec.get("k") == KIND and rec.get("of") == start
            and rec.get("top") == top and rec.get("code") == code_digest() != ""
            and isinstance(rec.get("summary"), dict)
            and rec.get("blake2b") == _digest(data[:start])):
        return None
    return rec["summary"]


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """Digest of the source of every module a summary is computed by."""
    from memledger import __version__

    here = Path(__file__).parent
    h = hashlib.blake2b(__version__.encode(), digest_size=16)
    for f in [*sorted(here.glob("*.py")), here.parent / "values.py"]:
        try:
            h.update(f.name.encode() + b"\0" + f.read_bytes())
        except OSError:   # installed without sources: nothing to compare, so never kept
            return ""
    return h.hexdigest()

