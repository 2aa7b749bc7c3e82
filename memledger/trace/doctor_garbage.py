"""Tensors held only by reference cycles, found at step boundaries.

# Note [Tensors only the garbage collector frees]
Reference counting frees a tensor the moment nothing refers to it; a tensor on a reference
cycle (or held by one) stays after the script has let go of it, until Python's cyclic
garbage collector runs, at a time of its own choosing (generation thresholds counted in
container allocations, not bytes). Its memory stays in use after the tensor's last use,
often steps later, and peaks move with the collector's schedule. Cycles a training loop
makes by accident:

- a custom `autograd.Function` that keeps a tensor as an attribute of `ctx` (`ctx.out =
  out`) instead of `ctx.save_for_backward(out)`: the output's `grad_fn` is `ctx`, which holds
  the output (torch's documentation warns of it); every step's output stays;
- an exception kept past its `except` block (`self.last_error = e`): its traceback holds the
  frames, their locals hold the batch and activations;
- a model copy dropped while it points back at itself (a bound-method hook of its own, a
  child holding its parent), as transformers' Mamba is after `save_pretrained` (327,424 B
  of parameters: docs/accuracy.md, "Memory only the garbage collector frees").

At each training step's end the probe runs one collection with `gc.DEBUG_SAVEALL`, which
puts what the collector would free in `gc.garbage` instead of freeing it, reads the tensors
among it, and names the structure that held them: the cycle through the largest tensor,
each hop labelled (`.grad_fn`, `.out`, `[2]`, `[local 'x']`), and what kind of cycle it is,
with the line of user code that keeps it (the `ctx.out =` line, the line that keeps the
exception). Then it empties `gc.garbage` and collects again, so the garbage is freed at the
boundary. Python's own collections in the middle of a step are read too (`gc.callbacks`:
DEBUG_SAVEALL set as one starts, its garbage read as it stops, held to the boundary and
freed there; records marked `collected`), except under `doctor -o`, where holding garbage
would move the ledger's frees; there the ledger records the boundary's frees at the step's
end, earlier than the untraced script would free them.

The probe refers to the parameters it met only weakly (Note [Parameters held weakly] in
doctor_probe.py): a dropped model copy that ran (an evaluation snapshot) leaves its
parameters among the garbage with their module, as in the script run alone.

Example: `tests/doctor/garbage.py --cycle ctx` (a Function keeping its 64x256 float32
output as `ctx.out`): at the boundaries of steps 2 and 3 one unreachable 65,536-byte
tensor, "Tensor(64x256 float32) → .grad_fn DoubleBackward → .out Tensor(64x256 float32)",
at the `ctx.out = out` line (step 1's output is still reachable through `loss` at its own).
"""

from __future__ import annotations

import gc
import inspect
import re
import types
import weakref
from collections import deque
from typing import Any

import torch
from torch import nn

from memledger.trace.gc_window import garbage_kept
from memledger.trace.where import is_user_file

_Tensor = torch.Tensor
_PROXIES = (weakref.ProxyType, weakref.CallableProxyType)   # a dead one raises on any use
_CONTAINERS = (dict, list, tuple, types.CellType)   # named by the hop into them
_MAX_OBJECTS = 200_000   # a garbage heap larger than this is only summed, not walked


