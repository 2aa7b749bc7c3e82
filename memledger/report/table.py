"""The tensor table (one row per storage, `Ledger.storages`) as CSV or Parquet.

Columns are `STORAGE_COLUMNS` of the ledger model; event columns are event indices and
`freed == n_events` means still live when tracing stopped. Parquet needs pyarrow (the
optional extra `memledger[parquet]`).
"""

from __future__ import annotations

from pathlib import Path

from memledger.errors import MemledgerError
from memledger.ledger.model import Ledger


def _write(out: str | Path, write) -> Path:
    out = Path(out)
    try:
        write(out, index=False)
    except OSError as e:
        raise MemledgerError(f"cannot write {str(out)!r}: {e.strerror}; pick another -o path") \
            from None
    return out


def write_csv(led: Ledger, out: str | Path) -> Path:
    return _write(out, led.storages.to_csv)


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_parquet(led: Ledger, out: str | Path) -> Path:
    if not parquet_available():
        raise MemledgerError("parquet export needs pyarrow: pip install 'memledger[parquet]' "
                             "(or use --format csv)")
    return _write(out, led.storages.to_parquet)
