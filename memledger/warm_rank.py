"""`python -m memledger.warm_rank MODULE ARGS...`: one torchrun rank, its worker forked warm.

# Note [Warm ranks]
torchrun starts each rank as a fresh `python -m MODULE`, which imports torch before the
script's first line (2-3.5 s of CPU each, Note [Warm starts] in memledger/processes.py):
`trace --nproc 2` launches torchrun twice, so four rank imports besides the launcher's own,
and `compare --nproc 2` a dozen. So memledger's launches (memledger/trace/launch.py) give
torchrun this module to run instead, with MEMLEDGER_ZYGOTE naming a socket of the zygote
that serves the launch's environment. This stand-in imports nothing heavy: it passes the
zygote its stdin, stdout, stderr, environment, folder and arguments, the zygote forks the
worker, and the stand-in stays torchrun's process for that rank:
- signals torchrun sends it (SIGTERM when another rank failed, SIGINT on a Ctrl-C) go on
  to the worker, and it ends with the worker's exit status (a signal's death re-raised), so
  torchrun sees what it would have seen;
- the stand-in dies with torchrun (PR_SET_PDEATHSIG, passed on as above), and if it is
  killed outright its connection closes and the zygote sends the worker SIGTERM: a worker
  never runs on alone, as a cold rank never does (its own PDEATHSIG);
- a rank's environment differs from the zygote's in torchrun's variables (RANK,
  MASTER_PORT, TORCHELASTIC_*: processes.RANK_ENV), read when the script makes its process
  group, not at import; any other difference, a zygote that is gone, or no
  MEMLEDGER_ZYGOTE at all, and the stand-in becomes `python -m MODULE` itself (exec: the
  same process, cold), so a warm rank is only ever faster, never different.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

# what torchrun (or a terminal) sends a rank, passed on to its worker
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
              signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    module, args = argv[0], argv[1:]
    from memledger.trace.interrupts import die_with_parent

    die_with_parent()   # torchrun's death reaches the worker through _forward
    address = os.environ.get("MEMLEDGER_ZYGOTE")
    code = _run_warm(address, module, args) if address else None
    if code is None:    # cold: this process becomes the rank torchrun would have started
        from memledger.processes import COLD_START

        os.execv(sys.executable, [*COLD_START, module, *args])
    if code < 0:        # killed by a signal: die of the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _run_warm(address: str, module: str, args: list[str]) -> int | None:
    """The worker's exit status (Popen.returncode's sense); None if the zygote cannot
    serve this rank."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(address)
        # a session of its own, as torchrun gives each rank: a terminal's Ctrl-C reaches
        # the worker once, through torchrun and this stand-in
        request = {"module": module, "args": args, "env": dict(os.environ), "cwd": os.getcwd(),
                   "session": True}
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
        reply = json.loads(sock.recv(65536) or b"{}")
    except (OSError, ValueError):
        return None
    pid = reply.get("pid")
    if pid is None:
        return None
    for sig in _FORWARDED:
        signal.signal(sig, lambda signum, frame: _forward(pid, signum))
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:   # the zygote died: its death sent the worker SIGTERM (PDEATHSIG)
            return -signal.SIGTERM
        msg = json.loads(data)
        if msg.get("exit") == pid:
            return msg["code"]


def _forward(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


if __name__ == "__main__":
    sys.exit(main())