class GarbageWatch:
    """Kept by the doctor's probe: `boundary(step)` returns `garbage` records. With
    `collections`, entered, it also reads the garbage of Python's own collections in the
    middle of a step (records with `collected`), keeping it to the boundary."""

    def __init__(self, collections: bool = False) -> None:
        self.collections = collections
        self.step = 1            # the training step running (for mid-step records)
        self._records: list[dict[str, Any]] = []   # mid-step, since the last boundary
        self._kept: list[Any] = []                  # their garbage, freed at the boundary
        self._scanning = False
        self._n0, self._flags = 0, 0

    def __enter__(self) -> "GarbageWatch":
        if self.collections:
            gc.callbacks.append(self._on_collection)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        self._kept = []

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        """One of Python's collections: what it would free is kept in `gc.garbage`
        (DEBUG_SAVEALL, set as it starts), read, and held to the boundary, where the scan
        frees it; held here, a later collection does not list it again."""
        if self._scanning:
            return
        if phase == "start":
            self._n0, self._flags = len(gc.garbage), gc.get_debug()
            gc.set_debug(self._flags | gc.DEBUG_SAVEALL)
            return
        gc.set_debug(self._flags)
        found = gc.garbage[self._n0:]
        if found:
            del gc.garbage[self._n0:]
            self._kept.extend(found)
            self._records.extend(dict(r, collected=True) for r in _describe_found(
                found, self.step))

    def boundary(self, step: int, scan: bool = True) -> list[dict[str, Any]]:
        """`scan` False: the garbage is freed, not described (Note [Garbage at the script's
        end]); what the step's own collections found is still reported."""
        self._scanning = True
        try:
            records, self._records = self._records, []
            # what the step's collections found is let go of and listed again by the scan,
            # left out by identity (still alive in gc.garbage then): a plain collection
            # first would free, unseen, older garbage that it referred to
            described = {id(o) for o in self._kept}
            self._kept = []
            found = _scan(step, described)
            if scan:
                records += found
        finally:
            self._scanning = False
        self.step = step + 1
        return records


# Note [Garbage at the script's end]
# A step counted by forward (`--steps-by forward|whole`, Note [A doctor without an
# optimizer] in doctor_probe.py) ends with the script, and the boundary's scan ran after
# it had returned: by then what the script let go of on its way out is garbage too, the
# locals of its `main()` and its module namespace (each top-level function refers to it
# through `__globals__`, and it to them), and every model with a cycle of its own among
# them was read as "no longer reachable, still in memory": a warning on correct scripts
# (sentence-transformers' `encode`, tests/clients/train_sbert.py --encode 3: a dropped
# `SentenceTransformer`, 41 tensors, 294.2 KiB, its `.model_card_data.model` pointing
# back; a diffusers sampling loop with a top-level `def`: 151 tensors, 706.3 KiB through
# "function build → ['opt'] AdamW"). Memory the collector frees after the script is over
# costs the run nothing, and the scan cannot tell the last step's garbage from the exit's.
# So at the script's end the scan frees without describing; what Python's own collections
# found during that step is reported as in any step, and the steps before it are scanned
# as before (a cycle made every step is seen at their boundaries).
# tests/clients/test_doctor_steps_by_clients.py.
def _scan(step: int, described: set[int] = frozenset()) -> list[dict[str, Any]]:
    """One collection with DEBUG_SAVEALL: the records of its garbage (`described`: ids of
    objects already described), then the garbage freed."""
    found = garbage_kept()
    try:
        return _describe_found(found, step, described)
    finally:
        found.clear()
        gc.collect()   # free what the scan kept, now (no local may still hold it)


def _describe_found(found: list, step: int,
                    described: set[int] = frozenset()) -> list[dict[str, Any]]:
    return _describe([o for o in found if type(o) not in _PROXIES], step, described)


def _of(o: Any, cls) -> bool:
    """isinstance by the object's type alone: garbage may hold dead weakref proxies, which
    raise on `__class__`, and lazy objects that wake on it."""
    return issubclass(type(o), cls)


