"""Which line of the user's own code is running: the innermost frame outside libraries.

The doctor names the line of a finding ("the path was cut by `.detach()` at train.py:31").
Hooks fire deep inside torch (an optimizer wrapper, a module's `__call__`, a
`__torch_function__`), so the line is the innermost frame whose file is neither torch,
memledger, the standard library nor an installed package: the training script, or a module
of the user's project that it imports. Frames of transformers or peft are installed packages,
so their callers' lines are named (the `model(**batch)` line of the script).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import site
import sys
import sysconfig
from types import FrameType, FunctionType, ModuleType
from typing import Iterator

import torch

import memledger


_TORCH = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep
_OURS = os.path.dirname(os.path.realpath(memledger.__file__)) + os.sep


def _library_dirs() -> tuple[str, ...]:
    dirs = {_TORCH, _OURS}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            dirs.add(os.path.realpath(paths[key]) + os.sep)
    # Note [Packages outside the interpreter's own directories]
    # The scheme's purelib is where `pip install` puts packages in a venv, but not the only
    # place Python finds installed ones: `pip install --user` puts them in the user site
    # (~/.local/lib/python3.X/site-packages), Debian's Python has dist-packages of its own,
    # and a `.pth` file or PYTHONPATH adds another environment's site-packages. Read as the
    # user's own code, transformers' modules were walked for who holds a retained tensor,
    # its `MODEL_MAPPING` with them, and `doctor` stopped with an internal error (exit 70)
    # on train_galore.py, whose galore-torch sat in a venv that reads a second
    # environment's site-packages through a `.pth` file; a finding's line could name a
    # frame inside a library. So every site directory Python knows and every sys.path
    # entry named site-packages or dist-packages is a library directory too.
    known = list(site.getsitepackages()) + [site.getusersitepackages()]
    known += [p for p in sys.path
              if os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")]
    dirs.update(os.path.realpath(p) + os.sep for p in known if p)
    return tuple(dirs)


_LIBS = _library_dirs()
_user_file: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    known = _user_file.get(filename)
    if known is None:
        known = not filename.startswith("<") and \
            not os.path.realpath(filename).startswith(_LIBS)
        _user_file[filename] = known
    return known


def user_frame(depth: int = 1) -> FrameType | None:
    """The innermost frame of user code above the caller (None when there is none)."""
    f = sys._getframe(depth)
    while f is not None and not is_user_file(f.f_code.co_filename):
        f = f.f_back
    return f


def library_caller(f: FrameType | None) -> str:
    """`torchsde/_core/sdeint.py:88 (check_contract)`: where a third-party library's code
    called the user frame `f`; '' when the caller is the script's, torch's or memledger's."""
    c = f.f_back if f is not None else None
    if c is None:
        return ""
    name = os.path.realpath(c.f_code.co_filename)
    if is_user_file(name) or name.startswith((_TORCH, _OURS)):
        return ""
    return f"{library_path(name)}:{c.f_lineno} ({c.f_code.co_name})"


def library_path(filename: str) -> str:
    """`torchsde/_core/sdeint.py`: a library file's path under the innermost library
    directory that holds it."""
    real = os.path.realpath(filename)
    lib = max((d for d in _LIBS if real.startswith(d)), key=len, default="")
    return real[len(lib):].lstrip(os.sep)


_STDLIB = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep
                for k in ("stdlib", "platstdlib") if sysconfig.get_paths().get(k))
# a system Python's site-packages may sit inside its stdlib directory
_PACKAGES = re.compile(r"[/\\](site|dist)-packages[/\\]")


def is_library_file(filename: str) -> bool:
    """A third-party library's file: not the user's, not torch's, memledger's or the
    standard library's (a site-packages inside the standard library's directory is)."""
    if filename.startswith("<") or is_user_file(filename):
        return False
    real = os.path.realpath(filename)
    return not real.startswith((_TORCH, _OURS)) and \
        not (real.startswith(_STDLIB) and not _PACKAGES.search(real))


def library_runner(depth: int = 1, past_forwards: bool = False) -> str:
    """`torch_pruning/dependency/graph.py:1029 (_trace)`: the third-party library line that
    made the call running now (the first frame above the caller outside torch, memledger
    and the standard library, when it is a library's); '' when it is the user's own code
    (Note [A library's own forward from the script's line]). `past_forwards`: a module's
    `forward` is passed over, to the line that called it (Note [A forward called as a
    method])."""
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename
        if is_user_file(name):
            return ""
        real = os.path.realpath(name)
        stdlib = real.startswith(_STDLIB) and not _PACKAGES.search(real)
        if not name.startswith("<") and not stdlib and not real.startswith((_TORCH, _OURS)) \
                and not (past_forwards and _module_forward(f)):
            return f"{library_path(real)}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return ""


