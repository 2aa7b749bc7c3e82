"""Reading a ledger file: validated line by line, tolerant of a cut-off last line.

A ledger written by a run that crashed, ran out of memory or was interrupted has no `end`
record and maybe half a last line; both are expected and reported (`Ledger.complete`), not
errors. What is an error: not a ledger at all, an unknown schema version, or damage in the
middle of the file.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from memledger.errors import LedgerFormatError
from memledger.ledger.schema import SCHEMA, SCHEMA_FAMILY
from memledger.ledger.writer import Record

try:  # a C parser: ~10x faster than json on a million-line ledger
    from orjson import loads as decode
except ImportError:  # pragma: no cover - orjson is a dependency; json still works
    from json import loads as decode

# Kinds checked column-wise when the Ledger is built (see model._check_required).
COLUMN_CHECKED = frozenset({"alloc", "free", "live", "role", "saved", "unpack"})

# Fields each record kind must carry; extra fields are allowed (a newer writer may add some).
REQUIRED: dict[str, tuple[str, ...]] = {
    "alloc": ("sid", "ev", "bytes"),
    "free": ("sid", "ev"),
    "live": ("sid",),
    "role": ("sid", "role"),
    "saved": ("sid", "ev"),
    "unpack": ("sid", "ev"),
    "phase": ("ev", "ph", "step"),
    "scope": ("mod", "ev0", "ev1"),
    "step": ("step", "ev"),
    "measured": ("source", "peak_bytes"),
    "end": ("ev", "status"),
}


def read_records(path: str | Path, data: bytes | None = None) -> tuple[list[Record], bool]:
    """Return (records, truncated). `truncated` is True when the last line was cut off.
    `data`: the file's bytes, already read (by the caller, from a file it holds open).

    Fast path: the whole file is parsed by one `orjson` call (a million-event ledger in
    about a second); only when that fails are lines parsed one by one, to tell a cut-off
    last line (kept, reported) from damage in the middle (refused, with its line number).
    """
    p = Path(path)
    if data is None:
        if not p.exists():
            raise LedgerFormatError(f"no ledger at {str(path)!r}")
        if p.is_dir():
            raise LedgerFormatError(f"{str(path)!r} is a directory, not a ledger file")
        try:
            data = p.read_bytes()
        except OSError as e:
            raise LedgerFormatError(f"cannot read ledger {str(path)!r}: {e.strerror}") from None
    lines = data.split(b"\n")
    ends_cleanly = data.endswith(b"\n")
    if ends_cleanly:
        lines.pop()
    truncated = False
    try:
        records = decode(b"[" + b",".join(lines) + b"]")
    except ValueError:  # orjson's and json's decode errors are ValueErrors
        records, truncated = _parse_lines(lines, ends_cleanly, path)
    if not records:
        raise LedgerFormatError(f"{str(path)!r} is empty: not a memledger ledger")
    _check_header(records[0], path)
    return records, truncated


def _parse_lines(lines: list[bytes], ends_cleanly: bool, path) -> tuple[list[Record], bool]:
    records: list[Record] = []
    for i, line in enumerate(lines):
        try:
            records.append(decode(line))
        except ValueError:
            if i == len(lines) - 1 and not ends_cleanly and i > 0:
                return records, True  # stopped mid-line: keep everything before it
            if i == 0:
                # a training script where a ledger belongs (`show train.py`): say what to run
                hint = f"; trace it first: memledger trace {shlex.quote(str(path))} -o " \
                    "run.ledger" if str(path).endswith(".py") else ""
                raise LedgerFormatError(
                    f"{str(path)!r} is not a memledger ledger (its first line is not JSON)"
                    + hint) from None
            raise LedgerFormatError(
                f"{str(path)!r} line {i + 1} is not valid JSON: the ledger is corrupt") from None
    return records, False


def _check_header(rec: object, path: str | Path) -> None:
    if not isinstance(rec, dict) or rec.get("k") != "header":
        raise LedgerFormatError(f"{str(path)!r} is not a memledger ledger (no header line)")
    schema = rec.get("schema", "")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_FAMILY):
        raise LedgerFormatError(f"{str(path)!r} is not a memledger ledger (schema {schema!r})")
    if schema != SCHEMA:
        raise LedgerFormatError(
            f"{str(path)!r} has schema {schema!r}; this memledger reads {SCHEMA!r} "
            "(upgrade memledger to read it)"
        )


def group_records(records: list[Record], source: str = "ledger") -> dict[str, list[Record]]:
    """Records by kind, in order, after checking that each is a ledger record and that the
    few marker kinds carry their fields. (The numerous storage kinds are checked
    column-wise when the Ledger is built: see model._check_required.)"""
    by_kind: dict[str, list[Record]] = {}
    for i, rec in enumerate(records):
        try:
            kind = rec["k"]
            by_kind[kind].append(rec)
        except KeyError:
            if not isinstance(rec.get("k"), str):
                raise LedgerFormatError(f"{source} line {i + 1}: not a ledger record") from None
            by_kind[kind] = [rec]
        except (TypeError, AttributeError):
            raise LedgerFormatError(f"{source} line {i + 1}: not a ledger record") from None
    if len(by_kind.get("header", ())) > 1:
        raise LedgerFormatError(f"{source} holds {len(by_kind['header'])} ledgers (one header "
                                "line each), e.g. two files joined with cat; keep one")
    for kind, need in REQUIRED.items():
        if kind in COLUMN_CHECKED:
            continue
        for rec in by_kind.get(kind, ()):
            missing = [f for f in need if f not in rec]
            if missing:
                raise LedgerFormatError(f"{source}: a {kind} record lacks {', '.join(missing)}")
    return by_kind
