"""Regions the script checkpoints itself: never wrap them in a second policy. No torch.

See Note [The script's own checkpoint] in memledger/trace/script_checkpoint.py: the trace
writes a `script_ckpt` record per checkpoint call of the script's own (transformers'
gradient_checkpointing_enable(), torch.utils.checkpoint in a forward): `mod`, the module it
checkpoints; `first`, the first module call that ran under it (`mod` itself when the
checkpoint wraps the module's call, its first child when it wraps only its forward, as
transformers does); `ev`. Two rules, each a refusal with the fix in one line, the same from
replay (before predicting anything) and from `measure` (while running):

1. Checkpoint or selective on such a region, one inside it or one around it nests one
   checkpoint in another. What that keeps is neither the replay's prediction nor the
   script's intent: selective over GPT-2's own checkpointed layers kept 192,088 B more than
   predicted.
2. Offload of a module whose call runs inside the script's checkpoint puts offload's
   saved-tensor hooks innermost: they take the saved tensors the checkpoint would have
   dropped (measured 270,720 B under the prediction on tests/clients/train_checkpointed.py).
   Offload of the region itself, when the checkpoint wraps only its forward, or of a module
   around it, re-runs nothing and is predicted exactly.

A checkpointed function under which no module runs has a `script_ckpt_fn` record (`mod`,
the module whose call runs it; `fn`; `at`, file:line) and rule 1 alone, for `mod` and the
modules around it (Note [A policy checkpoint around a checkpointed function] in
memledger/trace/script_checkpoint.py).
"""

from __future__ import annotations

import numpy as np

from memledger.errors import PolicyError

ScriptCheckpoint = tuple[str, str]   # (the module it checkpoints, the first call under it)


def script_checkpoints(records: list[dict]) -> tuple[ScriptCheckpoint, ...]:
    """Distinct (region, first call) pairs, in first-seen order."""
    return tuple(dict.fromkeys((str(r.get("mod", "")), str(r.get("first", r.get("mod", ""))))
                               for r in records))


def _inside(path: str, region: str) -> bool:
    return not region or path.startswith(region + ".")


def nests(path: str, region: str) -> bool:
    """Whether checkpointing `path` would nest with the script's checkpoint of `region`:
    the same module, one inside it, or one around it ("" is the whole model)."""
    return path == region or not path or _inside(path, region) or region.startswith(path + ".")


def runs_inside(path: str, region: str, first: str) -> bool:
    """Whether `path`'s own call runs under the script's checkpoint of `region`."""
    return path == first or (path != region and _inside(path, region))


# Note [A checkpoint met in a call, not under its path]
# Rules 1 and 2 compare module paths: a region is around the script's checkpoint where
# the checkpointed module's path is under the region's. A module a region calls need not
# be its child by name: tensorly-torch's `FactorizedLinear(n_layers=2)` holds one weight
# for two layers, and each layer (`get_linear(i)`, a `SubFactorizedLinear` placed in the
# model as `blocks.0`, `blocks.4`) calls the shared module, which `named_modules()` names
# once, `stack`; with `checkpointing=True` that module's forward checkpoints its
# contraction (`_inner_forward`, a function of no module). `selective:@SubFactorizedLinear`
# (tests/clients/train_tltorch.py --model mlp --shared --impl reconstructed
# --lib-checkpoint) was predicted at 2,482,416 B while measure, which meets the nesting in
# the running calls, refused it ("would checkpoint blocks.4, and stack's forward, which
# runs in it, checkpoints the function FactorizedLinear.forward.<locals>._inner_forward
# itself"). The trace records the event at which each checkpoint of the script's first
# ran (`ev` of `script_ckpt` and `script_ckpt_fn`); a selected call whose events
# [ev0, ev1) hold that event runs the checkpoint, whatever the paths: rule 1 refuses it as
# one around, as measure does. The path rules stay for what the events do not show (a
# call made without gradients: no record is written there).
def checkpoint_events(records: list[dict], distinct) -> tuple[tuple[int, int], ...]:
    """(event of the first run, index into `distinct(records)`) per record that has one."""
    keys = distinct(records)
    index = {k: i for i, k in enumerate(keys)}
    out = []
    for r in records:
        if "ev" in r:
            k = distinct([r])[0]
            out.append((int(r["ev"]), index[k]))
    return tuple(out)


