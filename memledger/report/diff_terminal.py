"""`memledger diff` for people: Rich tables of what grew, largest first."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from memledger.ledger.names import module_label
from memledger.report.diff import Diff, ModuleDelta
from memledger.report.names import Name
from memledger.units import format_bytes, format_signed_bytes


def _delta_style(d: int) -> str:
    return "red" if d > 0 else ("green" if d < 0 else "dim")


def _mods(title: str, rows: list[ModuleDelta]) -> Table:
    t = Table(title=title, title_justify="left", show_edge=False)
    for col in ("module", "A", "B", "change"):
        t.add_column(col, justify="left" if col == "module" else "right",
                     overflow="fold", no_wrap=col != "module")
    for r in rows:
        t.add_row(Name(module_label(r.module)), format_bytes(r.a), format_bytes(r.b),
                  Text(format_signed_bytes(r.delta), style=_delta_style(r.delta)))
    return t


def render_diff(d: Diff) -> Group:
    pk = d.peak
    head = Text.assemble(("Peak ", "bold"), format_bytes(pk.a), " → ", format_bytes(pk.b), "  ",
                         (f"{format_signed_bytes(pk.delta)} ({pk.delta:+,} B)",
                          _delta_style(pk.delta)))
    parts: list = [Text(f"A = {d.a}   B = {d.b}", style="dim"), head]
    if d.measured:
        m = d.measured
        parts.append(Text(f"Allocator peak {format_bytes(m.a)} → {format_bytes(m.b)}  "
                          f"{format_signed_bytes(m.delta)}", style="dim"))
    else:
        parts.append(Text(f"Allocator peaks: not compared ({d.unmeasured})", style="dim"))
    cat = Table(title="At the peak, by category", title_justify="left", show_edge=False)
    for col in ("category", "A", "B", "change"):
        cat.add_column(col, justify="left" if col == "category" else "right", no_wrap=True)
    for c, x in d.at_peak.items():
        if x.a or x.b:
            cat.add_row(c, format_bytes(x.a), format_bytes(x.b),
                        Text(format_signed_bytes(x.delta), style=_delta_style(x.delta)))
    parts += [Text(""), cat]
    if d.by_module:
        parts += [Text(""), _mods("By module, at the peak", d.by_module)]
    if d.saved_by_module:
        parts += [Text(""), _mods("Saved for backward, by module", d.saved_by_module)]
    for title, rows, style in (("Largest new or grown tensors at the peak", d.grown, "red"),
                               ("Largest gone or shrunk tensors at the peak", d.shrunk,
                                "green")):
        if not rows:
            continue
        t = Table(title=title, title_justify="left", show_edge=False)
        for col in ("change", "category", "made by, in module", "shape", "A", "B"):
            t.add_column(col, justify="right" if col in ("change", "A", "B") else "left",
                         overflow="fold", no_wrap=col != "made by, in module")
        for r in rows:   # new / gone: that side says so; op and module share one column
            t.add_row(Text(format_signed_bytes(r.delta), style=style), r.category,
                      Name(f"{r.what} in {module_label(r.module)}"), Text(r.shape),
                      "new" if r.new else format_bytes(r.a),
                      "gone" if r.gone else format_bytes(r.b))
        parts += [Text(""), t]
    return Group(*parts)


def print_diff(d: Diff, console: Console) -> None:
    console.print(render_diff(d))
