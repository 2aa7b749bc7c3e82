"""The random state each training step draws from (the doctor's check `rng_reset`).

# Note [The same randomness every step]
`torch.manual_seed(0)` inside the training loop (or `torch.random.set_rng_state(saved)`,
`torch.cuda.manual_seed`, a `torch.Generator().manual_seed(s)` made anew each step and
handed to `randn`) makes every step draw the same dropout masks, the same noise
(diffusion's timesteps and noise, a VAE's reparameterisation, augmentation), the same
random batch indices: the model trains on one draw. The script's source is not read; what
it ran is:

- the random ops, seen by the probe's torch-function mode (`torch.randn`, `rand`,
  `randint`, `randperm`, `multinomial`, `bernoulli`, `normal`, the `*_like`s, the
  in-place `Tensor.normal_` / `uniform_` / `bernoulli_` / `random_` / ..., functional
  dropout with `training=True` and `p > 0` (nn.Dropout calls it), `gumbel_softmax`,
  `rrelu` in training, `scaled_dot_product_attention` with `dropout_p > 0`): each names
  the generator it draws from: the `generator=` it was handed, else the default one of
  its device (CPU, or the CUDA device's);
- the state of that generator when the step's first draw from it is made (`a`), and at
  the step's end (`b`, at the training-step boundary where retention and garbage are
  read): a 5 KB copy of the CPU state (16 bytes for CUDA's), once each per step.

Step k repeats its randomness when `b(k) == b(k-1)` although its draws moved the state
(the state after one of its draws differs from the state before it: read around the
step's first draws, at most 4, until one moved it): the step ended exactly where the
previous one did, so its draws were the previous step's again; something set the state
back in between. Not `a(k) != b(k)`: with the seed in the middle of a step (`--steps-by
forward` ends a step at the forward, after the seed and the noise) the step's first draw
finds the state its end finds. A `rng`
record per step and generator carries both answers, the ops drawn (counts), whether any
ran under gradients, and the line of the first draw; the check (memledger/doctor/rng.py)
reports steps that repeat, an error when the draws ran under gradients (they feed the
trained forward or the loss).

The line: no torch hook or mode sees a seed call (it runs no op), so while the probe runs,
`torch.manual_seed`, `torch.set_rng_state` and their CUDA forms are wrapped, the one place
the doctor replaces a torch function (the torch attributes, restored after the run; a C
method such as `torch.default_generator.manual_seed` or `Generator.set_state` cannot be,
and then the first draw's line is given); a call from torch's own code is not the script's, and each
call from the script (or a library it calls: Lightning's `seed_everything`) is noted with
its user line.

Left alone, and why no finding:
- a seed set once before the loop; a step-dependent seed (`manual_seed(base + step)`): the
  boundaries differ;
- a script that draws nothing random (dropout with p=0 draws nothing): no draw, or the
  state never moved;
- `torch.random.fork_rng` (an evaluation that seeds for reproducible samples, then gets the
  state back; torch's checkpoint forks around its re-run): it is wrapped too, and draws
  and seeds inside it are not counted; its restore sets the state back to where it was,
  so the boundaries are unaffected; draws while a backward runs (a checkpoint's re-run, a
  reversible layer's replay) are not counted either;
- the same by hand: `saved = torch.get_rng_state(); torch.manual_seed(0); ...;
  torch.set_rng_state(saved)`: a `set_rng_state` to the state some seed call of the step
  found is a restore, and the draws since that seed call are taken back; so is one to the
  state the step's first draw found (saved, drawn, restored, no seed between);
- draws only under `no_grad` (a validation that seeds each time, training drawing
  nothing): no finding, they feed no training;
- DataLoader workers seed in their own processes (not watched); Lightning's
  `seed_everything` and transformers' `set_seed` once, before the loop: seed once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from memledger.trace.where import user_line

_TORCH_DIR = os.path.dirname(os.path.realpath(torch.__file__)) + os.sep


def _random_ops() -> dict[Any, str]:
    ops: dict[Any, str] = {}
    for n in ("rand", "randn", "randint", "randperm", "rand_like", "randn_like",
              "randint_like", "normal", "bernoulli", "multinomial", "poisson", "rrelu"):
        f = getattr(torch, n, None)
        if f is not None:
            ops[f] = f"torch.{n}"
    for n in ("normal_", "uniform_", "bernoulli_", "bernoulli", "random_", "exponential_",
              "geometric_", "cauchy_", "log_normal_", "multinomial", "rrelu_"):
        f = getattr(torch._C.TensorBase, n, None)
        if f is not None:
            ops[f] = f"Tensor.{n}"
    for f in (F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout,
              F.feature_alpha_dropout, F.gumbel_softmax, F.rrelu,
              F.scaled_dot_product_attention):
        ops[f] = f"F.{f.__name__}"
    for n in ("dropout", "alpha_dropout", "feature_dropout", "feature_alpha_dropout"):
        f = getattr(torch, n, None)
        if f is not None:
            ops[f] = f"torch.{n}"
    return ops


RANDOM_OPS = _random_ops()
_TRIES = 4   # draws a step looks at for one that moves its generator's state
# (position, keyword, default) of the argument that says whether the op draws at all
_DRAWS_IF = {"F.dropout": ((2, "training", True), (1, "p", 0.5)),
             "F.dropout1d": ((2, "training", True), (1, "p", 0.5)),
             "F.dropout2d": ((2, "training", True), (1, "p", 0.5)),
             "F.dropout3d": ((2, "training", True), (1, "p", 0.5)),
             "F.alpha_dropout": ((2, "training", False), (1, "p", 0.5)),
             "F.feature_alpha_dropout": ((2, "training", False), (1, "p", 0.5)),
             "torch.dropout": ((2, "train", True), (1, "p", 0.5)),
             "torch.alpha_dropout": ((2, "train", True), (1, "p", 0.5)),
             "torch.feature_dropout": ((2, "train", True), (1, "p", 0.5)),
             "torch.feature_alpha_dropout": ((2, "train", True), (1, "p", 0.5)),
             "F.rrelu": ((3, "training", False),), "torch.rrelu": ((3, "training", False),),
             "F.scaled_dot_product_attention": ((4, "dropout_p", 0.0),)}


def _arg(args: tuple, kwargs: dict, pos: int, key: str, default: Any) -> Any:
    if key in kwargs:
        return kwargs[key]
    return args[pos] if len(args) > pos else default


def _draws(name: str, args: tuple, kwargs: dict) -> bool:
    for pos, key, default in _DRAWS_IF.get(name, ()):
        v = _arg(args, kwargs, pos, key, default)
        try:
            if not v:   # training=False, p=0
                return False
        except (RuntimeError, TypeError, ValueError):   # a tensor p: draws
            pass
    return True


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    from torch.utils._python_dispatch import _disable_current_modes
    # and outside torch.func's transforms, whose states are wrapped, without storage to read
    with torch._C.DisableTorchFunction(), _disable_current_modes(), torch.no_grad(), \
            torch._C._DisableFuncTorch():
        yield


# Note [A generator per sample]
# A dataset that makes each sample from a generator seeded by its index
# (`torch.Generator().manual_seed(i)` in `__getitem__`: tests/clients/train_fabric.py's
# RandomTokens) hands a new generator, seeded alike, to every draw: over a dataset of one
# batch every step drew the same numbers, and the doctor read a reset each step. That is
# data fixed by index, not training randomness set back: a step whose draws under one key
# came from more than one generator object is not judged. One generator made each step and
# drawn from (the planted `--how generator`) still is.

# Note [States kept as bytes]: a generator's state is a 5,056 B CPU tensor; kept across a
# step as one, the probe's copies were storages of the run (`doctor -o` read 10,112 B over
# the trace's peak on tests/doctor/garbage.py): the probe keeps the bytes, the tensor goes
def _bytes(t: torch.Tensor | None) -> bytes | None:
    try:
        return None if t is None else t.detach().cpu().contiguous().numpy().tobytes()
    except RuntimeError:   # a tensor a torch.func transform wrapped: unknown
        return None


def _same(a: bytes | None, b: bytes | None) -> bool | None:
    if a is None or b is None:
        return None
    return a == b


class RngWatch:
    """Kept by the doctor's probe: `drew()` at each random op it sees, `boundary()` at each
    training step's end (Note [The same randomness every step])."""

    def __init__(self) -> None:
        self._ends: dict[str, bytes] = {}   # key -> state at the last boundary
        self._cuda: set[str] = set()               # CUDA keys seen drawing (read each end)
        # this step: key -> {"a", "seq", "ops", "grad", "file", "line", "gen"}
        self._step: dict[str, dict[str, Any]] = {}
        self._resets: list[dict[str, Any]] = []    # this step's seed calls from the script
        self._seq = 0
        self._forks = 0
        self._patched: list[tuple[Any, str, Any]] = []
        self._in_backward = getattr(torch._C, "_current_graph_task_id", None)
        # (step entry, key, generator, state before) of a draw whose effect is awaited
        self.waiting: tuple | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        # no state before the first step: the script's start is no step's end (a run
        # before it in the same process may have left the state its first step ends in)
        seeds = {"manual_seed": "torch.manual_seed", "set_rng_state": "torch.set_rng_state"}
        for mod in (torch, torch.random):
            for attr, name in seeds.items():
                self._patch(mod, attr, name)
        self._patch(torch.random, "fork_rng", "fork_rng")
        cuda = getattr(torch, "cuda", None)
        for mod in (cuda, getattr(cuda, "random", None)):
            if mod is None:
                continue
            for attr in ("manual_seed", "manual_seed_all", "set_rng_state",
                         "set_rng_state_all"):
                self._patch(mod, attr, f"torch.cuda.{attr}")

    def stop(self) -> None:
        for mod, attr, orig in reversed(self._patched):
            setattr(mod, attr, orig)
        self._patched = []

    def _patch(self, mod: Any, attr: str, name: str) -> None:
        orig = getattr(mod, attr, None)
        if orig is None or getattr(orig, "_memledger_rng", False):
            return
        if name == "fork_rng":
            wrapped = self._fork_wrapper(orig)
        else:
            wrapped = self._seed_wrapper(orig, name)
        wrapped = functools.wraps(orig)(wrapped)   # its name, doc and signature
        wrapped._memledger_rng = True   # type: ignore[attr-defined]
        self._patched.append((mod, attr, orig))
        setattr(mod, attr, wrapped)

    def _fork_wrapper(self, orig: Any) -> Any:
        watch = self

        @contextlib.contextmanager
        def fork_rng(*args: Any, **kwargs: Any) -> Iterator[None]:
            enabled = _arg(args, kwargs, 1, "enabled", True)
            with orig(*args, **kwargs):
                watch._forks += bool(enabled)
                try:
                    yield
                finally:
                    watch._forks -= bool(enabled)
        return fork_rng

    def _seed_wrapper(self, orig: Any, name: str) -> Any:
        watch = self

        def seed(*args: Any, **kwargs: Any) -> Any:
            note = None
            try:
                note = watch._seed_call(name, args, kwargs)
            except Exception:   # never fail the script's own seed call
                note = None
            out = orig(*args, **kwargs)
            if note is not None:
                watch._resets.append(note)
            return out
        return seed

    def _seed_call(self, name: str, args: tuple, kwargs: dict) -> dict[str, Any] | None:
        """A seed call from the script (not torch's own code, not inside fork_rng): its
        line, and for the CPU the state it found (a later set_rng_state back to it is a
        restore)."""
        if self._forks:
            return None
        caller = sys._getframe(2).f_code.co_filename
        if os.path.realpath(caller).startswith(_TORCH_DIR):
            return None
        file, line = user_line(3)
        self._seq += 1
        note: dict[str, Any] = {"call": name, "file": file, "line": line, "seq": self._seq}
        if name in ("torch.set_rng_state", "torch.manual_seed"):
            with _quiet():
                before = _bytes(torch.get_rng_state())
            new = _arg(args, kwargs, 0, "new_state", None)
            if name == "torch.set_rng_state" and isinstance(new, torch.Tensor):
                with _quiet():
                    new = _bytes(new)
                    for r in reversed(self._resets):
                        if _same(r.get("before"), new):   # a restore: Note [The same
                            self._take_back(r["seq"])      # randomness every step]
                            note["restores"] = r["seq"]
                            break
                    else:   # back to where the step's first draw found it: saved, drawn,
                        d = self._step.get("cpu")           # restored, no seed between
                        if d is not None and _same(d["a"], new):
                            self._take_back(d["seq"] - 1)
                            note["restores"] = -1
            note["before"] = before
        return note

    def _take_back(self, seq: int) -> None:
        """The CPU draws since seed call `seq`, which a restore has undone."""
        for key in [k for k, d in self._step.items() if not d.get("gen") and k == "cpu"]:
            if self._step[key]["seq"] > seq:
                del self._step[key]

    # ---- draws ----------------------------------------------------------------------------
    def drew(self, name: str, args: tuple, kwargs: dict) -> None:
        """A random op is about to run; `after()` once it has, while `waiting`."""
        if self._forks or not _draws(name, args, kwargs):
            return
        if self._in_backward is not None and self._in_backward() != -1:
            return   # a checkpoint's re-run, a reversible layer's replay
        gen = kwargs.get("generator")
        if gen is not None:
            key = f"generator:{name}"
        else:
            key = self._device_key(args, kwargs)
            if key is None:
                return
        d = self._step.get(key)
        if d is None:
            self._seq += 1
            with _quiet():
                a = self._state(key, gen)
            if a is None:
                return
            file, line = user_line(3)
            d = self._step[key] = {"a": a, "seq": self._seq, "ops": {}, "grad": False,
                                   "file": file, "line": line, "gen": gen, "moved": False,
                                   "tries": 0}
        if gen is not None and gen is not d["gen"]:   # Note [A generator per sample]
            d["many"] = True
        d["ops"][name] = d["ops"].get(name, 0) + 1
        if not d["moved"] and d["tries"] < _TRIES:
            # did this draw move the state? (a reset between draws makes the first draw's
            # state no measure of it: `--steps-by forward` puts the seed mid-step)
            d["tries"] += 1
            with _quiet():
                before = d["a"] if d["tries"] == 1 else self._state(key, gen)
            if before is not None:
                self.waiting = (d, key, gen, before)
        if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
            d["grad"] = True

    def after(self) -> None:
        """The random op `drew()` saw has run: did it move its generator's state?"""
        d, key, gen, before = self.waiting
        self.waiting = None
        with _quiet():
            d["moved"] = d["moved"] or _same(before, self._state(key, gen)) is False

    @staticmethod
    def _device_key(args: tuple, kwargs: dict) -> str | None:
        dev = kwargs.get("device")
        if dev is None:
            t = next((a for a in args if isinstance(a, torch.Tensor)), None)
            if t is None:
                t = next((a for a in kwargs.values() if isinstance(a, torch.Tensor)), None)
            dev = t.device if t is not None else torch.get_default_device()
        if not isinstance(dev, torch.device):
            try:
                dev = torch.device(dev)
            except (RuntimeError, TypeError):
                return None
        if dev.type == "cpu":
            return "cpu"
        if dev.type == "cuda":
            return f"cuda:{dev.index if dev.index is not None else torch.cuda.current_device()}"
        return None   # other devices' generators are not read

    def _state(self, key: str, gen: Any = None) -> bytes | None:
        try:
            if gen is not None:
                return _bytes(gen.get_state())
            if key == "cpu":
                return _bytes(torch.get_rng_state())
            if key.startswith("cuda:"):
                self._cuda.add(key)
                return _bytes(torch.cuda.get_rng_state(int(key[5:])))
        except (RuntimeError, TypeError, ValueError, AttributeError):
            return None
        return None

    # ---- step boundaries ------------------------------------------------------------------
    def boundary(self, step: int) -> list[dict[str, Any]]:
        out = []
        with _quiet():
            ends = {"cpu": _bytes(torch.get_rng_state())}
            for key in self._cuda:
                ends[key] = self._state(key)
            for key, d in self._step.items():
                if d.get("many"):   # Note [A generator per sample]: no step's state
                    continue
                b = self._state(key, d["gen"]) if d["gen"] is not None else ends.get(key)
                rec = {"k": "rng", "step": step, "key": key, "ops": d["ops"],
                       "grad": d["grad"], "file": d["file"], "line": d["line"],
                       "moved": d["moved"],
                       "same_end": bool(_same(self._ends.get(key), b)),
                       "resets": [{k: v for k, v in r.items() if k != "before"}
                                  for r in self._resets if "restores" not in r
                                  and not any(x.get("restores") == r["seq"]
                                              for x in self._resets)]}
                out.append(rec)
                if d["gen"] is not None:
                    ends[key] = b
            # generators not drawn from this step: their last end is unknown for the next
            self._ends = {k: v for k, v in ends.items() if v is not None}
        self._step, self._resets, self.waiting = {}, [], None
        return out
