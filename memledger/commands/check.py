"""`memledger check SCRIPT|LEDGER`: exit 0 within budget, 1 over budget, 2 could not check."""

from __future__ import annotations

import contextlib
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterator, Optional

import typer
from rich.cells import cell_len
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from memledger.commands.common import console, err_console, print_json, stdout_to_stderr
from memledger.errors import BudgetError, CheckFailed, LedgerFormatError, MemledgerError
from memledger.outputs import check_output
from memledger.processes import several_workers
from memledger.report.names import Name
from memledger.units import count, format_bytes

if TYPE_CHECKING:
    from memledger.budget import CheckResult
    from memledger.ledger.model import Ledger

DEFAULT_STEPS = 3  # as `memledger trace`


def _pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for v in values or []:
        key, eq, size = v.partition("=")
        if not eq or not key.strip():
            raise BudgetError(f"--{what} {v!r} must read NAME=SIZE, e.g. --{what} "
                              f"{'activation' if what == 'category' else 'backward'}=300MiB")
        out[key.strip()] = size.strip()
    return out


def _load(path: Path, what: str) -> Ledger:
    from memledger.ledger.model import Ledger

    led = Ledger.load(path)
    if led.truncated or not led.complete:
        status = (led.end or {}).get("status", "cut off")
        raise LedgerFormatError(f"{what} {path} is a partial ledger ({status}): its peak may be "
                                "below the full run's; check a complete ledger")
    return led


