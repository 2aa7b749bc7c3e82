"""Generator states a script keeps: bytes the dispatcher never sees.

# Note [Generator states the script keeps]
`torch.get_rng_state()` returns the CPU generator's state as a new 5,056 B tensor (the
mt19937 state), made in C++ by `Generator.get_state()`: no aten op, so the dispatch mode
never sees it made; and a script that only keeps it, to hand it back to
`torch.set_rng_state` later (also no op), never passes it to an op, so the collector never
meets it as a storage made outside dispatch either (Note [Storages made outside the
dispatcher] in collector.py needs a use). The allocator counts it. torch's own checkpoint
keeps one per checkpointed call and forks one per re-run; those are found on the Python
stack (Note [The script's own checkpoint] in script_checkpoint.py), so the calls from
torch/utils/checkpoint.py are handed to the collector apart (Note [A checkpointed function
that calls no module] in collector.py: a function that calls no module is never met on
that path). Anything else that saves the generator to replay
it is counted here: sentence-transformers' GradCache losses (`CachedMultipleNegatives
RankingLoss`) keep one `RandContext` (a `torch.get_rng_state()`) per embedded
mini-batch, from the no-grad embedding pass until the loss's backward hook has re-run
every mini-batch, and each re-run forks the generator (`torch.random.fork_rng`, one more
state, live while the mini-batch re-runs). tests/clients/train_sbert.py --loss
cached_mnrl (2 columns x 2 mini-batches): the ledger read 20,224 B (4 x 5,056) under the
allocator at its peak, in the last mini-batch's backward.

`torch.get_rng_state` (and `torch.random.get_rng_state`, the same function; `fork_rng`
calls it as `torch.get_rng_state()`) is wrapped while tracing: each state it returns in
the traced thread becomes a storage, op `torch.get_rng_state`, freed when torch frees it.
(The op name is not `get_rng_state`, which replay reads as a script checkpoint's frame.)
A state taken straight from `torch.default_generator.get_state()` is not seen.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

import torch

OP = "torch.get_rng_state"
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
_RANDOM_FILE = os.path.join("torch", "random.py")


class RngStateWatch:
    """While entered, `on_state(tensor)` for each generator state `torch.get_rng_state()`
    returns, unless torch's checkpoint asked for it (directly, or through `fork_rng`); for
    those, `on_checkpoint_state(tensor, where)`, `where` the name of checkpoint's function
    that asked (Note [A checkpointed function that calls no module])."""

    def __init__(self, on_state: Callable[[torch.Tensor], None],
                 on_checkpoint_state: Callable[[torch.Tensor, str], None] | None = None
                 ) -> None:
        self._on_state = on_state
        self._on_checkpoint_state = on_checkpoint_state
        self._saved: list[tuple[object, str, object]] = []

    def __enter__(self) -> "RngStateWatch":
        original = torch.random.get_rng_state
        on_state, on_ckpt = self._on_state, self._on_checkpoint_state

        def get_rng_state() -> torch.Tensor:
            state = original()
            where = _checkpoint_caller(sys._getframe(1))
            if where is None:
                on_state(state)
            elif on_ckpt is not None:
                on_ckpt(state, where)
            return state

        get_rng_state.__doc__ = original.__doc__
        get_rng_state.__wrapped__ = original   # type: ignore[attr-defined]
        for owner in (torch, torch.random):
            if getattr(owner, "get_rng_state", None) is original:
                self._saved.append((owner, "get_rng_state", original))
                owner.get_rng_state = get_rng_state
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved = []


def _checkpoint_caller(frame) -> str | None:
    """The name of torch's checkpoint function that asked (directly, or through
    `fork_rng`): `forward` (the reentrant Function's first run), `backward` (its re-run's
    fork), `_checkpoint_without_reentrant_generator`, `recompute_fn`; None for any other
    caller."""
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back   # another watch's wrapper (measure's nesting guard, Note [A
    if frame is None:          # policy checkpoint around a checkpointed function])
        return None
    name = frame.f_code.co_filename
    if name.endswith(_RANDOM_FILE):   # fork_rng: its caller decides
        frame = frame.f_back
        name = frame.f_code.co_filename if frame is not None else ""
        if frame is not None and name.endswith("contextlib.py"):   # fork_rng is a
            frame = frame.f_back                                   # @contextmanager
            name = frame.f_code.co_filename if frame is not None else ""
    return frame.f_code.co_name if name.endswith(_CHECKPOINT_FILE) else None


# Note [Two passes, other random numbers?]
# The ledger pass and the allocator pass are two runs of the script (Note [Two passes, one
# run?] in call_count.py). A script that draws from a global generator it does not seed runs
# on other numbers in each: pytorch-metric-learning's MPerClassSampler shuffles with numpy's
# global generator, so `--loop trainer --mode triplet` mined other pairs from other batches
# in each pass, with the same module calls; `show` said only "explains all but 352 bytes".
# Each pass now takes a digest of each global generator (torch's CPU one, numpy's, Python's
# `random`) at its start and after the last measured step (the ledger pass: an `rng` record;
# the allocator pass: `rng` in its `measured` record); a generator whose end states differ
# between the passes and that each pass drew from (its end differs from its start) was not
# seeded the same way, and `show` names it. Python's `random` and numpy's start from the OS
# in every process: a generator never drawn from is not named. The digest of torch's state
# reads `default_generator.get_state()` with the dispatch modes off: taken as the ledger
# pass stops, under the collector, it was recorded as a 5,056 B storage of the last step,
# and SAC's `offload:critic.qf0` was predicted 1,132 B over measured.
def generator_digests() -> dict[str, str]:
    """A digest of the state of each global random generator a script may draw from."""
    import hashlib
    import random

    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():   # called as the ledger pass stops: no event, no storage
        state = torch.default_generator.get_state().numpy().tobytes()
    states = {"torch": hashlib.blake2b(state, digest_size=8).hexdigest(),
              "random": hashlib.blake2b(repr(random.getstate()).encode(),
                                        digest_size=8).hexdigest()}
    np = sys.modules.get("numpy")
    if np is not None:
        _, keys, pos, *_ = np.random.get_state()
        states["numpy"] = hashlib.blake2b(keys.tobytes() + str(pos).encode(),
                                          digest_size=8).hexdigest()
    return states

