"""The zygote of Note [Warm starts] (memledger/processes.py): imports once, forks workers.

    python -m memledger.zygote FD      # FD: our end of a SOCK_SEQPACKET socket pair

Messages (one JSON object per packet). It sends {"ready": true} once imported (false with
"error" when it cannot serve), then for each request {"module", "args", "env", "cwd",
"session"}, which arrives with three file descriptors (the child's stdin, stdout, stderr),
it forks (the child in a session of its own when "session" is true) and answers {"pid": N};
when a child ends, {"exit": N, "code": C} (C as Popen.returncode: the negated signal number
for a child killed by one). The end of the socket ends the zygote.

{"listen": true} opens a second way in for torchrun's ranks (Note [Warm ranks],
memledger/warm_rank.py) and other memledger processes (Note [Warm starts], 7): a socket
file in a folder only this user can enter, answered with {"address": PATH}. Each connection
there sends requests as above; a request whose environment differs from the zygote's in
more than a rank's variables is answered {"refused": WHY}, and a connection that closes
before its children end (the rank's stand-in was killed) sends them SIGTERM, as a dead
parent's PR_SET_PDEATHSIG would. {"serves": ENV} asks ahead whether requests with ENV
would be served: {"serves": true} or {"refused": WHY}.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import select
import shutil
import signal
import socket
import sys
from pathlib import Path
import tempfile
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


def driver_loaded(maps: str | None = None) -> bool:
    """Whether this process has the CUDA driver library mapped (`maps`: the text of
    /proc/self/maps). torch loads it at its first CUDA call, not at import; a child forked
    after that cannot use CUDA, so a zygote whose imports loaded it refuses to serve."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return False
    return "/libcuda.so" in maps   # not libcudart.so, the runtime torch links


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
    if driver_loaded():
        return "the imports loaded the CUDA driver"
    # the children never collect the imports' objects (Note [Objects from before the
    # script] in memledger/trace/script.py), nor copy their pages by walking them
    gc.collect()
    gc.freeze()
    gc.enable()
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=int(argv[0]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a terminal's Ctrl-C is for the workers
    signal.signal(signal.SIGTERM, _stop)           # a dead parent's PDEATHSIG: clean up first
    from memledger.trace.interrupts import die_with_parent

    die_with_parent()
    started_with = dict(os.environ)
    gc.disable()   # Note [Imports without the collector] (memledger/worker_start.py)
    try:
        refused = _preload()
    except BaseException as e:   # noqa: BLE001 - any failure means cold starts, said why
        refused = f"{type(e).__name__}: {e}"
    _send(sock, {"ready": not refused, "error": refused})
    if refused:
        return 0
    server = _Server(sock, started_with)
    try:
        server.serve()
    finally:
        server.close()
    return 0


def _stop(signum, frame) -> None:
    raise SystemExit(0)


class _Server:
    """The zygote's loop: requests from its client and, once asked to listen, from ranks."""

    def __init__(self, sock: socket.socket, started_with: dict[str, str]) -> None:
        self.main = sock
        self.conns: list[socket.socket] = [sock]
        self.listener: socket.socket | None = None
        self.folder: str | None = None
        self.children: dict[int, socket.socket] = {}   # pid -> the connection it came from
        # what the imports put in the environment (torch sets TORCHINDUCTOR_CACHE_DIR): a
        # fresh process has it too, unless its launch set it first
        self.imports_set = {k: v for k, v in os.environ.items() if k not in started_with}
        self.env = _comparable({**self.imports_set, **started_with})

    def serve(self) -> None:
        while True:
            waiting = [*self.conns, *([self.listener] if self.listener else [])]
            readable, _, _ = select.select(waiting, [], [], 0.05 if self.children else None)
            self._reap()
            for s in readable:
                if s is self.listener:
                    with contextlib.suppress(OSError):
                        self.conns.append(self.listener.accept()[0])
                elif not self._handle(s):
                    return

    def _handle(self, conn: socket.socket) -> bool:
        """Serve one message from `conn`; False when the client is gone (the zygote ends)."""
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        except OSError:
            data, fds = b"", []
        if not data:
            if conn is self.main:
                return False
            self._drop(conn)
            return True
        req = json.loads(data)
        if req.get("listen"):
            _send(conn, {"address": self._listen()})
            return True
        if "serves" in req:   # another memledger asks before it sends requests
            why = self._refusal(req["serves"])
            _send(conn, {"refused": why} if why else {"serves": True})
            return True
        why = "" if conn is self.main else self._refusal(req["env"])
        if why:
            _send(conn, {"refused": why})
        else:
            pid = os.fork()
            if pid == 0:
                _child(self, req, fds)   # never returns
            self.children[pid] = conn
            _send(conn, {"pid": pid})
        for fd in fds:
            os.close(fd)
        return True

    def _refusal(self, env: dict[str, str]) -> str:
        """Why this zygote cannot serve a launch with `env` ("" when it can)."""
        return _env_differs(self.env, {**self.imports_set, **env})

    def _listen(self) -> str:
        if self.listener is None:
            self.folder = tempfile.mkdtemp(prefix="memledger-zygote-")   # mode 0700
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.listener.bind(os.path.join(self.folder, "ranks"))
            self.listener.listen(64)
        return self.listener.getsockname()

    def _drop(self, conn: socket.socket) -> None:
        """A rank's stand-in is gone: so are the workers it started."""
        self.conns.remove(conn)
        conn.close()
        for pid, c in self.children.items():
            if c is conn:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                _send(conn, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    def close_in_child(self) -> None:
        """In a forked child: none of the zygote's sockets stay open."""
        for s in [*self.conns, *([self.listener] if self.listener else [])]:
            s.close()

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def _comparable(env) -> dict[str, str]:
    from memledger.processes import RANK_ENV, VOLATILE_ENV

    return {k: v for k, v in env.items()
            if k not in VOLATILE_ENV and k not in RANK_ENV and not k.startswith("TORCHELASTIC_")}


def _env_differs(mine: dict[str, str], theirs: dict[str, str]) -> str:
    """Why a rank's environment cannot be served by this zygote (Note [Warm starts], 2)."""
    theirs = _comparable(theirs)
    names = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    return f"environment differs in {', '.join(names[:5])}" if names else ""


def _send(sock: socket.socket, msg: dict) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(msg).encode())


def _child(server: _Server, req: dict, fds: list[int]) -> None:
    """In the forked child: become `python -m MODULE ARGS` started from `req["cwd"]`."""
    code = 1
    try:
        server.close_in_child()
        if req.get("session"):
            os.setsid()   # as Popen(start_new_session=True): a group the caller can signal
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        from memledger.trace.interrupts import die_with_parent

        die_with_parent()   # the zygote's death (ours, or our parent's) ends the worker
        os.environ.clear()
        os.environ.update({**server.imports_set, **req["env"]})
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
