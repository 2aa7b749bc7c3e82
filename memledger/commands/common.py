"""What the verbs share: consoles, JSON output, opening a ledger."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from rich.console import Console

if TYPE_CHECKING:
    from memledger.ledger.model import Ledger


console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


JSON_PRINTED = [False]   # a JSON document is on stdout: cli.main prints no error document


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no Rich markup), for scripts and CI."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    JSON_PRINTED[0] = True
    sys.stdout.flush()


def open_ledger(path: Path) -> Ledger:
    from memledger.ledger.model import Ledger  # pandas: only once a ledger is read

    led = Ledger.load(path)
    if led.truncated or not led.complete:
        status = (led.end or {}).get("status", "cut off")
        err_console.print(f"memledger: note: {path} is a partial ledger ({status}); "
                          "showing what was recorded", style="yellow", markup=False)
    return led


@contextlib.contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """Send everything written to fd 1 (the traced script's prints, the workers' output:
    child processes inherit it) to stderr while active, so `--json` stdout holds only JSON."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def stage_progress(total: int) -> Iterator[Callable[[str], None]]:
    """Stages of a long verb (compare runs many fresh processes) on stderr.

    Yields `say(message)`: each call closes the stage before (one line with its time:
    `✓ gates: capturing checkpoint:blocks.* (41.2 s)`) and starts the next. On a terminal a
    Rich progress bar shows the running stage, its count out of `total` and the time spent;
    in a CI log (no terminal) the lines alone stay, one per stage.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn
    from rich.progress import TextColumn, TimeElapsedColumn

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                   transient=True)
    task = bar.add_task("starting", total=total)
    current: list = []   # [message, start time] of the running stage

    def close() -> None:
        if current:
            msg, t0 = current.pop()
            bar.console.print(f"✓ {msg} ({time.perf_counter() - t0:.1f} s)", style="dim",
                              markup=False, highlight=False)
            bar.advance(task)

    def say(msg: str) -> None:
        close()
        current.append((msg, time.perf_counter()))
        bar.update(task, description=msg)

    with bar:
        try:
            yield say
            close()
        finally:
            current.clear()
