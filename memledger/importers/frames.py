"""What a CUDA allocation's stack frames say: the phase it happened in and the user code.

# Note [Phases from allocator stack frames]
A snapshot knows addresses, sizes and stacks, not tensors' roles. We read, innermost frame
first, the Python frames recorded with each `alloc` (frame = {"filename", "line", "name"}):
  1. a frame in `torch/optim/` -> optimizer (`_init_group` there creates optimizer state);
     a frame named `zero_grad` -> zero_grad;
  2. a frame of the autograd entry points (`torch/autograd/`, `_engine_run_backward`, a C++
     frame naming `autograd::Engine`/`AccumulateGrad`) -> backward;
  3. `_apply` / `to` / `cuda` / `reset_parameters` in `torch/nn/` -> setup (model moved or
     built on the device: parameters and buffers);
  4. a frame named `forward`, or one in `torch/nn/modules/` -> forward;
  5. no frame at all: on CUDA the autograd engine runs backward on its own device thread,
     which has no Python stack, so a frameless allocation after forward/loss is backward;
     otherwise it keeps the phase of the event before it;
  6. frames that prove none of the above (user code calling torch outside any module):
     right after forward that is the loss (`F.cross_entropy(model(x), y)`), otherwise it is
     "other" (the next batch, logging) — never the optimizer's or backward's phase.
The "module" of an allocation is the innermost frame outside torch (the user's code), as
`file.py:line:function`; module paths (`blocks.0.attn`) are not in a snapshot.
"""

from __future__ import annotations

import re
from typing import Any

Frame = dict[str, Any]

# torch's own `_memory_viz._profile_to_snapshot` (a snapshot built from a torch.profiler run)
# writes frames as {"filename": "none", "line": 0, "name": "torch/nn/modules/linear.py(130):
# forward"}: the location is inside the name. `normalize` splits it back out.
_PACKED = re.compile(r"^(?P<file>.+\.py)\((?P<line>\d+)\): (?P<name>.*)$")


def normalize(f: Frame) -> Frame:
    name = str(f.get("name", ""))
    m = _PACKED.match(name) if f.get("filename") in (None, "", "none") else None
    if m is None:
        return f
    return {"filename": m["file"], "line": int(m["line"]), "name": m["name"]}


def _fname(f: Frame) -> str:
    return str(f.get("filename", "")).replace("\\", "/")


def frame_label(f: Frame) -> str:
    """`file.py:42:forward`, as torch's memory_viz prints a frame."""
    return f"{_fname(f).rsplit('/', 1)[-1]}:{f.get('line', 0)}:{f.get('name', '')}"


def _in_torch(f: Frame) -> bool:
    fn = _fname(f)
    return ("/torch/" in fn or fn.startswith("torch/") or "/site-packages/" in fn
            or not fn.endswith(".py"))


def phase_from_frames(frames: list[Frame]) -> str | None:
    """The phase the frames prove (rules 1-4 of the Note, in order), or None when they prove none."""
    names = [str(f.get("name", "")) for f in frames]
    files = [_fname(f) for f in frames]
    if any("torch/optim/" in fn for fn in files):
        return "optimizer"
    if any(n == "zero_grad" for n in names):
        return "zero_grad"
    if any("torch/autograd/" in fn or "_engine_run_backward" in n or "autograd::Engine" in n
           or "AccumulateGrad" in n for fn, n in zip(files, names)):
        return "backward"
    if any(n in ("_apply", "to", "cuda", "reset_parameters") and "torch/nn/" in fn
           for fn, n in zip(files, names)):
        return "setup"
    if any(n == "forward" or "torch/nn/modules/" in fn for fn, n in zip(files, names)):
        return "forward"
    return None


def makes_optimizer_state(frames: list[Frame]) -> bool:
    return any(f.get("name") == "_init_group" for f in frames)


def is_accumulate_grad(frames: list[Frame]) -> bool:
    return any("AccumulateGrad" in str(f.get("name", "")) for f in frames)


def user_frame(frames: list[Frame]) -> str:
    """The innermost frame outside torch, or '' when the stack is all torch (or empty)."""
    for f in frames:
        if not _in_torch(f):
            return frame_label(f)
    return ""


def op_label(frames: list[Frame]) -> str:
    """The innermost Python frame: what asked for the memory."""
    for f in frames:
        if _fname(f).endswith(".py"):
            return frame_label(f)
    return frame_label(frames[0]) if frames else ""
