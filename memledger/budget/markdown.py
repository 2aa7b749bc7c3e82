"""A Markdown summary of a check, for a CI job summary ($GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

from memledger.budget.result import CheckResult
from memledger.units import count, format_bytes


def markdown(result: CheckResult, title: str = "memledger budget") -> str:
    verdict = "✅ within budget" if result.ok else f"❌ {len(result.violations)} over budget"
    lines = [
        f"### {title}: {verdict}",
        "",
        f"Peak **{format_bytes(result.peak_bytes)}** ({result.peak_bytes:,} B), "
        f"{result.peak_source}; {count(result.steps_traced, 'step')} traced."
        + (f" Budget from {', '.join(result.budget_sources)}." if result.budget_sources else ""),
        "",
        "| limit | budget (as written) | actual | margin | |",
        "|---|---|---|---|---|",
    ]
    for lim in result.limits:
        margin = -lim.over
        m = format_bytes(int(margin)) if lim.budget_bytes is not None else f"{margin * 1e3:.1f} ms"
        lines.append(f"| `{lim.limit}` | {lim.budget_text} | {lim.actual_str()} | {m} | "
                     f"{'ok' if lim.ok else '**OVER**'} |")
    bad = result.violations
    if bad:
        lines += ["", "**Over budget:**", ""]
        lines += [f"- {_md_escape(v.line())}" for v in bad]
    return "\n".join(lines) + "\n"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("_", "\\_")


def markdown_error(message: str, code: int, title: str = "memledger budget") -> str:
    """The check could not run: say so, with memledger's one-line reason and exit code."""
    return (f"### {title}: ⚠️ not checked (exit {code})\n\n"
            f"{_md_escape(message)}\n")
