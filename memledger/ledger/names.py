"""How reports name what has no module path.

A storage made outside every module's forward (the batch, the loss, code of the training
loop) has module path "" in the ledger. Reports call it "(script)": it was made by the
script's own code, not by a module (the optimizer's allocations are named "optimizer").

The model itself is module "" too (`named_modules()` names the root ""), so an op in the
model's own `forward` but in none of its submodules (GPT's `tok + pos`, a Hugging Face
model's loss) has path "" as well. Reports name it by the model's class instead,
"(GPT2LMHeadModel.forward)" (`model_forward`; `Ledger.module_labels` tells the two
apart by the model's forward scopes). Policies and replay keep the path "".
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

OUTSIDE_MODULES = "(script)"


def model_forward(cls: str) -> str:
    """The label of ops in the model's own forward: 'GPT' -> '(GPT.forward)'."""
    return f"({cls or 'model'}.forward)"


def module_label(path: str) -> str:
    """'' -> '(script)'; any other module path as it is."""
    return path or OUTSIDE_MODULES


def block_of(path: str, no_blocks: frozenset[str] = frozenset()) -> str:
    """The repeated block a module belongs to: the path up to its first numeric part,
    unless that numbered module is one of `no_blocks` (`numbered_layers`).

    'blocks.0.attn.c_attn' -> 'blocks.0'; 'encoder.layers.11.ff' -> 'encoder.layers.11';
    a path with no index rolls up to its top-level module ('lm_head.proj' -> 'lm_head');
    '' (the script) stays ''; a label such as '(GPT.forward)' stays whole.
    """
    if path.startswith("("):   # a label, not a path: '(GPT.forward)' stays whole
        return path
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        if part.isdigit() and ".".join(parts[: i + 1]) not in no_blocks:
            return ".".join(parts[: i + 1])
    return parts[0] if parts else ""


# Note [A numbered part that is no block]
# `show`'s saved activations per block took a path up to its first numeric part, and a
# Sequential of different layers is numbered too: a bare `NystromAttention` read
# `encoder.attn.to_out.0` (its output Linear, beside a Dropout as `to_out.1`) as a block.
# Blocks repeat: a numbered module is a block where a neighbouring index of the same
# container holds a module of its class (`layers.0`, `layers.1`: two `Block`s; the
# Blocks of `Sequential(Block, Block, LayerNorm)`), or where it is its container's only
# numbered child (a one-layer model). One of a pipeline of different layers
# (`Sequential(Linear, GELU, Linear)`, `Sequential(Linear, Dropout)`, that LayerNorm) is
# none, and the path reads on past it.
def numbered_layers(classes: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The numbered module paths, among `classes` ((path, class name) of the modules the
    trace saw), that are no block (Note [A numbered part that is no block])."""
    lists: dict[str, dict[int, str]] = {}
    for path, cls in classes:
        head, _, last = path.rpartition(".")
        if last.isdigit() and cls:
            lists.setdefault(head, {})[int(last)] = cls
    out = set()
    for head, items in lists.items():
        for i, cls in items.items():
            if len(items) > 1 and cls not in (items.get(i - 1), items.get(i + 1)):
                out.add(f"{head}.{i}" if head else str(i))
    return frozenset(out)


COMPILED = "_orig_mod"   # torch.compile's OptimizedModule holds the model under this name
# Wrappers that hold the model under a private name the user never writes: torch.compile's
# OptimizedModule, and Lightning Fabric's `fabric.setup(model)` (`_FabricModule`, the model
# as `_forward_module`; its `_original_module` is the same object, which named_modules()
# lists once). A policy's `blocks.*` then selects the model's blocks under either; Fabric's
# read "selector 'blocks.*' matches no module; the model's modules are _forward_module
# (LM), _forward_module.blocks (ModuleList), ..." before. (Here, not in trace/roots.py,
# which imports torch: replay/policies.py reads a selector by the same rule.)
WRAPPERS = (COMPILED, "_forward_module")


def plain_name(name: str) -> str:
    """A module or parameter name as the model itself has it: `torch.compile(model)` puts
    `_orig_mod.` before every name (`_orig_mod.0.weight` is the model's `0.weight`), Fabric
    `_forward_module.`."""
    if not any(w in name for w in WRAPPERS):
        return name
    return ".".join(p for p in name.split(".") if p not in WRAPPERS)


def traced_command(header: dict, *before: str, options: tuple[str, ...] = ()) -> str:
    """The shell words that run again what a ledger traced: `before` (a memledger verb),
    the script, `options`, its `--steps-by` where it counted steps otherwise than by the
    optimizer (Note [A plan measured as its ledger was traced], commands/plan.py), then
    `-- ARGV` where the script had arguments."""
    argv = [str(a) for a in header.get("argv") or []]
    by = str(header.get("steps_by") or "optimizer")
    return shlex.join([*before, str(header.get("script") or "SCRIPT"), *options,
                       *(["--steps-by", by] if by != "optimizer" else []),
                       *(["--", *argv] if argv else [])])