# Note [A cycle a collection saw before its tensors]
# Python's own collection in the middle of a step may find a cycle while a tensor it holds
# is still referred to from outside (a frame still running): the cycle is kept and
# described then, with no tensor. At the boundary the tensor is garbage too, and the scan
# left out the objects described already, the cycle among them, so the tensor was
# described alone: "a reference cycle of objects holds them", no path, a finding apart
# from the same cycle's at the steps no collection ran in (Keras' custom loop by forward:
# torch's `tree_flatten` keeps its recursive `helper` in its own closure, with Keras'
# `is_leaf` lambda and a 4x16x32 activation: steps 1 and 3 pathless, step 2 named).
# Objects described already are still walked for the structure and its cycle; only their
# tensors are not counted again. Pinned by `tests/doctor/garbage.py --cycle held`, where a
# `gc.collect()` in a helper that still holds the tensor stands for Python's own
# collection (the Keras case follows the collector's schedule: the suite runs it with
# `--manual-gc`).
def _describe(garbage: list, step: int,
              described: set[int] = frozenset()) -> list[dict[str, Any]]:
    """One record per kind of structure among the garbage that holds tensor memory (the
    same structure made again, one per layer say, counted in `structures`; no weakref
    proxies: `_describe_found` filtered them)."""
    tensors = [o for o in garbage if _of(o, _Tensor) and id(o) not in described
               and _nbytes(o)]
    if not tensors:
        return []
    groups: dict[tuple, tuple[dict[str, Any], list]] = {}
    if len(garbage) > _MAX_OBJECTS:
        groups[()] = ({"kind": "other", "cycle": "", "what": f"{len(garbage):,} objects",
                       "structures": 1}, tensors)
    else:
        ids = {id(o): o for o in garbage}
        edges = {i: [id(r) for r in gc.get_referents(o) if id(r) in ids] for i, o in ids.items()}
        for part in _components(edges, tensors):
            held = [t for t in tensors if id(t) in part]
            info = _explain(ids, edges, part, max(held, key=_nbytes))
            key = (info["kind"], info["loop"], info.get("file", ""), info.get("line", 0))
            if key in groups:
                groups[key][0]["structures"] += 1
                groups[key][1].extend(held)
            else:
                groups[key] = ({**info, "structures": 1}, held)
    return [{"k": "garbage", "step": step, "bytes": _bytes(held), "tensors": len(held), **info}
            for info, held in groups.values()]


def _nbytes(t: _Tensor) -> int:
    try:
        if t.device.type == "meta" or t.is_sparse:
            return 0
        return int(t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):   # a subclass with no storage
        return 0


def _bytes(ts: list) -> int:
    """Bytes of the storages of `ts`, each storage once."""
    seen: dict[tuple, int] = {}
    for t in ts:
        st = t.untyped_storage()
        seen[(str(st.device), st.data_ptr())] = st.nbytes()
    return sum(seen.values())


def _components(edges: dict[int, list[int]], tensors: list) -> list[set[int]]:
    """The garbage's connected structures (`edges`: object -> what it refers to, both
    garbage; followed either way) that hold a tensor."""
    undirected: dict[int, set[int]] = {i: set(js) for i, js in edges.items()}
    for i, js in edges.items():
        for j in js:
            undirected[j].add(i)
    seen: set[int] = set()
    parts = []
    for t in tensors:
        if id(t) in seen:
            continue
        part, todo = {id(t)}, [id(t)]
        while todo:
            for j in undirected[todo.pop()]:
                if j not in part:
                    part.add(j)
                    todo.append(j)
        seen |= part
        parts.append(part)
    return parts


def _explain(ids: dict[int, Any], edges: dict[int, list[int]], part: set[int],
             tensor: _Tensor) -> dict[str, Any]:
    """What kind of structure `part` is, the cycle through (or above) `tensor`, labelled,
    and the user line that made it."""
    objs = [ids[i] for i in part]
    cycle = _cycle_through(edges, id(tensor)) or _cycle_above(edges, id(tensor))
    cycle = _from_named(ids, cycle)
    # `loop`: the cycle alone, which names the structure (the path on to the tensor, after
    # it, depends on which of equal tensors is the largest)
    loop = cycle[:cycle.index(cycle[0], 1) + 1] if cycle else []
    info: dict[str, Any] = {"cycle": _label(ids, cycle) if cycle else "",
                            "loop": _label(ids, loop) if loop else ""}
    on_cycle = [ids[i] for i in cycle]
    for kind in (_ctx_kind, _frame_kind, _module_kind):
        found = kind(objs, on_cycle)
        if found:
            info.update(found)
            return info
    kinds = sorted({type(o).__qualname__ for o in objs if not _of(o, (dict, tuple,
                                                                              list, _Tensor))})
    info.update(kind="other", what=", ".join(kinds[:4]))
    return info


def _cycle_through(edges: dict[int, list[int]], start: int) -> list[int]:
    """The shortest path start -> ... -> start, or []."""
    prev: dict[int, int] = {}
    todo = deque([start])
    while todo:
        i = todo.popleft()
        for j in edges[i]:
            if j == start:
                path = [i]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
            if j not in prev:
                prev[j] = i
                todo.append(j)
    return []


