"""What the verbs do with `--nproc N`: trace every rank through torchrun, then report them."""

from __future__ import annotations

from pathlib import Path

from memledger.commands.common import console, err_console, ledger_summary, \
    open_ledger, summarize_and_keep
from memledger.units import count, format_bytes


def trace_nproc(script: Path, argv: list[str], output: Path, nproc: int, steps: int,
                measure: bool, timeout: float):
    """`memledger trace --nproc N`: one ledger per rank, one line per rank printed."""
    from memledger.ledger.ranks import worst_rank
    from memledger.trace.launch import trace_ranks

    res = trace_ranks(script, argv, output, nproc, steps=steps, measure=measure,
                      timeout_s=timeout)
    summaries = [summarize_and_keep(p) for p in res.ledger_paths]
    worst = worst_rank(summaries)
    for r, (p, s) in enumerate(zip(res.ledger_paths, summaries)):
        line = (f"[bold]{p}[/]: rank {r} of {nproc}, {count(res.steps, 'step')}, peak "
                f"[magenta]{format_bytes(s.peak.bytes)}[/] at step {s.peak.step} ({s.peak.phase})")
        if res.measured:
            line += f"; allocator peak {format_bytes(s.measured.peak_bytes)}"
        console.print(line + ("  [bold]◀ worst[/]" if r == worst and nproc > 1 else ""))
    if output.exists():   # Note: a file under the exact name wins (ledger/ranks.py)
        err_console.print(f"memledger: note: {output} itself is an older one-process ledger, "
                          f"and `show {output}` reads it; remove it to see every rank",
                          style="yellow")
    else:
        err_console.print(f"next: memledger show {output}", style="dim")
    return res


def rank_ledgers_for_check(target: Path, argv: list[str], nproc: int, steps: int,
                           output: Path | None, measure: bool, timeout: float, json_: bool,
                           load) -> list:
    """The rank ledgers `check` judges: traced now (`--nproc` on a script) or found beside
    the name given (`run.ledger` -> run.rank*.ledger)."""
    import tempfile

    from memledger.commands.common import stdout_to_stderr
    from memledger.errors import BudgetError, LedgerFormatError
    from memledger.ledger.ranks import find_rank_files

    if target.suffix == ".py":
        from memledger.trace.launch import trace_ranks

        with tempfile.TemporaryDirectory(prefix="memledger-check-") as tmp:
            out = output or Path(tmp) / "check.ledger"
            with stdout_to_stderr(json_):
                res = trace_ranks(target, argv, out, nproc, steps=steps, measure=measure,
                                  timeout_s=timeout)
            return [load(p, "ledger") for p in res.ledger_paths]
    if argv:
        raise BudgetError(f"{target} is not a .py script: script arguments make no sense")
    files = find_rank_files(target)
    if not files:
        raise LedgerFormatError(f"no ledger at {str(target)!r} and no rank ledgers beside it "
                                "(run.rank0.ledger, ...); trace with --nproc first")
    return [load(p, "ledger") for p in files]


def check_ranks(leds: list, bud, base, sources, source: str, json_: bool, junit, markdown_):
    """Every rank against the budget; exit 1 when any rank is over. JSON: one check object
    per rank under "ranks", the worst rank's at top level."""
    from memledger.budget import evaluate
    from memledger.budget.junit import junit_xml, write_text
    from memledger.budget.markdown import markdown
    from memledger.commands.check import print_result
    from memledger.commands.common import print_json
    from memledger.errors import CheckFailed
    from memledger.ledger.ranks import peak_skew, ranks_json

    results = [evaluate(led, bud, baseline=base,
                        baseline_name=str(bud.baseline.ledger) if bud.baseline else "",
                        sources=sources) for led in leds]
    # the worst rank: a failing one before a passing one, then the highest peak checked
    worst = max(range(len(results)), key=lambda i: (not results[i].ok, results[i].peak_bytes, -i))
    if junit is not None:
        write_text(junit, junit_xml(results[worst]), "JUnit report")
    if markdown_ is not None:
        write_text(markdown_, markdown(results[worst]), "Markdown summary")
    if json_:
        peaks = [r.peak_bytes for r in results]
        skew = peak_skew(peaks)
        per_rank = [{"rank": i, **r.to_json_dict()} for i, r in enumerate(results)]
        print_json({**ranks_json(per_rank, worst, skew), "ok": all(r.ok for r in results)})
    else:
        for i, r in enumerate(results):
            print_result(r, f"{source} rank {i} of {len(results)}")
    bad = [i for i, r in enumerate(results) if not r.ok]
    if bad:
        r = results[bad[0]]
        raise CheckFailed(f"over budget on rank{'s' * (len(bad) > 1)} "
                          f"{', '.join(map(str, bad))} of {len(results)}: rank {bad[0]} "
                          f"{r.headline()}")


def report_ranks(ledger: Path, files: list[Path], output: Path, max_points: int) -> None:
    """`memledger report run.ledger` on rank ledgers: index page plus one page per rank."""
    from memledger.ledger.ranks import rank_skew, worst_rank
    from memledger.report.ranks_html import write_rank_reports

    leds = [open_ledger(p) for p in files]
    summaries = [led.summary() for led in leds]
    worst = worst_rank(summaries)
    pages = write_rank_reports(leds, summaries, worst, rank_skew(summaries), output,
                               ledger.name, max_points)
    console.print(f"[bold]{pages[0]}[/]: {len(files)} ranks of {ledger} (the worst: rank "
                  f"{worst}, {pages[1 + worst]})")
    err_console.print(f"open {pages[0]} in a browser; each rank has its own page", style="dim")


