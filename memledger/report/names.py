"""Names in table cells that wrap where a person would break them.

A module path, a parameter name or a policy in a narrow column: Rich folds a word longer
than its column at the column's edge (`model.embed_to` / `kens`). `Name` breaks after a
dot, a colon, a plus or a space instead (`model.layers.0.mlp.` / `gate_proj.weight`), and
tells the table its narrowest width is its longest part, so the table narrows other
columns before it cuts one. The text is never changed: copied from the terminal, the
lines join back to the name. A part wider than the column breaks after an underscore,
and only what is still too wide is folded.
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.text import Text

# a part ends after its separators: `layers.` `0.` `checkpoint:` `+ ` `mm ` `in ` `2·`
# (predict's "peak at" is step·phase)
_PART = re.compile(r"[^.:+·\s]*[.:+·\s]+|[^.:+·\s]+")
# a part too wide for its column breaks after an underscore before it is folded:
# `nll_loss_` / `backward`
_SUBPART = re.compile(r"[^_]*_+|[^_]+")


class Name:
    """A cell that wraps after `.`, `:`, `+` or a space (see the module's docstring)."""

    def __init__(self, text: str, style: str = "") -> None:
        self.text = text
        self.style = style
        self.parts = _PART.findall(text) or [""]

    def __str__(self) -> str:
        return self.text

    def lines(self, width: int) -> list[str]:
        """The name cut into lines of at most `width` cells, at part boundaries."""
        out: list[str] = []
        line = ""
        parts = [sub for p in self.parts
                 for sub in (_SUBPART.findall(p) if cell_len(p.rstrip()) > width else [p])]
        for part in parts:
            if line and cell_len(line + part.rstrip()) > width:
                out.append(line.rstrip())
                line = ""
            line += part
        out.append(line.rstrip())
        return out

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max(cell_len(p.rstrip()) for p in self.parts)
        return Measurement(widest, cell_len(self.text)).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # markup is never parsed: names are data (a module named `[/x]` prints as `[/x]`)
        yield Text("\n".join(self.lines(options.max_width)), style=self.style,
                   overflow="fold", no_wrap=False)


def policy_cell(policy: str) -> Group:
    """A policy in a table cell: one part per line (`checkpoint:blocks.0+` / `offload:lm_head`),
    each part a `Name`, so a long selector breaks after a dot, never mid-word."""
    return Group(*(Name(part) for part in re.findall(r"[^+]+\+?|\+", policy) or [""]))