def _from_named(ids: dict[int, Any], path: list[int]) -> list[int]:
    """The cycle at the head of `path` turned to begin at an object with a name of its own
    (not a dict, list, tuple or cell): the last such before the node where the path below
    the cycle leaves it, walked again down to that node."""
    if not path or not _of(ids[path[0]], _CONTAINERS):
        return path
    end = path.index(path[0], 1)
    loop, tail = path[:end], path[end + 1:]
    k = next((n for n in range(len(loop) - 1, -1, -1)
              if not _of(ids[loop[n]], _CONTAINERS)), 0)
    if k == 0:
        return path
    return loop[k:] + loop[:k] + [loop[k]] + (loop[k + 1:] + [loop[0]] + tail if tail else [])


def _cycle_above(edges: dict[int, list[int]], target: int) -> list[int]:
    """A cycle nearest above `target` (which is on none) followed by the path down to it."""
    parents: dict[int, list[int]] = {}
    for i, js in edges.items():
        for j in js:
            parents.setdefault(j, []).append(i)
    down: dict[int, int] = {target: target}   # node -> the next node towards target
    todo = deque([target])
    while todo:
        i = todo.popleft()
        for p in parents.get(i, ()):
            if p in down:
                continue
            down[p] = i
            loop = _cycle_through(edges, p)
            if loop:
                path, n = [], down[p]
                while n != target:
                    path.append(n)
                    n = down[n]
                return loop + path + [target]
            todo.append(p)
    return []


def _label(ids: dict[int, Any], path: list[int]) -> str:
    """`Tensor(64x256 float32) → .grad_fn ScaleBackward → .out → Tensor(...)`: an object's
    `__dict__` is folded into the attribute it holds."""
    # a container is named by the hop into it; the first object has none
    parts = [_name(ids[path[0]]) or type(ids[path[0]]).__name__]
    k = 0
    while k < len(path) - 1:
        a, b = ids[path[k]], ids[path[k + 1]]
        if _of(b, dict) and k + 2 < len(path) and getattr(a, "__dict__", None) is b:
            key = _key_of(b, ids[path[k + 2]])
            parts.append(f".{key} {_name(ids[path[k + 2]])}".rstrip())
            k += 2
            continue
        parts.append(f"{_hop(a, b)} {_name(b)}".strip())
        k += 1
    return " → ".join(parts)


def _hop(a, b) -> str:
    if _of(a, dict):
        key = _key_of(a, b)
        if key is not None:
            return f"[{_key_text(key)}]"
        # held as a key: torchsde's BrownianInterval caches increments in a dict keyed by
        # the interval objects themselves
        return "(a key)" if any(k is b for k in a) else ""
    if _of(a, (list, tuple)):
        k = next((n for n, x in enumerate(a) if x is b), None)
        return f"[{k}]" if k is not None else ""
    if _of(a, _Tensor) and b is a.grad_fn:
        return ".grad_fn"
    if _of(a, types.FrameType):
        return f"[local {_key_of(a.f_locals, b)!r}]" if _key_of(a.f_locals, b) else ""
    if _of(a, types.TracebackType) and b is a.tb_frame:
        return ".tb_frame"
    if _of(a, BaseException) and b is a.__traceback__:
        return ".__traceback__"
    if _of(a, types.FunctionType) and b is a.__closure__:
        return ".__closure__"
    if _of(a, types.FunctionType) and b is a.__globals__:   # unlabelled before: "function
        return ".__globals__"                                # build →  → ['opt']"
    # an instance whose attributes the collector visits without their dict (Python 3.11
    # keeps them inline): torch's GradScaler caches its scale in a `_MultiDeviceReplicator`'s
    # `_per_device_tensors`, and the hop read "_MultiDeviceReplicator →  → [device...]"
    d = getattr(a, "__dict__", None)
    if type(d) is dict and (key := _key_of(d, b)) is not None:
        return f".{key}"
    return _slot_of(a, b)