def diff_ranks(before: Path, after: Path, json_: bool, top: int) -> None:
    """`memledger diff A B` on rank ledgers: rank r of A against rank r of B; a per-rank
    table, then the rank whose peak grew most in full. JSON: the diff of that rank at top
    level, one per rank under "ranks"."""
    from memledger.commands.common import print_json
    from memledger.errors import LedgerFormatError
    from memledger.ledger.ranks import find_rank_files, ranks_json
    from memledger.report.diff import diff_ledgers
    from memledger.report.diff_terminal import print_diff

    fa = find_rank_files(before) or [before]
    fb = find_rank_files(after) or [after]
    if len(fa) != len(fb):
        raise LedgerFormatError(f"{before} has {len(fa)} rank ledger(s) and {after} {len(fb)}: "
                                "diff runs of the same world size, or name one rank's ledger")
    diffs = [diff_ledgers(open_ledger(a), open_ledger(b), str(a), str(b), top)
             for a, b in zip(fa, fb)]
    worst = max(range(len(diffs)), key=lambda r: (diffs[r].peak.delta, -r))
    deltas = [d.peak.delta for d in diffs]
    skew = {"max_delta_bytes": max(deltas), "min_delta_bytes": min(deltas)}
    if json_:
        print_json(ranks_json([{"rank": r, **d.to_json_dict()} for r, d in enumerate(diffs)],
                              worst, skew))
        return
    for r, d in enumerate(diffs):
        console.print(f"rank {r}: peak {format_bytes(d.peak.a)} -> {format_bytes(d.peak.b)} "
                      f"({'+' if d.peak.delta >= 0 else ''}{d.peak.delta:,} B)"
                      + ("  [bold]◀ grew most[/]" if r == worst else ""), highlight=False)
    console.print()
    print_diff(diffs[worst], console)


def measure_nproc(script: Path, argv: list[str], policy, nproc: int, steps: int,
                  time_steps: int, json_: bool) -> None:
    """`memledger measure --nproc N`: every rank's measured peak and step time; JSON: one
    memledger.measure/1 object per rank under "ranks", the worst rank's at top level."""
    from memledger.commands.common import print_json
    from memledger.ledger.ranks import peak_skew, ranks_json
    from memledger.measure.ranks import measure_ranks

    results = measure_ranks(script, argv, policy, nproc, steps=steps, time_steps=time_steps)
    worst = max(range(nproc), key=lambda r: (results[r].peak_bytes, -r))
    peaks = [r.peak_bytes for r in results]
    skew = peak_skew(peaks)
    if json_:
        print_json(ranks_json([{"rank": r, **res.to_json_dict()}
                               for r, res in enumerate(results)], worst, skew))
        return
    for r, res in enumerate(results):
        console.print(f"rank {r} of {nproc} with {res.policy}: peak "
                      f"[magenta]{format_bytes(res.peak_bytes)}[/] ({res.peak_bytes:,} B, "
                      f"{res.source}); step time {res.step_time_s * 1e3:.1f} ms"
                      + ("  [bold]◀ worst[/]" if r == worst and nproc > 1 else ""),
                      highlight=False)


def predict_ranks(files: list[Path], reports: list, json_: bool, print_table) -> None:
    """`memledger predict run.ledger` on rank ledgers: every rank replayed on its own ledger.
    JSON: one memledger.predict/1 per rank under "ranks", the worst rank's (highest
    predicted peak under any policy given) at top level."""
    from memledger.commands.common import print_json
    from memledger.ledger.ranks import peak_skew, ranks_json

    def worst_peak(rep) -> int:
        return max([rep.baseline_peak_bytes, *(p.peak_bytes for p in rep.policies)])

    worst = max(range(len(reports)), key=lambda r: (worst_peak(reports[r]), -r))
    peaks = [worst_peak(rep) for rep in reports]
    skew = peak_skew(peaks)
    if json_:
        print_json(ranks_json([{"rank": r, **rep.to_json_dict()}
                               for r, rep in enumerate(reports)], worst, skew))
        return
    for r, (f, rep) in enumerate(zip(files, reports)):
        print_table(rep, f"rank {r} of {len(files)} ({f})"
                    + ("  ◀ worst" if r == worst else ""))


def one_rank_ledger(ledger: Path, verb: str) -> Path:
    """`plan run.ledger` on rank ledgers: plan takes one rank's ledger; the worst rank's
    (highest peak, the allocator's where measured), said in one line on stderr."""
    from memledger.ledger.ranks import find_rank_files, summarize_ranks

    files = find_rank_files(ledger)
    if not files:
        return ledger
    _, worst, _ = summarize_ranks(files, summarizer=ledger_summary)
    err_console.print(f"memledger: note: {ledger} is {len(files)} rank ledgers; {verb} takes "
                      f"one rank's: rank {worst}'s ({files[worst]}, the highest peak); name "
                      "another rank's ledger to plan for it", style="yellow", markup=False,
                      soft_wrap=True)
    return files[worst]