def check(
    target: Annotated[Path, typer.Argument(help="a training script (.py, traced) or a ledger")],
    script_args: Annotated[Optional[list[str]], typer.Argument(
        help="arguments for the script, after --", show_default=False)] = None,
    budget: Annotated[Optional[str], typer.Option(
        "--budget", help="total peak, e.g. 1.2GiB (MiB/GiB binary, MB/GB decimal)")] = None,
    category: Annotated[Optional[list[str]], typer.Option(
        help="category at the peak, e.g. activation=300MiB (repeatable)")] = None,
    phase: Annotated[Optional[list[str]], typer.Option(
        help="peak within a phase, e.g. backward=1GiB (repeatable)")] = None,
    config: Annotated[Optional[Path], typer.Option(
        help="TOML budget file, or a pyproject.toml with \\[tool.memledger.budget]; "
             "default: the nearest pyproject.toml that has one")] = None,
    baseline: Annotated[Optional[Path], typer.Option(
        help="ledger recorded before the change (same model)")] = None,
    max_increase: Annotated[Optional[str], typer.Option(
        help="peak growth allowed over --baseline: 5% or a size such as 10MiB")] = None,
    step_time: Annotated[Optional[str], typer.Option(
        help="opt-in: median traced step time, e.g. 900ms (noisy: use a tolerance)")] = None,
    step_time_tolerance: Annotated[Optional[str], typer.Option(
        help="slack on --step-time, e.g. 25% (default 10%)")] = None,
    steps: Annotated[Optional[int], typer.Option(
        help=f"optimizer steps to trace a script for (default: budget's, else {DEFAULT_STEPS})")]
        = None,
    steps_by: Annotated[str, typer.Option(
        help="what ends a step, as `memledger trace --steps-by`: optimizer, forward "
             "(evaluation, inference) or whole (the whole script; --steps is ignored)")]
        = "optimizer",
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="keep the traced ledger here (default: a temporary file)")] = None,
    measure: Annotated[Optional[bool], typer.Option(
        help="also run the script untraced for the allocator peak (the peak checked) "
             "[default: on; off with --fake]", show_default=False)] = None,
    fake: Annotated[bool, typer.Option(
        help="trace the script above FakeTensorMode: would it fit? (docs/fake.md)")] = False,
    device: Annotated[Optional[str], typer.Option(
        help="--fake: the target device, cpu or cuda (default: the script's own)")] = None,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.check/1 JSON")] = False,
    junit: Annotated[Optional[Path], typer.Option(help="write JUnit XML, one testcase per limit")]
        = None,
    markdown_: Annotated[Optional[Path], typer.Option(
        "--markdown", help="write a Markdown summary (e.g. $GITHUB_STEP_SUMMARY)")] = None,
    nproc: Annotated[Optional[int], typer.Option(
        min=1, help="run the script on N ranks under torchrun; every rank is checked")] = None,
    timeout: Annotated[float, typer.Option(
        help="with --nproc: seconds without an optimizer step before a rank counts as hung")] =
        300.0,
    no_findings: Annotated[bool, typer.Option(
        "--no-findings", help="also fail on any `memledger doctor` finding (a script is "
        "doctored in its own run; a ledger must come from `memledger doctor -o`)")] = False,
) -> None:
    """Check a script's (or a ledger's) memory against a budget. Exit 1 when over budget."""
    from memledger.budget import evaluate, load_budget
    from memledger.budget.junit import junit_xml, write_text
    from memledger.budget.markdown import markdown
    from memledger.trace.session import trace_script

    with _errors_reported(junit, markdown_, target):
        _check_outputs(target, output, junit, markdown_)
        _check_steps_by(steps_by, target, nproc)
        flags: dict = {"peak": budget, "categories": _pairs(category, "category"),
                       "phases": _pairs(phase, "phase"), "steps": steps,
                       "fake": fake or None, "device": device}
        if max_increase is not None or baseline is not None:
            flags["baseline"] = {k: v for k, v in (("max_increase", max_increase),
                                                   ("ledger", baseline)) if v is not None}
        if step_time is not None or step_time_tolerance is not None:
            flags["step_time"] = {k: v for k, v in (("max", step_time),
                                                    ("tolerance", step_time_tolerance))
                                  if v is not None}
        try:
            bud, sources = load_budget(config, flags, search_from=Path.cwd())
        except BudgetError as e:
            if not (no_findings and str(e).startswith("memledger: no limit to check")):
                raise
            return _findings_only(target, script_args or [], steps or DEFAULT_STEPS, json_,
                                  steps_by)
        base = None
        if bud.baseline is not None and bud.baseline.ledger is not None:
            base = _load(bud.baseline.ledger, "baseline")

        if nproc or (target.suffix != ".py" and not target.exists()):  # several ranks
            from memledger.commands.ranks import check_ranks, rank_ledgers_for_check

            leds = rank_ledgers_for_check(target, script_args or [], nproc,
                                          bud.steps or DEFAULT_STEPS, output, measure, timeout,
                                          json_, _load)
            check_ranks(leds, bud, base, sources, str(target), json_, junit, markdown_)
            return
        if target.suffix == ".py":
            # with its doctor run, three fresh processes: Note [Warm starts]
            warm = several_workers() if no_findings else contextlib.nullcontext()
            with warm, tempfile.TemporaryDirectory(prefix="memledger-check-") as tmp:
                out = output or Path(tmp) / "check.ledger"
                with stdout_to_stderr(json_), _no_temp_path(out if output is None else None):
                    # peaks and traced step times only: Note [Memory-only traces]
                    res = trace_script(target, script_args or [], out, measure=measure,
                                       steps=bud.steps or DEFAULT_STEPS, fake=bud.fake,
                                       device=bud.device, timing=False, steps_by=steps_by)
                asked = bud.steps or DEFAULT_STEPS
                if res.steps < asked and steps_by == "optimizer":   # the first step's peak
                    # has no optimizer state yet (an inference script's forwards are all run)
                    raise BudgetError(
                        f"the script ended after {res.steps} of the {asked} steps check "
                        "traces: a peak of fewer steps than asked can pass a change that is "
                        "over budget (the first step holds no optimizer state yet); let the "
                        f"script run {asked} steps, or ask for --steps {max(res.steps, 1)}")
                led = _load(res.ledger_path, "ledger")
                doc = _doctor(target, script_args or [], asked, json_, steps_by=steps_by) \
                    if no_findings else None
        else:
            if script_args:
                raise BudgetError(f"{target} is not a .py script: script arguments make no sense")
            if fake or device:
                raise BudgetError(f"{target} is a ledger: --fake/--device apply when tracing a .py "
                                  "script; check the script, or drop them")
            led = _load(target, "ledger")
            doc = _recorded_findings(led, target, no_findings)
        result = evaluate(led, bud, baseline=base,
                          baseline_name=str(bud.baseline.ledger) if bud.baseline else "",
                          sources=sources)
        if json_:  # the verdict first: a report that cannot be written never hides it
            out = result.to_json_dict()
            if doc is not None:
                out["doctor"] = doc.to_json_dict()
                out["ok"] = out["ok"] and (doc.ok or not no_findings)
            print_json(out)
        else:
            print_result(result, str(target))
            if doc is not None:
                from memledger.report.findings import print_findings
                print_findings(doc, console)
        if junit is not None:
            write_text(junit, junit_xml(result), "JUnit report")
        if markdown_ is not None:
            write_text(markdown_, markdown(result), "Markdown summary")
        if not result.ok:
            raise CheckFailed(f"over budget: {len(result.violations)} of "
                              f"{count(len(result.limits), 'limit')} exceeded ({', '.join(v.limit for v in result.violations)})")
        _fail_on_findings(doc, no_findings)


