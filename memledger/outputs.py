"""Writing the files memledger makes without ever losing one of the user's.

Every output (a ledger, a report, an export, JUnit, Markdown, JSON) goes through here:

- `check_output(path, inputs=...)` runs BEFORE any work: the folder exists and is writable,
  the path is not a folder, and it is not one of the command's inputs (same resolved path or
  same file, so `trace victim.py -o victim.py` and `report run.ledger -o run.ledger` are
  refused with nothing run). An output may replace a file memledger wrote (a ledger only a
  ledger), never any other file: `report run.ledger -o train.py` is refused, not a script
  turned into HTML (`written_by_memledger`).
- `write_atomic(path, data)` writes a temporary file beside the target and renames it over
  the target at the end (`os.replace`, atomic on POSIX): a reader sees the old file or the
  new one, never half of one, and a failure (disk full) leaves the old file as it was.
  Special files (`/dev/stdout`, a FIFO) are written in place: they cannot be renamed over.

# Note [Two writers, one output]
Two `memledger trace -o run.ledger` at once each stream into their own
`.run.ledger.<pid>.partial` and rename it at the end; the last to finish wins with a whole
ledger (say 9,812 bytes), the other's complete ledger is replaced whole, and no reader
ever sees the two interleaved.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterable, Iterator

from memledger.errors import OutputError

LEDGER_MAGIC = b'{"k":"header"'


def is_special(path: Path) -> bool:
    """A character device, FIFO or socket: written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _same(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | Path, what: str, inputs: Iterable[str | Path] = (),
                 ledger: bool = False) -> Path:
    """Refuse, before anything runs, an output that cannot be written or is an input."""
    p = Path(path)
    for i in inputs:
        if i is not None and _same(p, Path(i)):
            raise OutputError(f"the {what} {str(p)!r} is also an input of this command; "
                              "writing it would destroy the input: pick another output path")
    if p.is_dir():
        raise OutputError(f"the {what} {str(p)!r} is a directory; give a file path")
    if is_special(p):
        return p
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"cannot write the {what} {str(p)!r}: folder {str(parent)!r} does "
                          "not exist; create it or pick another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write the {what} {str(p)!r}: folder {str(parent)!r} is not "
                          "writable; pick another path")
    _probe_create(p, parent, what)
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"cannot write the {what} {str(p)!r}: the file is read-only; "
                          "pick another path")
    if p.is_file() and p.stat().st_size > 0:
        if ledger and not _head(p).startswith(LEDGER_MAGIC):
            raise OutputError(f"{str(p)!r} exists and is not a memledger ledger; memledger "
                              "will not overwrite it: pick another -o path")
        if not ledger and not written_by_memledger(p):
            raise OutputError(f"{str(p)!r} exists and memledger did not write it; memledger "
                              f"will not overwrite it with the {what}: pick another path, "
                              "or delete it first")
    return p


# Note [A folder that says it is writable]
# `os.access` answers from the mode bits (and a read-only mount), not from what the
# filesystem will do: for root every folder is writable, /proc included, and ACLs, a
# root-squashed NFS share or a FUSE mount can refuse what the bits allow. `trace -o
# /proc/run.ledger` passed the check, the ledger pass failed to open its partial file with
# a traceback, and the CLI said "the script's process ended with status 1 before memledger
# finished (os._exit in the script?); the partial ledger is kept at /proc/run.ledger",
# naming a file that could not exist. So the check makes (and removes) an empty file
# beside the output, as the writers will: what cannot be created is refused before
# anything runs, in the filesystem's own words.
def _probe_create(p: Path, parent: Path, what: str) -> None:
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=parent)
    except OSError as e:
        raise OutputError(f"cannot write the {what} {str(p)!r}: cannot create a file in "
                          f"folder {str(parent)!r} ({e.strerror}); pick another path") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


SNIFF_BYTES = 65_536
CSV_HEADER = b"sid,bytes,device,"      # the tensor table's first columns (report/exporters.py)


