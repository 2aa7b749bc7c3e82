"""Reading a ledger file: validated line by line, tolerant of a cut-off last line.

A ledger written by a run that crashed, ran out of memory or was interrupted has no `end`
record and maybe half a last line; both are expected and reported (`Ledger.complete`), not
errors. What is an error: not a ledger at all, an unknown schema version, or damage in the
middle of the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from memledger.errors import LedgerFormatError
from memledger.ledger.schema import SCHEMA, SCHEMA_FAMILY
from memledger.ledger.writer import Record

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


def read_records(path: str | Path) -> tuple[list[Record], bool]:
    """Return (records, truncated). `truncated` is True when the last line was cut off."""
    p = Path(path)
    if not p.exists():
        raise LedgerFormatError(f"no ledger at {str(path)!r}")
    if p.is_dir():
        raise LedgerFormatError(f"{str(path)!r} is a directory, not a ledger file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LedgerFormatError(f"{str(path)!r} is not a memledger ledger (not UTF-8 text)") from None
    except OSError as e:
        raise LedgerFormatError(f"cannot read ledger {str(path)!r}: {e.strerror}") from None
    lines = text.split("\n")
    ends_cleanly = text.endswith("\n")
    if ends_cleanly:
        lines.pop()
    records: list[Record] = []
    truncated = False
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if last and not ends_cleanly and i > 0:
                truncated = True  # the writer was stopped mid-line: keep everything before it
                break
            if i == 0:
                raise LedgerFormatError(
                    f"{str(path)!r} is not a memledger ledger (its first line is not JSON)"
                ) from None
            raise LedgerFormatError(
                f"{str(path)!r} line {i + 1} is not valid JSON: the ledger is corrupt"
            ) from None
        if i == 0:
            _check_header(rec, path)
        _check_record(rec, path, i + 1)
        records.append(rec)
    if not records:
        raise LedgerFormatError(f"{str(path)!r} is empty: not a memledger ledger")
    return records, truncated


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


def _check_record(rec: object, path: str | Path, lineno: int) -> None:
    if not isinstance(rec, dict) or not isinstance(rec.get("k"), str):
        raise LedgerFormatError(f"{str(path)!r} line {lineno}: not a ledger record")
    need = REQUIRED.get(rec["k"])
    if need is None:
        return  # header, or a kind from a newer writer: ignored by queries
    missing = [f for f in need if f not in rec]
    if missing:
        raise LedgerFormatError(
            f"{str(path)!r} line {lineno}: {rec['k']} record lacks {', '.join(missing)}"
        )
