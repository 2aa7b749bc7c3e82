"""Parameters that no module holds, reached by a backward: the doctor's view of them.

# Note [A parameter no module holds]
# A script may learn a tensor of its own beside the model: siren-pytorch's README makes a
# latent code `latent = nn.Parameter(torch.zeros(latent_dim).normal_(0, 1e-2))` and hands
# it to the wrapper's forward (tests/clients/train_siren.py --latent 8). The probe learns
# a model's parameters from its modules and a loose one from the optimizer that holds it
# (`optimizer0.param14`); one that no optimizer holds it never met, and the doctor said
# nothing where the script built its optimizer from `wrapper.parameters()` alone: the
# latents got a gradient in every backward and never moved (2 x 8 float32, 64 B; the
# same mistake on a module's head is `no_optimizer`, 2 parameters, found). The walk of
# each backward's graph (`_walk_graph`) meets every leaf at its AccumulateGrad node; an
# `nn.Parameter` it does not know is remembered here, with its `_version` then. At the
# script's end one that is still alive, that no optimizer took since, and that nothing
# changed in place (a latent moved by hand, `p -= lr * p.grad` under no_grad, bumps its
# version) is written as a `loose` record; the check (doctor/params.py) counts it where
# a backward whose gradients a step used reached it, as for a module's parameter. A plain
# tensor with `requires_grad_()` (SirenWrapper's coordinate grid, an FGSM `delta`) is no
# parameter: the script asked for that gradient to read it, not to train it.
"""

from __future__ import annotations

import weakref
from typing import Any

from torch import nn


class LooseParams:
    """The `nn.Parameter`s a backward reached that the probe knew from no module or
    optimizer (Note [A parameter no module holds])."""

    def __init__(self) -> None:
        # id(param) -> (weak reference, its `_version` when first reached, its record)
        self._seen: dict[int, tuple[weakref.ref, int, dict[str, Any]]] = {}

    def reached(self, p: nn.Parameter, backward: int, file: str, line: int) -> None:
        entry = self._seen.get(id(p))
        if entry is None or entry[0]() is not p:   # ids are reused once a tensor dies
            rec = {"k": "loose", "shape": list(p.shape), "dtype": str(p.dtype).split(".")[-1],
                   "bytes": p.nbytes, "bw": [], "file": file, "line": line}
            entry = self._seen[id(p)] = (weakref.ref(p), p._version, rec)
        if backward not in entry[2]["bw"]:
            entry[2]["bw"].append(backward)

    def records(self, known: dict[int, Any]) -> list[dict[str, Any]]:
        """The remembered parameters still alive, unknown to the probe (`known`: its
        parameters by id, an optimizer's among them) and never changed in place."""
        out = []
        for pid, (ref, version, rec) in self._seen.items():
            p = ref()
            if p is not None and pid not in known and p._version == version:
                out.append(rec)
        return out
