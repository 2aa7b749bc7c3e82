"""Doctor findings in the terminal: one block per finding (severity, check, line, numbers)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from memledger.doctor.findings import DoctorReport


def print_findings(report: DoctorReport, console: Console, title: str = "doctor") -> None:
    n_err = len(report.errors)
    n_warn = len(report.findings) - n_err
    if report.ok:
        console.print(f"[green]{title}: no findings[/] in {report.steps} steps")
        return
    console.print(f"[bold]{title}:[/] {len(report.findings)} findings in {report.steps} steps "
                  f"([red]{n_err} errors[/], [yellow]{n_warn} warnings[/])")
    for f in report.findings:
        style = "red bold" if f.severity == "error" else "yellow bold"
        console.print(f"[{style}]{f.severity.upper()}[/] [bold]{f.check}[/] "
                      f"[dim]{escape(str(f.where))}[/]", soft_wrap=True)
        console.print("  " + escape(f.message), soft_wrap=True)
        if f.evidence:
            nums = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
            console.print(f"  [dim]{escape(nums)}[/]", soft_wrap=True)