def _key_text(key) -> str:
    """A dict key as the label of a hop: its repr, but an object's default repr (`<... at
    0x7f...>`, a different address each run) by its class."""
    text = repr(key)
    return type(key).__qualname__ if " at 0x" in text else text


def _slot_of(a, b) -> str:
    """`.name` of the `__slots__` attribute of `a` that holds `b` (an object with slots
    has no `__dict__` to fold: torchsde's intervals), else ''."""
    for cls in type(a).__mro__:
        slots = getattr(cls, "__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            try:
                if getattr(a, name) is b:
                    return f".{name}"
            except (AttributeError, TypeError):
                continue
    return ""


def _key_of(d: dict, v) -> Any:
    return next((k for k, x in d.items() if x is v), None)


def _name(o) -> str:
    if _of(o, _Tensor):
        shape = "x".join(str(s) for s in o.shape) or "scalar"
        return f"Tensor({shape} {str(o.dtype).replace('torch.', '')})"
    if _of(o, types.FrameType):
        return f"frame of {o.f_code.co_name}()"
    if _of(o, types.FunctionType):
        return f"function {o.__qualname__}"
    if _of(o, (dict, list, tuple, types.CellType)):
        return "" if _of(o, dict) else type(o).__name__
    return type(o).__qualname__


def _user_line(fn) -> tuple[str, int]:
    try:
        file = inspect.getsourcefile(fn) or ""
        return file, int(inspect.getsourcelines(fn)[1])
    except (OSError, TypeError):
        return "", 0


def _assigned(fn, attr: str, local: bool = False) -> tuple[str, int]:
    """The line of `fn` that sets `.attr` (`ctx.out = out`), or the variable `attr` when
    `local`, else the line `fn` begins."""
    file, first = _user_line(fn)
    try:
        lines = inspect.getsourcelines(fn)[0]
    except (OSError, TypeError):
        return file, first
    pattern = (r"^\s*" if local else r"\.") + re.escape(attr) + r"\s*=[^=]"
    for k, text in enumerate(lines):
        if re.search(pattern, text):
            return file, first + k
    return file, first


def _ctx_kind(objs: list, on_cycle: list) -> dict[str, Any] | None:
    """A custom autograd.Function's ctx holding a tensor as an attribute."""
    from torch.autograd.function import BackwardCFunction

    for o in objs:
        if not _of(o, BackwardCFunction):
            continue
        attrs = sorted(k for k, v in vars(o).items() if _of(v, _Tensor)
                       and any(v is x for x in objs))
        if not attrs:
            continue
        fn = getattr(o, "_forward_cls", type(o))
        file, line = _assigned(getattr(fn, "forward", fn), attrs[0])
        return {"kind": "ctx", "what": fn.__name__, "attrs": attrs, "file": file, "line": line}
    return None


def _frame_kind(objs: list, on_cycle: list) -> dict[str, Any] | None:
    """Frames kept in memory (by a traceback, an exception kept past its `except`)."""
    frames = [o for o in objs if _of(o, types.FrameType)]
    if not frames:
        return None
    user = [f for f in frames if is_user_file(f.f_code.co_filename)] or frames
    f = user[0]
    exc = next((o for o in objs if _of(o, BaseException)), None)
    info = {"kind": "frame", "what": f"{f.f_code.co_name}()",
            "exception": type(exc).__name__ if exc is not None else ""}
    if is_user_file(f.f_code.co_filename):   # the line that keeps the exception, if one
        var = _key_of(f.f_locals, exc) if exc is not None else None
        info["file"], info["line"] = (_assigned(f.f_code, var, local=True) if var
                                      else (f.f_code.co_filename, f.f_lineno))
    return info


def _module_kind(objs: list, on_cycle: list) -> dict[str, Any] | None:
    """Modules dropped while on a cycle (a model copy, a bound-method hook of its own),
    named by the first module on the cycle."""
    mods = [o for o in objs if _of(o, nn.Module)]
    if not mods:
        return None
    named = next((o for o in on_cycle if _of(o, nn.Module)), mods[0])
    return {"kind": "module", "what": type(named).__name__}
