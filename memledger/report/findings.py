"""Doctor findings in the terminal: one block per finding (severity, check, line, numbers)."""

from __future__ import annotations

from html import escape as html_escape

from rich.console import Console
from rich.markup import escape

from memledger.doctor.findings import DoctorReport
from memledger.units import count


def print_findings(report: DoctorReport, console: Console, title: str = "doctor") -> None:
    n_err = len(report.errors)
    n_warn = len(report.findings) - n_err
    if report.ok:
        console.print(f"[green]{title}: no findings[/] in {report.steps_text()}")
        return
    console.print(f"[bold]{title}:[/] {count(len(report.findings), 'finding')} in "
                  f"{escape(report.steps_text())} ([red]{count(n_err, 'error')}[/], "
                  f"[yellow]{count(n_warn, 'warning')}[/])")
    for f in report.findings:
        style = "red bold" if f.severity == "error" else "yellow bold"
        console.print(f"[{style}]{f.severity.upper()}[/] [bold]{f.check}[/] "
                      f"[dim]{escape(str(f.where))}[/]", soft_wrap=True)
        console.print("  " + escape(f.message), soft_wrap=True)
        if f.evidence:
            nums = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
            console.print(f"  [dim]{escape(nums)}[/]", soft_wrap=True)


def findings_html(report: DoctorReport) -> str:
    """The doctor's findings as a static HTML section (the report page)."""
    if report.ok:
        return (f'<h2>Doctor</h2><p id="ml-doctor" class="dim">no findings in '
                f'{html_escape(report.steps_text())}</p>')
    rows = "".join(
        f'<tr class="ml-{f.severity}"><td>{f.severity.upper()}</td>'
        f"<td>{html_escape(f.check)}</td><td>{html_escape(str(f.where))}</td>"
        f"<td>{html_escape(f.message)}<br><span class=\"dim\">"
        f"{html_escape(', '.join(f'{k}={v}' for k, v in f.evidence.items()))}</span></td></tr>"
        for f in report.findings)
    return (f'<h2>Doctor: {count(len(report.findings), "finding")} '
            f'({count(len(report.errors), "error")})</h2>'
            f'<table id="ml-doctor"><tr><th>severity</th><th>check</th><th>where</th>'
            f"<th>finding</th></tr>{rows}</table>")