def calls_running(ev0: np.ndarray, ev1: np.ndarray,
                  at: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """(call, checkpoint index) for each call whose events [ev0, ev1) hold a checkpoint's
    first run (Note [A checkpoint met in a call, not under its path])."""
    out = []
    for ev, k in at:
        for c in np.flatnonzero((ev0 <= ev) & (ev < ev1)).tolist():
            out.append((c, k))
    return out


def refuse_around_script_checkpoints(policy_text: str, mods: np.ndarray,
                                     recompute: np.ndarray, offload: np.ndarray,
                                     checkpoints: tuple[ScriptCheckpoint, ...],
                                     running: list[tuple[str, int]] = ()) -> None:
    """Raise PolicyError if a selected call (modules `mods`; `recompute` and `offload`
    masks over them) breaks rule 1 or 2 against the script's own checkpoints. `running`:
    (path of a recomputed call, index into `checkpoints`) for calls whose events hold
    that checkpoint's first run (Note [A checkpoint met in a call, not under its path])."""
    if not checkpoints:
        return
    for mask, broken, message in ((recompute, nests, nested_checkpoint_message),
                                  (offload, None, offload_inside_message)):
        for path in dict.fromkeys(mods[mask].tolist()):
            for region, first in checkpoints:
                if (broken(path, region) if broken else runs_inside(path, region, first)):
                    raise PolicyError(message(policy_text, path, region,
                                              inside=runs_inside(path, region, first)))
    for path, k in running:   # a call around it by its events, not by the paths
        region, first = checkpoints[k]
        if not nests(path, region) and path != first:
            raise PolicyError(nested_checkpoint_message(policy_text, path, region,
                                                        inside=False))


def script_function_checkpoints(records: list[dict]) -> tuple[tuple[str, str, str, str], ...]:
    """Distinct (module whose call runs it, function, file:line, library or '') of the
    script's checkpoints of a function that calls no module (`script_ckpt_fn` records), in
    first-seen order: Note [A policy checkpoint around a checkpointed function] in
    trace/script_checkpoint.py."""
    return tuple(dict.fromkeys((str(r.get("mod", "")), str(r.get("fn", "")),
                                str(r.get("at", "")), str(r.get("lib", "")))
                               for r in records))


def refuse_around_function_checkpoints(policy_text: str, recomputed: np.ndarray,
                                       checkpoints: tuple[tuple[str, str, str, str], ...],
                                       running: list[tuple[str, int]] = ()) -> None:
    """Rule 1 for a checkpointed function of no module: a checkpointed or selective module
    whose call runs it (the module, or one around it) nests the two checkpoints. One inside
    the module runs outside the function: not refused. Nothing runs inside it to offload.
    `running`: (path of a recomputed call, index into `checkpoints`) for calls whose
    events hold its first run (Note [A checkpoint met in a call, not under its path])."""
    for path in dict.fromkeys(recomputed.tolist()):
        for region, fn, at, lib in checkpoints:
            if path == region or not path or region.startswith(path + "."):
                raise PolicyError(nested_function_checkpoint_message(policy_text, path,
                                                                     region, fn, at, lib))
    for path, k in running:   # a call around it by its events, not by the paths
        region, fn, at, lib = checkpoints[k]
        raise PolicyError(nested_function_checkpoint_message(policy_text, path, region, fn,
                                                             at, lib))


def nested_function_checkpoint_message(policy_text: str, path: str, region: str, fn: str,
                                       at: str, lib: str = "") -> str:
    """One line: which module, the script's checkpoint of a function in whose call, where,
    and the fix (offloading the module is predicted as measured). `lib`: the installed
    package whose code calls checkpoint (Note [A checkpoint a library makes] in
    trace/script_checkpoint.py), whose own option is the switch."""
    whose = "whose forward" if path == region else \
        f"and {region or 'the model'}'s forward, which runs in it,"
    fix = f"that checkpoint is {lib}'s: turn it off by {lib}'s own option to compare " \
        "policies" if lib else _FIX
    return (f"{policy_text} would checkpoint {path or 'the model'}, {whose} checkpoints the "
            f"function {fn} itself (torch.utils.checkpoint at {at}): one checkpoint would "
            f"run inside the other; {fix}, or offload that module instead")


_WHOSE = "(torch.utils.checkpoint, e.g. transformers' gradient_checkpointing_enable())"
_FIX = "turn the script's checkpointing off to compare policies"


# Note [An alternative that is refused too]
# The nesting refusal ended "..., or offload that module instead" wherever it met the
# script's checkpoint. Where the script checkpoints the module's call itself
# (`checkpoint(block, x)` around egnn-pytorch's layers, tests/clients/train_egnn.py
# --ckpt; tests/clients/train_checkpointed.py), the module's own call runs inside that
# checkpoint, and offloading it is refused by rule 2: a user who did as told met a second
# refusal. The advice now follows rule 2: where the module's call runs inside the script's
# checkpoint (predict: `runs_inside`; measure: met as the region is entered), offload a
# module around it, as rule 2's own line says; else (the script checkpoints only the
# module's forward, as transformers does, or a module inside it) that module, as before.
def nested_checkpoint_message(policy_text: str, path: str, region: str,
                              inside: bool = False) -> str:
    """One line: which module, whose checkpoint, and the fix. `inside`: the module's own
    call runs inside the script's checkpoint (Note [An alternative that is refused
    too])."""
    where = "which the script already checkpoints" if path == region else \
        f"and the script already checkpoints {region or 'the model'}"
    alt = "offload a module around it" if inside else "offload that module instead"
    return (f"{policy_text} would checkpoint {path or 'the model'}, {where} itself {_WHOSE}: "
            f"one checkpoint would run inside the other; {_FIX}, or {alt}")


def offload_inside_message(policy_text: str, path: str, region: str,
                           inside: bool = True) -> str:
    """One line: which module, whose checkpoint it runs inside, and the fix."""
    return (f"{policy_text} would offload {path}, which runs inside the script's own "
            f"checkpoint of {region or 'the model'} {_WHOSE}: offload would take the saved "
            f"tensors that checkpoint drops; {_FIX}, or offload a module around it")
