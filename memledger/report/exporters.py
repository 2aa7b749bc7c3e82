"""The export formats: a name, a default suffix and a writer `(ledger, path) -> path` each.

One line per format; `memledger export --format NAME` looks them up here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

from memledger.ledger.model import Ledger
from memledger.report.perfetto import write_perfetto
from memledger.report.table import write_csv, write_parquet


class Exporter(NamedTuple):
    suffix: str
    write: Callable[[Ledger, Path], Path]
    help: str


EXPORTERS: dict[str, Exporter] = {
    "perfetto": Exporter(".json", write_perfetto,
                         "Chrome/Perfetto trace JSON: counters per category, phases, modules"),
    "csv": Exporter(".csv", write_csv, "the tensor table, one row per storage"),
    "parquet": Exporter(".parquet", write_parquet, "the tensor table as Parquet (needs pyarrow)"),
}
