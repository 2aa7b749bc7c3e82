"""`memledger show`: the ledger summary as Rich tables a person reads in ten seconds.

Top to bottom: where the peak is and whether the allocator agrees; what the peak is made
of (next to the peak of each phase and step); the largest tensors live there; what is saved
for backward, by module; memory held after its last use.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from memledger.ledger.schema import CATEGORIES
from memledger.ledger.summary import Summary
from memledger.units import format_bytes

BAR_WIDTH = 16


def _mod(path: str, width: int = 20) -> str:
    """A module path for a narrow column: its tail is the informative end."""
    if not path:
        return "(no module)"
    return path if len(path) <= width else "…" + path[-(width - 1):]


def _op(op: str) -> str:
    """`addmm.default` -> `addmm`: the overload name only when it says something."""
    return op.removesuffix(".default")


def _plain(*cells: str) -> list[Text]:
    """Names from the ledger (modules, ops, parameters) are data, never Rich markup: a
    module named `[/x]` is printed as `[/x]`, not parsed as a closing tag."""
    return [Text(c) for c in cells]


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _bar(part: int, whole: int) -> str:
    n = round(BAR_WIDTH * part / whole) if whole else 0
    return "█" * n


def _headline(s: Summary, source: str) -> list[Text]:
    pk = s.peak
    lines = [
        Text(f"{source} · {s.device} · {s.steps_traced} steps traced"
             + ("" if s.complete else " · INCOMPLETE (crashed or interrupted)"), style="dim"),
        Text.assemble(("Peak ", "bold"), (format_bytes(pk.bytes), "bold magenta"),
                      f" at step {pk.step} · {pk.phase} · {_op(pk.op) or '-'} in {_mod(pk.module, 40)}"
                      f" · event {pk.event}"),
    ]
    if s.measured.source != "none":
        diff = s.measured.peak_bytes - pk.bytes
        lines.append(Text(
            f"Allocator peak {format_bytes(s.measured.peak_bytes)} ({s.measured.source}): "
            f"the ledger explains all but {diff:,} bytes "
            f"({_pct(abs(diff), s.measured.peak_bytes)})", style="dim"))
    return lines


def _breakdown(s: Summary) -> Table:
    total = sum(s.at_peak.values())
    t = Table(title="At the peak", title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("category")
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    t.add_column("")
    for c in CATEGORIES:
        b = s.at_peak.get(c, 0)
        if b:
            t.add_row(c, format_bytes(b), _pct(b, total), Text(_bar(b, total), style="cyan"))
    t.add_row("total", format_bytes(total), "", "", style="bold")
    return t


def _phases(s: Summary) -> Table:
    t = Table(title="Peak by phase / step", title_justify="left", show_edge=False,
              pad_edge=False)
    t.add_column("when")
    t.add_column("peak", justify="right")
    for name, b in s.by_phase_peak.items():
        t.add_row(name, format_bytes(b), style="bold" if name == s.peak.phase else None)
    for step, b in s.by_step_peak.items():
        t.add_row(f"step {step}", format_bytes(b), style="dim")
    return t


def _top_tensors(s: Summary) -> Table:
    t = Table(title="Largest tensors live at the peak", title_justify="left", show_edge=False,
              pad_edge=False)
    t.add_column("bytes", justify="right", no_wrap=True, min_width=9)
    t.add_column("category", no_wrap=True, min_width=10)
    for col in ("module", "shape", "dtype", "made by / name"):
        t.add_column(col, no_wrap=True)
    for r in s.top_tensors:
        t.add_row(format_bytes(r.bytes), r.category, *_plain(
            _mod(r.module), r.shape, r.dtype, _mod(r.name, 24) if r.name else _op(r.op)))
    return t


def _activations(s: Summary) -> Table:
    t = Table(title=f"Saved for backward: {format_bytes(s.activations.saved_bytes)} live just "
                    "before backward, by the module that saved it",
              title_justify="left", show_edge=False, pad_edge=False)
    t.add_column("module", no_wrap=True)
    t.add_column("bytes", justify="right")
    t.add_column("share", justify="right")
    total = s.activations.saved_bytes
    for mod, b in list(s.activations.by_module.items())[:10]:
        t.add_row(Text(_mod(mod, 40)), format_bytes(b), _pct(b, total))
    if len(s.activations.by_module) > 10:
        t.add_row(f"... {len(s.activations.by_module) - 10} more", "", "", style="dim")
    return t


def _idle(s: Summary) -> Table:
    t = Table(title="Held after last use (idle bytes × events; same tensor of each step "
                    "folded)", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("bytes", "×", "category", "what", "shape", "idle events"):
        t.add_column(col, justify="right" if col in ("bytes", "×", "idle events") else "left",
                     no_wrap=True)
    for r in s.idle[:8]:
        what = _mod(r.name, 28) if r.name else f"{_op(r.op)} in {_mod(r.module, 16)}"
        t.add_row(format_bytes(r.bytes), str(r.count), r.category, *_plain(what, r.shape),
                  f"{r.idle_events:,}")
    return t


def render_summary(s: Summary, source: str = "") -> Group:
    """All of `show`'s tables, top to bottom."""
    side = Table.grid(padding=(0, 4))
    side.add_row(_breakdown(s), _phases(s))
    parts: list = [*_headline(s, source), Text(""), side, Text(""), _top_tensors(s), Text(""),
                   _activations(s)]
    if s.idle:
        parts += [Text(""), _idle(s)]
    return Group(*parts)


def print_summary(s: Summary, console: Console, source: str = "") -> None:
    console.print(render_summary(s, source))
