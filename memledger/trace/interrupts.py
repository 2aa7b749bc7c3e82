"""Ctrl-C and SIGTERM while a script is traced: delivered once, never lost, never orphaned.

# Note [One interrupt, delivered once]
A terminal's Ctrl-C reaches the whole process group: `memledger trace` (the parent) and its
worker both get SIGINT. `kill -INT <memledger pid>` or `kill -TERM` reach the parent only.
So the parent forwards what it gets to the worker (SIGINT as SIGINT, SIGTERM as SIGTERM; a
second signal kills the worker), and the worker turns the FIRST SIGINT or SIGTERM into one
KeyboardInterrupt and ignores the duplicates (the forwarded copy of a Ctrl-C arrives a few
microseconds after the terminal's: raised again, it would land in the ledger's closing code).
Python swallows an exception raised inside a weakref callback ("Exception ignored in"): the
collector's free callback catches a KeyboardInterrupt that lands there and delivers it again
(`redeliver`), so it reaches the script instead of vanishing, which left the worker running
its remaining steps (a minute of `time.sleep` in the test) before anything stopped.
"""

from __future__ import annotations

import _thread
import signal
import subprocess
import sys
import threading
from typing import Any

_state = {"raised": False}


def _on_signal(signum: int, frame: Any) -> None:
    if _state["raised"]:
        return  # the duplicate of a Ctrl-C already being handled
    _state["raised"] = True
    raise KeyboardInterrupt


def install_worker_handlers() -> None:
    """In the worker: the first SIGINT or SIGTERM becomes one KeyboardInterrupt; and on
    Linux, a parent killed outright (SIGKILL, no chance to forward) sends it SIGTERM, so the
    worker never runs on as an orphan."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    die_with_parent()


def die_with_parent() -> None:
    """On Linux: SIGTERM to this process when its parent dies (PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        except (OSError, AttributeError):  # pragma: no cover - not glibc: best effort
            pass


def redeliver() -> None:
    """A KeyboardInterrupt caught where Python would swallow it: raise it again soon, in the
    main thread's own code."""
    if signal.getsignal(signal.SIGINT) is _on_signal:
        _state["raised"] = False
    _thread.interrupt_main()


class Forwarder:
    """In the parent, while its workers run: pass SIGINT/SIGTERM on to them (Note above).

    `signals` lists what arrived ("SIGINT", "SIGTERM"); a second one kills the worker."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.signals: list[str] = []
        self._old: dict[int, Any] = {}

    def attach(self, proc: subprocess.Popen) -> None:
        """A worker now exists: pass on what arrived while it was being started."""
        self.procs.append(proc)
        if self.signals:
            self._send(proc, signal.Signals[self.signals[0]])

    def _forward(self, signum: int, frame: Any) -> None:
        self.signals.append(signal.Signals(signum).name)
        for proc in self.procs:
            self._send(proc, signum)

    def _send(self, proc: subprocess.Popen, signum: int) -> None:
        if proc.poll() is None:
            try:
                proc.send_signal(signum if len(self.signals) == 1 else signal.SIGKILL)
            except OSError:
                pass

    def __enter__(self) -> "Forwarder":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._forward)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    @property
    def interrupted(self) -> bool:
        return bool(self.signals)
