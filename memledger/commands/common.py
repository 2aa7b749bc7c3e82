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
    from memledger.ledger.summary import Summary


console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


JSON_PRINTED = [False]   # a JSON document is on stdout: cli.main prints no error document


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no Rich markup), for scripts and CI."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    JSON_PRINTED[0] = True
    sys.stdout.flush()


def open_ledger(path: Path, data: bytes | None = None) -> Ledger:
    from memledger.ledger.model import Ledger  # pandas: only once a ledger is read

    led = Ledger.load(path, data)
    if led.truncated or not led.complete:
        status = (led.end or {}).get("status", "cut off")
        err_console.print(f"memledger: note: {path} is a partial ledger ({status}); "
                          "showing what was recorded", style="yellow", markup=False)
    return led


def kept_summary(path: Path, top: int = 10) -> Summary | None:
    """The summary the ledger at `path` keeps of itself, when it still holds (read without
    pandas: Note [The summary kept in the ledger]); None: read the ledger."""
    from pydantic import ValidationError

    from memledger.ledger import summary_cache
    from memledger.ledger.summary import Summary

    if (kept := summary_cache.load(path, top)) is None:
        return None
    try:
        return Summary.model_validate(kept)
    except ValidationError:   # the code that wrote it is ours, so only a hand-edited record
        return None


def ledger_summary(path: Path, top: int = 10) -> Summary:
    """The summary of the ledger at `path`: the one it keeps, else computed from it."""
    return kept_summary(path, top) or open_ledger(path).summary(top=top)


def summarize_and_keep(path: Path) -> Summary:
    """The summary of the ledger `trace` just wrote at `path`, appended to it for `show` to
    reuse (Note [The summary kept in the ledger]); not to a partial ledger (shown with its
    note) nor a doctored one (shown with its findings)."""
    from memledger.ledger import summary_cache

    try:   # read and append through one open file: a ledger another trace renames over
        fd = os.open(path, os.O_RDWR | os.O_APPEND)   # `path` meanwhile never gets this
    except OSError:                                   # one's summary
        return open_ledger(path).summary()   # (its own error, if it cannot be read)
    try:
        data = summary_cache.read_all(fd)
        led = open_ledger(path, data)
        s = led.summary()
        if led.complete and not led.truncated and not led.extra.get("doctor"):
            summary_cache.append(fd, data, s.model_dump(mode="json", by_alias=True), top=10)
    finally:
        os.close(fd)
    return s


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
