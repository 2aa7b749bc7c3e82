"""Worker processes, started warm when it is safe: `start_worker("memledger.trace.worker", args)`.

Every run of a user's script is a fresh process (`memledger trace`'s two passes, `measure`,
`doctor`, `compare`'s captures). This module starts them all, and nothing here imports torch.

# Note [Warm starts]
A fresh `python -m memledger.X.worker` spends 2-3.5 s of CPU importing torch (and Dynamo,
which the script's first optimizer step imports) before the script's first line: more
than a tiny script's whole run, and `compare` starts ten such processes. So where
workers run one after another (5. below), the first one starts a *zygote*
(memledger/zygote.py): a process that imports torch, Dynamo and memledger's workers once,
then forks one child per worker. A child is the state a fresh process reaches after those
imports, then runs the worker's `main(args)` as `python -m` would (its own stdin, stdout,
stderr, environment and working folder; Python's `random`, numpy's global generator and,
where torch draws its default seed from the OS, torch's default generator re-seeded, as a
fresh process seeds them). It is the zygote's child, not ours, so the zygote reports its exit
status over the socket, and `Worker` offers the part of `subprocess.Popen` we use.

Why this is safe, and where it is not used:
1. Forking is safe only before torch starts threads of its own or initialises CUDA. The
   zygote runs no op, so no OpenMP pool exists; it reports its threads, and any beyond
   the main one and BLAS's pool (which re-creates itself after a fork) make it refuse.
   Nor before CUDA's driver is loaded: the zygote refuses if its imports initialised
   CUDA or mapped `libcuda.so` (zygote.py `driver_loaded`). torch's imports do neither:
   on an H200 (torch 2.11, docs/gpu.md, 2026-12-04) `measure` of the GPT under checkpoint
   from a zygote's children read the same peak as from a fresh process (90,729,472 B;
   0.8 s to start against 7.9 s), so machines with an NVIDIA driver now get warm starts
   too (they had cold ones until that run; benchmarks/gpu_check.py row 7 checks it).
2. Variables read once, at import (OMP_NUM_THREADS, TORCH_* flags...), must be the ones
   the worker would have read: a zygote serves only launches whose environment equals
   the one it started with (PYTEST_CURRENT_TEST aside); another environment gets its own.
3. Linux only (fork after a framework import is unsafe on macOS). MEMLEDGER_WARM_START=0
   forces cold starts everywhere.
4. Anything wrong with the zygote (it cannot import torch, it died) means cold starts
   for the rest of this process: a warm start is only ever faster, never different.
5. Warm starts are used where workers run one after another: `compare` (ten of them),
   `plan --measure`, `check` with its doctor run (`several_workers()`), and everywhere
   with MEMLEDGER_WARM_START=1 (the test suite: two pytest processes start ~80 workers).
   `trace` alone starts its two passes at once: cold, each imports on its own core in
   the time the zygote would import on one (measured: the default trace of the tiny GPT
   9.8 s wall cold, 11.0 s warm; 13.1 s and 11.8 s of CPU: docs/performance.md).
6. torchrun's ranks: every launch on several ranks (memledger/trace/launch.py) starts its
   launcher and, through a stand-in, each rank from the zygote (Note [Warm ranks],
   memledger/warm_rank.py): a launch imports torch once instead of nproc + 1 times.
7. Another process's zygote: a memledger whose environment names a zygote's socket
   (MEMLEDGER_ZYGOTE, from `zygote_address()`) asks that zygote first and uses it if it
   serves this environment (the rule of 2., checked by the zygote); otherwise, or once it
   is gone, it starts its own as above. Its workers are that zygote's children: the
   zygote's death, or our end of the connection closing, sends them SIGTERM, as for a
   rank (Note [Warm ranks]). The test suite's `memledger` runs in subprocesses fork their
   workers from their pytest process's zygote so (tests/conftest.py, `cli_zygote`).
What stays different: a zygote's children share one string-hash seed (fresh processes
each draw their own), so iteration over a set of strings has the same order in each run.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Iterator

# environment variables that may differ between a zygote and its children: read by no
# import (pytest sets PYTEST_CURRENT_TEST per test; every launch sets PYTHONUNBUFFERED;
# MEMLEDGER_ZYGOTE names a zygote's socket: Note [Warm starts], 7; the terminal's size is
# read when something is printed, and the zygote's imports make no console:
# tests/unit/test_processes.py)
VOLATILE_ENV = frozenset({"PYTEST_CURRENT_TEST", "PYTHONUNBUFFERED", "MEMLEDGER_WARM_START",
                          "MEMLEDGER_ZYGOTE", "COLUMNS", "LINES"})
# what torchrun adds to each rank's environment (and TORCHELASTIC_*): read when the script
# makes its process group, not at import, so a rank may differ from its zygote in them
RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
                      "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
                      "MASTER_ADDR", "MASTER_PORT", "TORCH_NCCL_ASYNC_ERROR_HANDLING"})
# `python -m MODULE`, its imports made without the garbage collector (Note [Imports
# without the collector] in memledger/worker_start.py)
COLD_START = (sys.executable, "-m", "memledger.worker_start")
_MAX_ZYGOTES = 2
# longer than any import of torch takes, even on a loaded machine; a zygote that has not
# said "ready" by then is stuck, not slow
_READY_TIMEOUT_S = 300.0
# another process's zygote answers at once, from its loop (Note [Warm starts], 7)
_JOIN_TIMEOUT_S = 10.0


class Worker:
    """A started worker process: the subset of `subprocess.Popen` memledger uses, for a
    warm child (the zygote's) and a cold one (ours) alike. `communicate()` returns the
    captured output (stdout and stderr together), or b"" when the worker writes to ours."""

    def __init__(self, proc: "subprocess.Popen | _WarmChild", output: IO[bytes] | None,
                 stdin: int | None) -> None:
        self._proc = proc
        self._output = output
        self._stdin = stdin
        self.pid = proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._proc.wait(timeout)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: bytes | None = None) -> bytes:
        """Write `input` to a worker started with `stdin_pipe`, wait for its end, and
        return its captured output."""
        if self._stdin is not None:
            with contextlib.suppress(OSError):
                if input:
                    os.write(self._stdin, input)
            with contextlib.suppress(OSError):
                os.close(self._stdin)
            self._stdin = None
        self.wait()
        return self.output()

    def output(self) -> bytes:
        if self._output is None or self._output.closed:
            return b""
        self._output.seek(0)
        return self._output.read()

    def close(self) -> None:
        """Release the output file and the stdin pipe (the process is not touched)."""
        if self._output is not None:
            self._output.close()
        if self._stdin is not None:
            with contextlib.suppress(OSError):
                os.close(self._stdin)
            self._stdin = None


def start_worker(module: str, args: list[str], capture_output: bool = False,
                 stdin_pipe: bool = False, env: dict[str, str] | None = None,
                 new_session: bool = False) -> Worker:
    """Start `python -m module args...` (warm when it can: Note [Warm starts]).
    `capture_output`: its stdout and stderr go to a file that `communicate()` returns
    (a file, not a pipe: a script that prints more than a pipe holds would stall while
    we wait on another worker); otherwise it writes to ours. `stdin_pipe`: its stdin is a
    pipe that `communicate(input)` writes. `env`: its environment (default: ours).
    `new_session`: as Popen's `start_new_session`, a process group of its own to signal."""
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
    output = tempfile.TemporaryFile() if capture_output else None
    zygote = _zygote_for(env)
    if zygote is not None:
        r, w = os.pipe() if stdin_pipe else (None, None)
        try:
            out = output.fileno() if output else _fd_or_devnull(1)
            fds = [r if r is not None else _fd_or_devnull(0), out,
                   out if output else _fd_or_devnull(2)]
            child = zygote.start(module, args, env, os.getcwd(), fds, new_session)
        finally:
            if r is not None:
                os.close(r)
        if child is not None:
            return Worker(child, output, w)
        if w is not None:
            os.close(w)
    proc = subprocess.Popen([*COLD_START, module, *args], env=env,
                            stdin=subprocess.PIPE if stdin_pipe else None,
                            stdout=output, stderr=subprocess.STDOUT if output else None,
                            start_new_session=new_session)
    stdin = None
    if proc.stdin is not None:   # hand the pipe's fd to Worker, which writes and closes it
        stdin = os.dup(proc.stdin.fileno())
        proc.stdin.close()
    return Worker(proc, output, stdin)


def worker_death(returncode: int | None) -> str:
    """Why a worker left no status behind, in words: the script ended its process itself
    (`os._exit`) or a signal killed it (the out-of-memory killer sends SIGKILL). Callers
    exit 3 with it: the traced script's process ended, not memledger's job."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (the out-of-memory killer?)" if name == "SIGKILL" else ""
        return f"the script's process was killed by {name}{hint} before memledger finished"
    return (f"the script's process ended with status {returncode} before memledger finished "
            "(os._exit in the script?)")


def dead_worker(returncode: int | None, folder: str | os.PathLike, tail: str = ""):
    """The error for a worker that left no status in `folder`: an OutputError (exit 2) when
    the folder has no room left (it could not write its results: Note [A full temporary
    folder] in memledger/outputs.py), else a ScriptError (exit 3) saying why it ended."""
    from memledger.errors import OutputError, ScriptError
    from memledger.outputs import TMP_ELSEWHERE, out_of_room

    if out_of_room(folder):
        return OutputError(f"no space left on the device in {str(folder)!r}, where memledger's "
                           f"worker writes its results; free some space or {TMP_ELSEWHERE}")
    why = worker_death(returncode)
    return ScriptError(f"{why}: {tail}" if tail else why)


def zygote_address(env: dict[str, str]) -> str | None:
    """The socket of the zygote that serves `env`, for other processes to fork their workers
    from: torchrun's ranks (Note [Warm ranks], memledger/warm_rank.py) and memledger
    processes started with it as MEMLEDGER_ZYGOTE (Note [Warm starts], 7). None: they start
    cold, or their own zygote."""
    zygote = _zygote_for(env)
    return zygote.listen() if zygote is not None else None


def run_worker(module: str, args: list[str], capture_output: bool = False) -> tuple[int, bytes]:
    """Run a worker to its end: (its exit status, its captured output)."""
    w = start_worker(module, args, capture_output=capture_output)
    try:
        out = w.communicate()
    except KeyboardInterrupt:
        w.wait()   # the worker got the same Ctrl-C: let it finish writing
        w.close()
        raise
    w.close()
    return w.returncode, out


def _fd_or_devnull(fd: int) -> int:
    try:
        os.fstat(fd)
        return fd
    except OSError:
        return _devnull()


_DEVNULL: list[int] = []


def _devnull() -> int:
    if not _DEVNULL:
        _DEVNULL.append(os.open(os.devnull, os.O_RDWR))
    return _DEVNULL[0]


# ---- the zygote's client ---------------------------------------------------------------------

_zygotes: dict[tuple, "_Zygote"] = {}
_lock = threading.Lock()
_several = [0]   # depth of several_workers() blocks


@contextlib.contextmanager
def several_workers() -> Iterator[None]:
    """Around work that starts workers one after another (`compare`, `plan --measure`):
    there a zygote pays for itself from the second worker on (Note [Warm starts], 5)."""
    _several[0] += 1
    try:
        yield
    finally:
        _several[0] -= 1


def warm_starts_possible() -> bool:
    """Linux, and not switched off (Note [Warm starts], 1 and 3)."""
    return os.environ.get("MEMLEDGER_WARM_START") != "0" and sys.platform.startswith("linux")


def _zygote_for(env: dict[str, str]) -> "_Zygote | None":
    wanted = os.environ.get("MEMLEDGER_WARM_START") in ("1", "force") or _several[0] > 0
    if not (wanted and warm_starts_possible()):
        return None
    key = tuple(sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV))
    with _lock:
        z = _zygotes.get(key)
        if z is None:
            while len(_zygotes) >= _MAX_ZYGOTES:
                _zygotes.pop(next(iter(_zygotes))).close()
            try:
                z = _zygotes[key] = _Zygote.join(env) or _Zygote.spawn(env)
            except OSError:
                return None
    return z if z.usable() else None


class _Zygote:
    """One zygote (memledger/zygote.py) and the socket we talk to it through: a process of
    ours (`spawn`), or another's that serves our environment (`join`: Note [Warm starts], 7)."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen | None) -> None:
        self.sock = sock
        self.proc = proc
        self.ready: bool | None = None if proc else True   # None until it has imported
        self.dead = False
        self.exits: dict[int, int] = {}
        self.address: str | None = None   # the socket for torchrun's ranks, once asked
        self._replies: list[dict] = []
        self._lock = threading.RLock()

    @classmethod
    def spawn(cls, env: dict[str, str]) -> "_Zygote":
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "memledger.zygote", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(ours, proc)

    @classmethod
    def join(cls, env: dict[str, str]) -> "_Zygote | None":
        """The zygote env's MEMLEDGER_ZYGOTE names, if it is there and serves `env`."""
        address = env.get("MEMLEDGER_ZYGOTE")
        if not address:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.settimeout(_JOIN_TIMEOUT_S)   # a zygote that does not answer is not waited on
        try:
            sock.connect(address)
            sock.send(json.dumps({"serves": env}).encode())
            reply = json.loads(sock.recv(65536) or b"{}")
            sock.settimeout(None)
        except (OSError, ValueError):
            reply = {}
        if not reply.get("serves"):
            sock.close()
            return None
        return cls(sock, None)

    def usable(self) -> bool:
        """Wait for the zygote's imports (once); False if it refused or died, or has not
        imported within _READY_TIMEOUT_S (then it is stopped: cold starts from here on)."""
        with self._lock:
            end = time.monotonic() + _READY_TIMEOUT_S
            while self.ready is None and not self.dead:
                left = end - time.monotonic()
                if left <= 0:
                    with contextlib.suppress(OSError):
                        self.proc.kill()
                    self.close()
                    self.ready = False
                    break
                self._pump(left)
            return bool(self.ready) and not self.dead

    def start(self, module: str, args: list[str], env: dict[str, str], cwd: str,
              fds: list[int], new_session: bool = False) -> "_WarmChild | None":
        request = json.dumps({"module": module, "args": args, "env": env, "cwd": cwd,
                              "session": new_session})
        with self._lock:
            try:
                socket.send_fds(self.sock, [request.encode()], fds)
            except OSError:
                self.dead = True
                return None
            while not self._replies and not self.dead:
                self._pump(None)
            reply = self._replies.pop(0) if self._replies else {}
            # a joined zygote refuses another environment than the one it was asked about
            return _WarmChild(self, reply["pid"]) if "pid" in reply else None

    def listen(self) -> str | None:
        """The path of the zygote's socket for ranks (opened on first use); None if it died."""
        with self._lock:
            if self.address is None and not self.dead:
                try:
                    self.sock.send(json.dumps({"listen": True}).encode())
                except OSError:
                    self.dead = True
                while self.address is None and not self.dead:
                    self._pump(None)
            return self.address

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit status once the zygote reports it; None if not by `timeout`
        (0: do not wait)."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while pid not in self.exits:
                if self.dead:
                    return self._orphaned(pid, end)
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    self._pump(0)
                    return self.exits.get(pid)
                self._pump(left)
            return self.exits[pid]

    def _pump(self, timeout: float | None) -> None:
        """Read the zygote's messages for up to `timeout` seconds (None: until one)."""
        if self.dead:
            return
        ready, _, _ = select.select([self.sock], [], [], timeout)
        while ready:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self.dead = True
                self.ready = bool(self.ready)
                return
            msg = json.loads(data)
            if "ready" in msg:
                self.ready = bool(msg["ready"])
            elif "exit" in msg:
                self.exits[msg["exit"]] = msg["code"]
            elif "address" in msg:
                self.address = msg["address"]
            else:
                self._replies.append(msg)
            ready, _, _ = select.select([self.sock], [], [], 0)

    def _orphaned(self, pid: int, end: float | None) -> int | None:
        """The zygote died before reporting `pid`: its death sent the child SIGTERM
        (zygote.py sets PR_SET_PDEATHSIG); wait until it is gone and say so."""
        while _pid_alive(pid):
            if end is not None and time.monotonic() >= end:
                return None
            time.sleep(0.02)
        self.exits[pid] = -signal.SIGTERM
        return self.exits[pid]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.dead = True
        if self.proc is not None:   # a joined zygote is its owner's to end
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)


class _WarmChild:
    """A zygote's child, seen from here: `pid`, `returncode`, `poll()` and `wait()`."""

    def __init__(self, zygote: _Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"memledger worker {self.pid}", timeout or 0)
        return self.returncode


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _close_all() -> None:
    for z in list(_zygotes.values()):
        z.close()
    _zygotes.clear()


atexit.register(_close_all)   # our end of each socket closes; each zygote then exits
