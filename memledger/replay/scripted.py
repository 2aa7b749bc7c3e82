"""Regions that hold a TorchScript module: never checkpointed. No torch here.

# Note [TorchScript inside a region]
TorchScript's profiling executor runs another graph once a module has been called a few
times, so a checkpoint's re-run in backward does not make what the first run saved (torch:
"Recomputed values for the following tensors have different metadata"), and a scripted
module checkpointed itself fails in the interpreter. Both were the script's crash under
`compare`, its traceback and torch's advice on the terminal, and the second ended the whole
comparison. So checkpoint and selective refuse a region that is or holds a ScriptModule:
`measure` (memledger/measure/apply.py) by its type as it applies the policy, `predict` by
the class the ledger's module calls recorded (a scripted module's own call is hooked like
any other; what runs inside it is not). Offload re-runs nothing, and runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from memledger.errors import PolicyRefused

# type(m).__name__ of torch.jit.script(m) and torch.jit.trace(m)
SCRIPTED_CLASSES = frozenset({"RecursiveScriptModule", "ScriptModule", "TopLevelTracedModule",
                              "TracedModule"})


def scripted_region_message(policy: str, path: str, scripted: str) -> str:
    """One line: the region, the scripted module in it, why, and what to do."""
    where = "a TorchScript module" if scripted == path else f"which holds {scripted}, a " \
        "TorchScript module"
    return (f"{policy} would checkpoint {path}, {where} (torch.jit.script or trace): "
            f"TorchScript runs another graph by the time a checkpoint re-runs it in backward, "
            f"so the re-run cannot match; select modules without scripted parts, or script "
            f"them after choosing a policy")


def refuse_scripted_regions(policy: str, paths: Iterable[str],
                            modules: Iterable[tuple[str, str]]) -> None:
    """Raise PolicyRefused if a region to be re-run (`paths`) is or holds a module whose
    class (`modules`: (path, class name)) is TorchScript's."""
    scripted = [p for p, cls in modules if cls in SCRIPTED_CLASSES]
    for path in paths:
        for s in scripted:
            if s == path or not path or s.startswith(path + "."):
                raise PolicyRefused(scripted_region_message(policy, path, s))
