"""`memledger show`: the ledger summary as Rich tables a person reads in ten seconds."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from memledger.ledger.schema import CATEGORIES
from memledger.ledger.summary import Summary
from memledger.units import format_bytes


def _mod(path: str) -> str:
    return path if path else "(no module)"


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "    -"


def render_summary(s: Summary, source: str = "") -> Group:
    """All of `show`'s tables, top to bottom."""
    pk = s.peak
    total = max(pk.bytes, s.measured.peak_bytes)
    head = Text.assemble(
        ("Peak ", "bold"), (format_bytes(pk.bytes), "bold magenta"),
        f"  at step {pk.step}, {pk.phase}, op {pk.op or '-'} in {_mod(pk.module)}"
        f"  (event {pk.event})",
    )
    lines: list = [Text(f"{source}  ·  device {s.device}  ·  {s.steps_traced} steps traced"
                        + ("" if s.complete else "  ·  INCOMPLETE (crashed or interrupted)"),
                        style="dim"), head]
    if s.measured.source != "none":
        diff = s.measured.peak_bytes - pk.bytes
        lines.append(Text(
            f"Allocator peak {format_bytes(s.measured.peak_bytes)} ({s.measured.source}); "
            f"the ledger explains all but {diff:,} bytes "
            f"({_pct(abs(diff), s.measured.peak_bytes).strip()})", style="dim"))

    cat = Table(title="At the peak", title_justify="left", show_edge=False)
    cat.add_column("category")
    cat.add_column("bytes", justify="right")
    cat.add_column("", justify="right")
    cat.add_column("share", justify="right")
    for c in CATEGORIES:
        b = s.at_peak.get(c, 0)
        if b:
            cat.add_row(c, f"{b:,}", format_bytes(b), _pct(b, total))
    cat.add_row("total", f"{sum(s.at_peak.values()):,}", format_bytes(sum(s.at_peak.values())),
                "", style="bold")

    ph = Table(title="Peak by phase", title_justify="left", show_edge=False)
    ph.add_column("phase")
    ph.add_column("peak", justify="right")
    for name, b in s.by_phase_peak.items():
        ph.add_row(name, format_bytes(b))
    ph.add_row("", "")
    for step, b in s.by_step_peak.items():
        ph.add_row(f"step {step}", format_bytes(b))

    top = Table(title="Largest tensors live at the peak", title_justify="left", show_edge=False)
    for col in ("bytes", "category", "module", "shape", "dtype", "op / name"):
        top.add_column(col, justify="right" if col == "bytes" else "left")
    for r in s.top_tensors:
        top.add_row(format_bytes(r.bytes), r.category, _mod(r.module), r.shape, r.dtype,
                    r.name or r.op)

    act = Table(title=f"Saved for backward: {format_bytes(s.activations.saved_bytes)} "
                      "(live just before backward), by module",
                title_justify="left", show_edge=False)
    act.add_column("module")
    act.add_column("bytes", justify="right")
    for mod, b in list(s.activations.by_module.items())[:12]:
        act.add_row(_mod(mod), format_bytes(b))

    idle = Table(title="Idle residency: held after last use (bytes × events)",
                 title_justify="left", show_edge=False)
    for col in ("bytes", "category", "module", "shape", "idle events", "what"):
        idle.add_column(col, justify="right" if col in ("bytes", "idle events") else "left")
    for r in s.idle[:8]:
        idle.add_row(format_bytes(r.bytes), r.category, _mod(r.module), r.shape,
                     f"{r.idle_events:,}", r.name or r.op)

    parts = [*lines, Text(""), cat, Text(""), ph, Text(""), top, Text(""), act]
    if s.idle:
        parts += [Text(""), idle]
    return Group(*parts)


def print_summary(s: Summary, console: Console, source: str = "") -> None:
    console.print(render_summary(s, source))
