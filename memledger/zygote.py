"""The zygote of Note [Warm starts] (memledger/processes.py): imports once, forks workers.

    python -m memledger.zygote FD      # FD: our end of a SOCK_SEQPACKET socket pair

Messages (one JSON object per packet). It sends {"ready": true} once imported (false with
"error" when it cannot serve), then for each request {"module", "args", "env", "cwd"},
which arrives with three file descriptors (the child's stdin, stdout, stderr), it forks and
answers {"pid": N}; when a child ends, {"exit": N, "code": C} (C as Popen.returncode: the
negated signal number for a child killed by one). The end of the socket ends the zygote.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback

# What every worker imports before the script's first line (torch's first optimizer step
# imports Dynamo), and each worker's own lazy imports.
PRELOAD = ("torch", "torch._dynamo", "torch.profiler", "torch.utils.checkpoint",
           "memledger.trace.worker", "memledger.measure.worker", "memledger.verify.worker",
           "memledger.doctor.worker", "memledger.trace.allocator", "memledger.trace.timing",
           "memledger.measure.apply", "memledger.verify.capture", "memledger.doctor.run")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _preload() -> str:
    """Import PRELOAD; the reason it is not safe to fork afterwards, or ""."""
    with contextlib.suppress(ImportError):
        import numpy  # noqa: F401  (its BLAS pool's threads are fork-safe: counted apart)
    before = _threads()
    for name in PRELOAD:
        importlib.import_module(name)
    import torch

    if threading.active_count() > 1 or _threads() > before:
        return f"the imports started threads ({_threads()} after, {before} before)"
    if torch.cuda.is_initialized():
        return "the imports initialised CUDA"
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(argv[0]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C is for the workers
    from memledger.trace.interrupts import die_with_parent

    die_with_parent()
    try:
        refused = _preload()
    except BaseException as e:   # noqa: BLE001 - any failure means cold starts, said why
        refused = f"{type(e).__name__}: {e}"
    _send(sock, {"ready": not refused, "error": refused})
    if refused:
        return 0
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([sock], [], [], 0.05 if children else None)
        _reap(sock, children)
        if not readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 3)
        except OSError:
            data = b""
        if not data:
            return 0
        pid = os.fork()
        if pid == 0:
            _child(sock, json.loads(data), fds)   # never returns
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"pid": pid})


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, msg: dict) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(msg).encode())


def _child(sock: socket.socket, req: dict, fds: list[int]) -> None:
    """In the forked child: become `python -m MODULE ARGS` started from `req["cwd"]`."""
    code = 1
    try:
        sock.close()
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from memledger.trace.interrupts import die_with_parent

        die_with_parent()   # the zygote's death (ours, or our parent's) ends the worker
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.path[0] = req["cwd"]   # what `python -m` puts first
        _reseed()
        mod = importlib.import_module(req["module"])
        sys.argv = [mod.__file__, *req["args"]]
        code = mod.main(req["args"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:   # noqa: BLE001 - as Python prints an uncaught exception
        traceback.print_exc()
        code = 1
    _exit(code)


# torch's default CPU generator starts from this seed in every process up to some release,
# and from the OS's entropy after it (torch 2.13 here)
_TORCH_FIXED_SEED = 67280421310721


def _reseed() -> None:
    """Seed what a fresh process seeds from the OS (Python's `random` re-seeds itself
    after a fork): numpy's global generator, and torch's where its build draws the seed."""
    np = sys.modules.get("numpy")
    if np is not None:
        with contextlib.suppress(Exception):
            np.random.seed()
    torch = sys.modules["torch"]
    if torch.initial_seed() != _TORCH_FIXED_SEED:
        torch.seed()


def _exit(code) -> None:
    """End the child as memledger's workers end (Note [A worker's exit]): never back into
    the zygote's loop, even under torchrun's RANK (exit_now would raise SystemExit)."""
    from memledger.trace.worker import end_process

    try:
        end_process(code if isinstance(code, int) else 1)
    finally:   # reached only if a Ctrl-C landed in the atexit handlers
        os._exit(130)


if __name__ == "__main__":
    sys.exit(main())
