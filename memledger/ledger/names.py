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

OUTSIDE_MODULES = "(script)"


def model_forward(cls: str) -> str:
    """The label of ops in the model's own forward: 'GPT' -> '(GPT.forward)'."""
    return f"({cls or 'model'}.forward)"


def module_label(path: str) -> str:
    """'' -> '(script)'; any other module path as it is."""
    return path or OUTSIDE_MODULES


def block_of(path: str) -> str:
    """The repeated block a module belongs to: the path up to its first numeric part.

    'blocks.0.attn.c_attn' -> 'blocks.0'; 'encoder.layers.11.ff' -> 'encoder.layers.11';
    a path with no index rolls up to its top-level module ('lm_head.proj' -> 'lm_head');
    '' (the script) stays ''; a label such as '(GPT.forward)' stays whole.
    """
    if path.startswith("("):   # a label, not a path: '(GPT.forward)' stays whole
        return path
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return parts[0] if parts else ""
