"""`memledger export LEDGER --format perfetto|csv|parquet -o FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from memledger.commands.common import console, open_ledger
from memledger.errors import MemledgerError
from memledger.outputs import check_output


def export(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    format_: Annotated[str, typer.Option(
        "--format", "-f", help="perfetto (trace JSON), csv or parquet (tensor table)")] =
        "perfetto",
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="file to write (default: the ledger's name + .json/.csv/...)")] =
        None,
) -> None:
    """Export a ledger for other tools: Perfetto/chrome://tracing, pandas, spreadsheets."""
    from memledger.report.exporters import EXPORTERS

    exp = EXPORTERS.get(format_)
    if exp is None:
        raise MemledgerError(f"unknown export format {format_!r}; use one of "
                             f"{', '.join(EXPORTERS)}")
    target = check_output(output or ledger.with_suffix(exp.suffix), f"{format_} export",
                          inputs=[ledger])
    led = open_ledger(ledger)
    out = exp.write(led, target)
    console.print(f"{out}: {format_} export of {ledger}", markup=False)
