"""The tensor table (one row per storage, `Ledger.storages`) as CSV or Parquet.

Columns are `STORAGE_COLUMNS` of the ledger model; event columns are event indices and
`freed == n_events` means still live when tracing stopped. Parquet needs pyarrow (the
optional extra `torch-memledger[parquet]`).

# Note [Formula injection]
A spreadsheet runs a cell that starts with `=`, `+`, `-`, `@` (or a tab / carriage return)
as a formula, and module names, op names and the script's names come from whoever wrote the
script or the ledger. So a CSV text cell starting with one of those gets a leading `'`
(OWASP's advice): `=HYPERLINK("http://x")` is written `'=HYPERLINK("http://x")`. Numbers
stay numbers (`-1` in a numeric column is data); Parquet is typed and written as is.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memledger.errors import MemledgerError
from memledger.ledger.model import Ledger
from memledger.outputs import open_atomic

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise(value: object) -> object:
    """A text cell a spreadsheet would run as a formula, made inert (Note above)."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(neutralise)
    return out


def write_csv(led: Ledger, out: str | Path) -> Path:
    with open_atomic(out, "CSV export") as fh:
        csv_safe(led.storages).to_csv(fh, index=False)
    return Path(out)


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def write_parquet(led: Ledger, out: str | Path) -> Path:
    if not parquet_available():
        raise MemledgerError("parquet export needs pyarrow: pip install "
                             "'torch-memledger[parquet]' (or use --format csv)")
    with open_atomic(out, "Parquet export", "wb") as fh:
        led.storages.to_parquet(fh, index=False)
    return Path(out)
