"""Libraries that ask "is this a FakeTensor?" get a real run's answer in a fake run.

# Note [Asked whether a tensor is fake] (Rule 7 of Note [Fake runs], trace/fake.py)
transformers' `is_tracing(t)` is true for a FakeTensor (`is_fake_tensor` in
`transformers.utils.import_utils`), and then its masks take the export-safe path: an
explicit causal mask (`arange`, `index`, `where`, `bitwise_and`) fed to attention, where the
real run asks `padding_mask.all()` and calls SDPA with `is_causal` and no mask. A fake run
then traced code the real run does not run. Measured (tests/clients, 2 steps, fp32, peaks
fake / real, before this): Qwen2 3,000,756 / 2,902,452 B (+98,304 B of activation); ALBERT
2,277,500 / 2,261,116 (+16,384: two 2x1x32x32 fp32 masks saved by `where`); GPT-2 with
`gradient_checkpointing_enable()` 2,516,796 / 2,514,748 (+2,048: the bool mask); Llama
with it 2,110,880 / 2,100,640 (+10,240).

While a fake run records, the function a library asks is replaced by one that answers as
in a real run (False), and put back after. The question the real run then asks of the
values (`padding_mask.all()`, `pad_token_id in input_ids[:, [-1, 0]]`) is answered by Rule
3: token ids and masks are small integers and bools computed for real (shadows), else a
stand-in record names the line. Every example above is then exact to the byte.

A library imported after the run starts is answered when it is imported: a finder at the
head of `sys.meta_path` that only wraps the named module's loader (importing transformers
up front would cost every fake run ~1 s). Its other tracing checks (`torch.jit`, dynamo,
stream capture) are not ours and stay as they are.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any, Callable

# module -> {function asked: the real run's answer}
QUESTIONS: dict[str, dict[str, Callable[..., Any]]] = {
    "transformers.utils.import_utils": {"is_fake_tensor": lambda x: False},
}


class RealAnswers(importlib.abc.MetaPathFinder):
    """Replaces QUESTIONS' functions while entered; a finder patches modules imported then."""

    def __init__(self) -> None:
        self._saved: list[tuple[ModuleType, str, Any]] = []
        self._finding = False

    def __enter__(self) -> "RealAnswers":
        for name in QUESTIONS:
            if name in sys.modules:
                self._answer(sys.modules[name])
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for module, attr, original in reversed(self._saved):
            setattr(module, attr, original)
        self._saved.clear()

    def _answer(self, module: ModuleType) -> None:
        for attr, answer in QUESTIONS.get(module.__name__, {}).items():
            if hasattr(module, attr) and getattr(module, attr) is not answer:
                self._saved.append((module, attr, getattr(module, attr)))
                setattr(module, attr, answer)

    # ---- importlib.abc.MetaPathFinder ---------------------------------------------------
    def find_spec(self, fullname, path, target=None):
        if fullname not in QUESTIONS or self._finding:
            return None
        self._finding = True   # the other finders find it; this one only wraps the loader
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _AnsweringLoader(spec.loader, self)
        return spec


class _AnsweringLoader(importlib.abc.Loader):
    def __init__(self, loader, answers: RealAnswers) -> None:
        self._loader, self._answers = loader, answers

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._answers._answer(module)

    def __getattr__(self, name: str) -> Any:   # get_source, is_package, ...: the real loader's
        return getattr(self._loader, name)


# ---- Note [Foreach as in the real run] ---------------------------------------------------
# torch picks a kernel path by asking the same question of types: `_default_to_fused_or_
# foreach` (torch.optim) and `_has_foreach_support` (clip_grad_norm_, clip_grad_value_)
# take the foreach path only when every tensor's type is in `_foreach_supported_types`
# (Tensor, Parameter, and DTensor, which torch's distributed package appends itself). A
# fake parameter's type is FakeTensor, so a fake run took the per-tensor paths where the
# real run takes foreach. On an H200 (torch 2.11, docs/gpu.md), `trace --fake --device
# cuda` of examples/train_mlp.py read 501,248 B of temporaries over the real CUDA run
# (sizes rounded to 512 B). The same two paths traced for real on the CPU: the loop peaks
# at 8,557,756 B, foreach at 8,056,036 (the loop's `exp_avg_sq.sqrt()` and its quotient,
# both the size of the largest weight, live at once; foreach's one `sqrt` list is smaller).
#
# While a fake run records, FakeTensor is registered in both lists as torch registers
# DTensor, and taken out after. That answers for the devices the fake tensors are on. Where
# CPU kernels stand in for a CUDA target (Rule 5) the optimizers see `cpu` and would still
# loop; a real CUDA run defaults to foreach, so a global optimizer step pre-hook sets
# `foreach=True` on each torch.optim group left at its default (foreach None, not fused or
# differentiable) and the post-hook puts None back. clip_grad's foreach covers cpu and cuda
# alike, so it needs no such answer.

def _foreach_type_lists() -> list[list]:
    import torch.optim.optimizer as optim_mod
    import torch.utils._foreach_utils as utils_mod

    return [optim_mod._foreach_supported_types, utils_mod._foreach_supported_types]


class ForeachAsReal:
    """Note [Foreach as in the real run]: `foreach_device` is the device type the real run
    puts the fake tensors on when CPU kernels stand in for it ("cuda"), else ""."""

    def __init__(self, fake_type: type, foreach_device: str = "") -> None:
        self._fake_type, self._device = fake_type, foreach_device
        self._added: list[list] = []
        self._hooks: list[Any] = []
        self._set: list[dict] = []

    def __enter__(self) -> "ForeachAsReal":
        for types in _foreach_type_lists():
            if self._fake_type not in types:
                types.append(self._fake_type)
                self._added.append(types)
        if self._device:
            from torch.optim.optimizer import (
                _get_foreach_kernels_supported_devices,
                register_optimizer_step_post_hook,
                register_optimizer_step_pre_hook,
            )
            if self._device in _get_foreach_kernels_supported_devices():
                self._hooks = [register_optimizer_step_pre_hook(self._before_step),
                               register_optimizer_step_post_hook(self._after_step)]
        return self

    def __exit__(self, *exc: object) -> None:
        for types in self._added:
            if self._fake_type in types:
                types.remove(self._fake_type)
        self._added.clear()
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self._after_step()

    def _before_step(self, opt, args, kwargs) -> None:
        if not type(opt).__module__.startswith("torch.optim"):
            return        # another library's optimizer chooses its own path
        for group in opt.param_groups:
            if ("foreach" in group and group["foreach"] is None and not group.get("fused")
                    and not group.get("differentiable")):
                group["foreach"] = True
                self._set.append(group)

    def _after_step(self, *args: object) -> None:
        for group in self._set:
            group["foreach"] = None
        self._set.clear()
