"""Regions inside code a real backend compiled: no policy predicted there. No torch here.

Note [Policies inside compiled code] in memledger/trace/compiled.py: the ledger is the
eager run, and a policy's wrappers inside a compiled graph do what the compiler makes of
them (checkpoint dropped nothing and offload moved nothing under `aot_eager`), so `predict`
refuses a policy on a region that is, holds or sits inside a module torch.compile'd with
a backend other than `eager`. The evidence is the trace's: a `compiled` record (path,
backend) per compiled module, and a `compiles` record when the allocator pass, which runs
the compiled code, compiled frames (`module.compile()` on a module of torch's own classes
compiles nothing: its frames are in Dynamo's skip list, and its policies act as eager).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from memledger.errors import NotPredicted

if TYPE_CHECKING:   # the tracer imports EAGER_BACKEND from here: no pandas on its path
    from memledger.ledger.model import Ledger

EAGER_BACKEND = "eager"   # the wrappers act as on the plain model: predicted to the byte


def compiled_regions(led: Ledger) -> tuple[tuple[str, str], ...]:
    """(path, backend) of each module compiled by a backend other than `eager`, where the
    allocator pass compiled frames (or the ledger has no allocator pass to say)."""
    compiled = [(str(r["path"]), str(r.get("backend") or "unknown"))
                for r in led.extra.get("compiled", []) if r.get("path") is not None]
    if not compiled or not (led.extra.get("compiles") or not led.measurements):
        return ()
    return tuple(dict.fromkeys(c for c in compiled if c[1] != EAGER_BACKEND))


def compiled_elsewhere_line(led: Ledger) -> str:
    """One line when the allocator pass compiled frames that no compiled module explains
    (a `torch.compile`d function: a whole training step, or only the optimizer's): whether
    the model's forward ran inside it the trace cannot tell, so predict says so."""
    frames = sum(int(r.get("frames", 0)) for r in led.extra.get("compiles", [])
                 if r.get("aot", 1))   # Note [A compile by the eager backend]
    if not frames or any(r.get("path") is not None for r in led.extra.get("compiled", [])):
        return ""
    return ("the script ran code torch.compile'd outside any compiled module (a "
            "compiled function): if the model's forward runs in it, "
            "the compiler decides what is saved there and these predictions, made for the "
            "eager run, may not hold; `memledger measure` says")


def refuse_compiled_regions(policy: str, paths: Iterable[str],
                            compiled: Iterable[tuple[str, str]]) -> None:
    """Raise PolicyRefused if a region (`paths`) is, holds or sits inside a module of
    `compiled` ((path, backend))."""
    compiled = list(compiled)
    for path in paths:
        for c, backend in compiled:
            if not (_within(c, path) or _within(path, c)):
                continue
            how = f"torch.compile'd (backend {backend!r})"
            what = (f"{_name(path)} is {how}" if c == path else
                    f"{_name(path)} holds {_name(c)}, {how}" if _within(c, path) else
                    f"{_name(path)} runs inside {_name(c)}, {how}")
            raise NotPredicted(
                f"{policy}: {what}: in a compiled graph the compiler decides what is "
                f"saved, and the ledger is the eager run; `memledger measure` runs it")


def _name(path: str) -> str:
    return path or "the model"


def _within(inner: str, outer: str) -> bool:
    """`inner` is `outer` or a module under it ('' is the model)."""
    return inner == outer or not outer or inner.startswith(outer + ".")
