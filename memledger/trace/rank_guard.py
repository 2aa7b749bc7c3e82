"""One rank's safety net under `--nproc`: a watchdog for hung collectives, SIGTERM from
torchrun, and whether the script ever made a process group.

# Note [A rank that never returns]
A rank waiting in a collective that another rank never joins sits in C++ (gloo or NCCL)
with the GIL released; Python signal handlers cannot run until the wait returns (gloo's own
timeout is 30 min). The watchdog is a daemon thread: after `--timeout` seconds without an optimizer step (plus STARTUP_GRACE_S before the
first one) it closes
the ledger with status `timeout` (the records up to the last flush, plus the end record),
writes the rank's status file and leaves with `os._exit(EXIT_SCRIPT_FAILED)`, so the other
ranks' ledgers are kept and the launcher can name the rank that hung.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Callable

from memledger.errors import EXIT_SCRIPT_FAILED


# Before the first optimizer step the script imports, builds its model and joins the process
# group: that much longer is allowed before the watchdog's first check.
STARTUP_GRACE_S = 60.0


class RankGuard:
    """Example usage (inside a worker, one per rank)::

        guard = RankGuard(timeout_s=600, status_path="s.rank0.json", on_timeout=close_ledger)
        with guard:
            run_the_script()
        guard.saw_process_group   # False: the script trained alone on every rank
    """

    def __init__(self, timeout_s: float, status_path: str | None,
                 on_timeout: Callable[[str], None] | None = None) -> None:
        self.timeout_s = timeout_s
        self.status_path = status_path
        self.on_timeout = on_timeout
        self.saw_process_group = False
        self._timer: threading.Timer | None = None
        self._handle = None
        self._old_sigterm = None
        self.t0 = time.time()

    def __enter__(self) -> "RankGuard":
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._handle = register_optimizer_step_pre_hook(self._on_step)
        if threading.current_thread() is threading.main_thread():
            # torchrun stops the other ranks with SIGTERM when one fails: unwind as on Ctrl-C,
            # so the collector writes its end record ("interrupted") and the file is whole.
            self._old_sigterm = signal.signal(signal.SIGTERM, signal.default_int_handler)
        if self.timeout_s and self.timeout_s > 0:
            self._arm(STARTUP_GRACE_S)
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._handle is not None:
            self._handle.remove()
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)

    def _arm(self, extra_s: float = 0.0) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(self.timeout_s + extra_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _on_step(self, *_) -> None:
        if self.timeout_s and self.timeout_s > 0:
            self._arm()   # the clock counts from the last optimizer step
        if not self.saw_process_group:
            import torch.distributed as dist

            self.saw_process_group = dist.is_available() and dist.is_initialized()

    def _fire(self) -> None:
        reason = (f"no optimizer step for {self.timeout_s:g} s (--timeout): waiting in a "
                  "collective that another rank never joined?")
        try:
            if self.on_timeout is not None:
                self.on_timeout(reason)
        finally:
            try:
                if self.status_path:   # whole or not at all: the main thread may be writing
                    from memledger.outputs import write_atomic   # its own as it unwinds

                    write_atomic(self.status_path, json.dumps(
                        {"code": EXIT_SCRIPT_FAILED, "reason": reason, "timeout": True,
                         "steps": -1, "events": 0, "t": time.time()}), "status")
            finally:
                os._exit(EXIT_SCRIPT_FAILED)