def _head(p: Path, n: int = SNIFF_BYTES) -> bytes:
    try:
        with open(p, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _tail(p: Path, n: int = SNIFF_BYTES) -> bytes:
    try:
        with open(p, "rb") as fh:
            fh.seek(max(0, p.stat().st_size - n))
            return fh.read(n)
    except OSError:
        return b""


# What each output begins with (a script that merely mentions memledger is none of them)
SIGNATURES = (
    LEDGER_MAGIC,                     # a ledger
    CSV_HEADER,                       # `export -f csv`
    b"### memledger ",                # `check --markdown`
)
MARKS = (
    b"<title>memledger ",             # `report`, `compare --html`, a ranks page
    b'<testsuite name="memledger"',   # `check --junit`
    b'"schema": "memledger.',         # `pytest --memledger-json`
)


def written_by_memledger(p: Path) -> bool:
    """Whether an existing file is one of memledger's outputs: its start is one of theirs
    (SIGNATURES, MARKS; a Perfetto trace names memledger's process; a Parquet tensor
    table's footer names its columns)."""
    head = _head(p)
    if head.startswith(SIGNATURES) or any(m in head[:4096] for m in MARKS):
        return True
    if head.startswith(b'{"traceEvents":') and b'"name":"memledger ' in head[:4096]:
        return True
    return head.startswith(b"PAR1") and b"saved_module" in _tail(p)


def partial_path(target: Path) -> Path:
    """Where a streamed output grows before it is renamed over `target` (see Note above)."""
    if is_special(target):
        return target
    return target.with_name(f".{target.name}.{os.getpid()}.partial")


def commit(partial: Path, target: Path) -> None:
    """Rename a finished (or partial, kept) stream over its target."""
    if partial != target and partial.exists():
        try:
            os.replace(partial, target)
        except OSError as e:
            raise os_error(e, f"the ledger {str(target)!r}",
                           extra=f"; what was recorded is in {str(partial)!r}") from None


def os_error(e: OSError, what: str, extra: str = "",
             elsewhere: str = "write elsewhere (-o)") -> OutputError:
    """One line for a failed write; a full disk says so and never blames the script."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(f"no space left on the device writing {what}{extra}; free some "
                           f"space or {elsewhere}")
    return OutputError(f"cannot write {what}: {e.strerror or e}{extra}; pick another path")


# Note [A full temporary folder]
# memledger's workers write their results (a gradient capture, a status, a ledger) and
# offload's copies into the temporary folder ($TMPDIR, else /tmp), which is often small on
# a cluster node or in a container. A full one failed in ways that blamed the script:
# torch.save's zip writer reports a short write as "RuntimeError: [enforce fail at
# inline_container.cc:672] . unexpected pos 6016 vs 5910", the worker could then not write
# its status either, and `compare` said "the script's process ended with status 1 (os._exit
# in the script?)", exit 3. Now a write that fails while its folder has no room left is
# a full disk (`writing`), and so is a worker that left no status in a folder with no room
# (memledger/processes.py `dead_worker`): one line naming the folder, exit 2.
ROOM_BYTES = 1 << 20          # less than this free in a folder: a failed write there is a
                              # full disk (the partial file took what was left)
TMP_ELSEWHERE = "set TMPDIR to a folder with room"


def out_of_room(folder: str | Path) -> bool:
    """True when `folder`'s file system has less than ROOM_BYTES free for us."""
    try:
        import shutil

        return shutil.disk_usage(folder).free < ROOM_BYTES
    except OSError:
        return False


@contextlib.contextmanager
def writing(path: str | Path, what: str, elsewhere: str = TMP_ELSEWHERE) -> Iterator[None]:
    """Raise OutputError, the partial file removed, when the write of `path` inside fails on
    a full disk (Note [A full temporary folder]); any other failure propagates."""
    try:
        yield
    except Exception as e:
        full = (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)) or \
            out_of_room(Path(path).parent)
        if not full:
            raise
    else:
        return
    with contextlib.suppress(OSError):
        os.unlink(path)
    raise os_error(OSError(errno.ENOSPC, "No space left on device"),
                   f"{what} in {str(Path(path).parent)!r}", elsewhere=elsewhere)


@contextlib.contextmanager
def open_atomic(path: str | Path, what: str, mode: str = "w") -> Iterator[IO]:
    """`with open_atomic(p, "report") as fh:` writes `p` whole or not at all."""
    target = Path(path)
    # one temporary name per process and thread: a rank's hang watchdog (a thread) and its
    # main thread may write the same status file at once (Note [A rank that never returns])
    tmp = target if is_special(target) else target.with_name(
        f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    kw = {} if "b" in mode else {"encoding": "utf-8"}
    try:
        with open(tmp, mode, **kw) as fh:
            yield fh
        if tmp != target:
            os.replace(tmp, target)
    except OSError as e:
        raise os_error(e, f"the {what} {str(target)!r}") from None
    finally:
        if tmp != target and tmp.exists():
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_atomic(path: str | Path, data: str | bytes, what: str) -> Path:
    with open_atomic(path, what, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    return Path(path)