def _check_steps_by(steps_by: str, target: Path, nproc: int | None) -> None:
    """`--steps-by` as `memledger trace` takes it, where it applies: the refusal of a script
    without an optimizer step names it, and `check` had no such option (an inference
    script's budget could not be checked)."""
    from memledger.commands.trace import _steps_by

    if _steps_by(steps_by) == "optimizer":
        return
    if nproc:
        raise BudgetError("--steps-by does not apply with --nproc (ranks are checked by their "
                          "optimizer steps); drop it")
    if target.suffix != ".py":
        raise BudgetError(f"{target} is a ledger: --steps-by applies when tracing a .py "
                          "script; check the script, or drop it")


# ---- doctor findings (`--no-findings`) ------------------------------------------------------
def _doctor(script: Path, argv: list[str], steps: int, json_: bool, ledger: Path | None = None,
            steps_by: str = "optimizer"):
    from memledger.doctor.run import doctor_script

    with stdout_to_stderr(json_):
        return doctor_script(script, argv, steps=steps, ledger=ledger, quiet=True,
                             steps_by=steps_by)


def _recorded_findings(led: Ledger, path: Path, required: bool):
    from memledger.doctor.findings import DoctorReport

    doc = DoctorReport.from_ledger_extra(led.extra)
    if doc is None and required:
        raise LedgerFormatError(f"{path} holds no doctor findings, so --no-findings cannot "
                                "check it; record it with `memledger doctor SCRIPT -o "
                                f"{path}`, or check the script itself")
    return doc


def _fail_on_findings(doc, required: bool) -> None:
    if required and doc is not None and not doc.ok:
        raise CheckFailed(f"the doctor found {count(len(doc.findings), 'problem')} "
                          f"({count(len(doc.errors), 'error')}) and --no-findings asks for none")


@contextlib.contextmanager
def _no_temp_path(temp: Path | None):
    """A failed trace into check's own temporary folder must not point at a ledger "kept"
    there: the folder is gone when the message is read."""
    try:
        yield
    except MemledgerError as e:
        if temp is None or str(temp) not in str(e):
            raise
        head = str(e).split(f"{temp}")[0].rstrip()
        head = re.sub(r"[;,]?\s*[^;,]*\bkept( at)?$", "", head).rstrip(" ;,")
        e.args = (f"{head}; run with -o FILE to keep the partial ledger",)
        raise


def _findings_only(target: Path, argv: list[str], steps: int, json_: bool,
                   steps_by: str) -> None:
    """`check --no-findings` without a budget: the findings are the whole check."""
    from memledger.budget.result import CHECK_SCHEMA
    from memledger.report.findings import print_findings

    with tempfile.TemporaryDirectory(prefix="memledger-check-") as tmp:
        if target.suffix == ".py":
            path = Path(tmp) / "doctor.ledger"
            doc = _doctor(target, argv, steps, json_, ledger=path, steps_by=steps_by)
            led = _load(path, "ledger")
        else:
            led = _load(target, "ledger")
            doc = _recorded_findings(led, target, True)
    if json_:
        print_json({"schema": CHECK_SCHEMA, "ok": doc.ok, "peak_bytes": led.peak().bytes,
                    "violations": [], "doctor": doc.to_json_dict()})
    else:
        print_findings(doc, console, title=str(target))
    _fail_on_findings(doc, True)


