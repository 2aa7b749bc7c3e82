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
