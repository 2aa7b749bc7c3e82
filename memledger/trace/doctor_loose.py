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
# `nn.Parameter` it does not know is remembered here, with its `_version` then, until
# the probe meets it in a module or an optimizer (`held`: the optimizer that takes it at
# its first step). One never held, and never changed in place as far as the probe saw (at
# each backward that reached it, and at the script's end if it still lives: a latent
# moved by hand, `p -= lr * p.grad` under no_grad, bumps its version), is written as a
# `loose` record; the check (doctor/params.py) counts it where a backward whose
# gradients a step used reached it, as for a module's parameter, and where backward
# passes of two optimizer steps or more reached it: a tensor learned across steps. One
# made anew in every step (an adversarial `delta` some scripts wrap in `nn.Parameter`, its
# gradient read, never stepped) is reached in one step and is no finding; so a latent is
# found from `--steps 2` on. A plain tensor with `requires_grad_()` (SirenWrapper's
# coordinate grid, an FGSM `delta`) is no parameter: the script asked for that gradient
# to read it, not to train it. Known limitation: a parameter moved by hand after the last
# backward that reached it, and dead by the script's end, reads as never moved.
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
        self._gone: list[dict[str, Any]] = []   # records of the dead whose id came again

    def reached(self, p: nn.Parameter, backward: int, window: int, file: str,
                line: int) -> None:
        entry = self._seen.get(id(p))
        if entry is not None and entry[0]() is not p:   # ids are reused once a tensor dies
            self._gone.append(entry[2])
            entry = None
        if entry is None:
            rec = {"k": "loose", "shape": list(p.shape), "dtype": str(p.dtype).split(".")[-1],
                   "bytes": p.nbytes, "bw": [], "windows": [], "file": file, "line": line}
            entry = self._seen[id(p)] = (weakref.ref(p), p._version, rec)
        if p._version != entry[1]:
            entry[2]["moved"] = True
        if backward not in entry[2]["bw"]:
            entry[2]["bw"].append(backward)
        if window not in entry[2]["windows"]:
            entry[2]["windows"].append(window)

    def held(self, pid: int) -> None:
        """The probe met the parameter `pid` in a module or an optimizer: not loose."""
        self._seen.pop(pid, None)

    def records(self) -> list[dict[str, Any]]:
        """The parameters remembered that backward passes of two optimizer steps or more
        reached and that nothing changed in place, as far as the probe saw: at each
        backward that reached them, and at the script's end where they still live."""
        out = []
        for rec in self._gone:
            if not rec.get("moved") and len(rec["windows"]) > 1:
                out.append(rec)
        for ref, version, rec in self._seen.values():
            p = ref()
            if not rec.get("moved") and (p is None or p._version == version) \
                    and len(rec["windows"]) > 1:
                out.append(rec)
        return out