@contextlib.contextmanager
def _errors_reported(junit: Path | None, markdown_: Path | None, target: Path) -> Iterator[None]:
    """Exit 2 (could not check) or 3 (the script failed) still writes JUnit (an <error>) and
    Markdown, so CI shows why the budget was not checked rather than a stale report."""
    try:
        yield
    except MemledgerError as e:
        if not isinstance(e, CheckFailed):
            for path, text, what in (
                    (junit, lambda: _junit_error(e), "JUnit report"),
                    (markdown_, lambda: _markdown_error(e), "Markdown summary")):
                if path is not None:
                    with contextlib.suppress(MemledgerError):
                        from memledger.budget.junit import write_text
                        write_text(check_output(path, what, inputs=[target]), text(), what)
        raise


def _junit_error(e: MemledgerError) -> str:
    from memledger.budget.junit import junit_error_xml

    return junit_error_xml(str(e), e.exit_code)


def _markdown_error(e: MemledgerError) -> str:
    from memledger.budget.markdown import markdown_error

    return markdown_error(str(e), e.exit_code)


def _check_outputs(target: Path, output: Path | None, junit: Path | None,
                   markdown_: Path | None) -> None:
    """Every file the check will write, refused before anything runs (docs/reliability.md)."""
    if output is not None:
        check_output(output, "ledger", inputs=[target, junit, markdown_], ledger=True)
    for path, what in ((junit, "JUnit report"), (markdown_, "Markdown summary")):
        if path is not None:
            check_output(path, what, inputs=[target])


def _limits_table(result: CheckResult, fold_limit: bool) -> Table:
    """One row per limit; numbers are never cut, "as written" breaks after a space
    (`1GB (= ` / `953.7 MiB)`) and, with `fold_limit`, the limit after its colon."""
    t = Table(box=None, pad_edge=False)
    for col in ("limit", "as written", "budget", "actual", "margin", ""):
        t.add_column(col, justify="right" if col in ("budget", "actual", "margin") else "left",
                     overflow="fold",
                     no_wrap=col not in ("as written",) + (("limit",) if fold_limit else ()))
    for lim in result.limits:
        margin = -lim.over
        m = format_bytes(int(margin)) if lim.budget_bytes is not None else f"{margin*1e3:.1f} ms"
        t.add_row(Name(lim.limit) if fold_limit else Text(lim.limit), Name(lim.budget_text),
                  lim.budget_str(), lim.actual_str(), m, "ok" if lim.ok else "[red]OVER[/]")
    return t


def print_result(result: CheckResult, source: str) -> None:
    verdict = "[green]PASS[/]" if result.ok else "[red bold]FAIL[/]"
    console.print(f"{verdict} {escape(source)}: peak [magenta]{format_bytes(result.peak_bytes)}[/] "
                  f"({result.peak_bytes:,} B), {result.peak_source}; "
                  f"{count(result.steps_traced, 'step')} traced")
    if result.budget_sources:
        console.print(f"budget from {', '.join(result.budget_sources)}", style="dim",
                      markup=False)
    t = _limits_table(result, fold_limit=False)
    # "as written" wraps first; the limit's name only when even that cannot make the table
    # fit (at 60 columns an unbreakable `category:optimizer_state` once squeezed "as
    # written" into a column one letter wide, its text running down the page)
    written = [Name(lim.budget_text) for lim in result.limits]
    slack = max((cell_len(w.text) - max(cell_len(p.rstrip()) for p in w.parts)
                 for w in written), default=0)
    if Measurement.get(console, console.options.update_width(10_000), t).maximum - slack \
            > console.width:
        t = _limits_table(result, fold_limit=True)
    console.print(t)
    if any(lim.limit.startswith("category:") for lim in result.limits):
        console.print("each category is checked at its own peak, not only at the total's",
                      style="dim")
    for v in result.violations:
        console.print(v.line(), markup=False, highlight=False, soft_wrap=True)
        if v.growth:
            console.print("  grew most since the baseline: "
                          + ", ".join(str(g) for g in v.growth[:6]), markup=False,
                          soft_wrap=True)
    if result.ok:
        err_console.print("within budget", style="dim")