# Note [A forward called as a method]
# A top-level call (no module call around it) made inside a module's `forward` means that
# forward was called as a method, `self.forward(x)`, not as `self(x)`: pykan's `fit` runs
# its test loss and `update_grid` so, under gradients, and each `KANLayer` inside was a
# top-level call whose graph no backward used. The doctor named the library line that made
# the call, "run by kan/MultKAN.py:800 (forward)": the KAN's own forward, which says
# nothing about who ran it. The line that called the forward does: "kan/MultKAN.py:1565
# (fit)". Where that caller is the script's own (`model.forward(x)`), there is no library
# line, and the advice is the script's (tests/unit/test_unused_graph_library.py).
def _module_forward(f: FrameType) -> bool:
    """Whether frame `f` runs a module's `forward`."""
    return f.f_code.co_name == "forward" and \
        isinstance(f.f_locals.get("self"), torch.nn.Module)


def user_line(depth: int = 2) -> tuple[str, int]:
    """(file, line) of the innermost user frame; ("", 0) when the stack has none."""
    f = user_frame(depth)
    return (f.f_code.co_filename, f.f_lineno) if f is not None else ("", 0)


def in_reentrant_checkpoint() -> bool:
    """True when torch's reentrant checkpoint (CheckpointFunction.forward) is on the stack."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name == "forward" and code.co_filename.endswith(
                os.path.join("utils", "checkpoint.py")):
            return True
        f = f.f_back
    return False


def user_name_of(obj: object) -> tuple[str, str, int]:
    """(name, file, line) of the innermost user frame that holds `obj` in a variable: a
    local, a global, or an attribute of a local (`self.sched` gives `sched`); the line is
    where that frame is now. ("", "", 0) when no user frame holds it."""
    f = sys._getframe(1)
    while f is not None:
        if is_user_file(f.f_code.co_filename):
            name = _name_in(f, obj)
            if name:
                return name, f.f_code.co_filename, f.f_lineno
        f = f.f_back
    return "", "", 0


def _name_in(frame: FrameType, obj: object) -> str:
    return next((name for name, value in frame_names(frame) if value is obj), "")


def frame_names(frame: FrameType) -> Iterator[tuple[str, object]]:
    """(name, object) of what a frame names: its locals, its globals, then the attributes
    of its locals (Note [A frame's locals, let go of])."""
    with frame_locals(frame) as local:
        names = list(local.items())
    yield from names
    yield from list(frame.f_globals.items())
    for _, value in names:
        if isinstance(value, (type, ModuleType, FunctionType)):
            continue
        try:   # never through __getattr__ (a lazy proxy would wake)
            attrs = object.__getattribute__(value, "__dict__")
        except Exception:
            continue
        if isinstance(attrs, dict):
            yield from list(attrs.items())


# Note [A frame's locals, let go of]
# Before Python 3.13 (PEP 667), a function frame's `f_locals` is a snapshot dict that the
# frame keeps and fills again at the next read: it holds every local of the frame as it was
# at the read (a loss, a batch, a graph) until the next read or the frame's end, which the
# untraced run does not. The doctor reads the training loop's frame for names at each
# top-level module call (`user_name_of`, Note [A graph no backward used]), inside the
# call, before the script's `loss = model(batch)` binds the new loss: the snapshot held the
# previous one. In lucidrains' Mega-pytorch train.py loop (tests/clients/train_mega.py,
# `main()`) the ledger `doctor -o` records read 324,872 B at the peak against the trace's
# 324,868 (step 2's loss kept through step 3's backward), and with a validation forward
# left outside `no_grad()` (`loss = model(next(val_loader))`, `--val-grad`) its whole
# graph: 539,132 B against 532,940, and the doctor found nothing in `--steps 2` (the graph
# died at the doctor's stop, unjudged, not at the next step's `loss =`). Each read now
# empties the snapshot as soon as it has been copied; a module-level frame's `f_locals`
# is its globals, never emptied.
#
# Unless the script holds the snapshot too: `locals()` hands back that same dict, and
# stable-baselines3's `collect_rollouts` passes it to its callbacks each step
# (`callback.update_locals(locals())`, kept as `callback.locals`). Emptied, it let go of
# the rollout's values and log-probabilities the untraced run keeps there: PPO's ledger
# read 8 B under the allocator (64,120 against 64,128; RecurrentPPO 24 B,
# tests/clients/test_sb3_clients.py, test_sb3c_clients.py) once the collector read the
# frames of a module's method (Note [Work a module's method does outside any call],
# trace/collector.py). A snapshot another holder keeps (more references than the frame's
# and this read's) is left as it is.
@contextlib.contextmanager
def frame_locals(f: FrameType) -> Iterator[dict]:
    """A frame's locals, let go of after use (Note [A frame's locals, let go of]): the
    snapshot dict is emptied at the block's end, before Python 3.13, for a function's
    frame whose snapshot nobody else holds; moved a measured peak by 8,448 B
    (tests/clients/train_loops.py --one-block) in the collector's reads before."""
    local = f.f_locals
    # the frame's, `local` and the call's own argument: no other holder
    ours = sys.getrefcount(local) <= 3
    try:
        yield local
    finally:
        if ours and _LOCALS_SNAPSHOT and f.f_code.co_flags & inspect.CO_OPTIMIZED:
            local.clear()
        del local


# Python 3.13 (PEP 667): `f_locals` is a proxy that writes through; before: a snapshot
_LOCALS_SNAPSHOT = sys.version_info < (3, 13)
