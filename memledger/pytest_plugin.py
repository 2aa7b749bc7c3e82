"""pytest plugin for memledger, registered through the `pytest11` entry point.

    @pytest.mark.memledger(peak="800 MiB", activation="300 MiB")
    def test_train_step_fits(): ...              # the test body is traced; over budget fails

    def test_step(memledger):                    # the fixture traces any block
        with memledger.trace() as led:
            step()
        assert led.summary().at_peak["optimizer_state"] == 2 * param_bytes + counters

Options (each with an ini twin): `--memledger` (ini `memledger = true`) prints the peak of
every marked test at the end; `--memledger-json PATH` (ini `memledger_json`) writes them all.

Kept light: nothing here imports torch or the budget code until a marked test runs or the fixture is
used, so a test run that never uses memledger pays only for this module.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

_RESULT = pytest.StashKey["_Outcome"]()
_RUN = pytest.StashKey["list[dict]"]()


def memledger(peak: str | None = None, *, measure: bool = False,
              phases: dict[str, str] | None = None, step_time: dict | None = None,
              **categories: str) -> None:
    """fail the test when the memory of its body is over budget; sizes need a unit
    (800MiB binary, 800MB decimal), categories as keywords (activation="300MiB")."""


@dataclass
class _Outcome:
    error: str = ""            # the marker could not be read
    result: Any = None         # memledger.budget.CheckResult
    record: dict = field(default_factory=dict)


# ---- options and marker ----------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memledger", "memory budgets (memledger)")
    group.addoption("--memledger", action="store_true", default=None,
                    help="report the memory peak of every memledger-marked test at the end")
    group.addoption("--memledger-json", metavar="PATH", default=None,
                    help="write every marked test's peak and budget check as JSON to PATH")
    parser.addini("memledger", type="bool", default=False,
                  help="as --memledger: report the peak of every marked test")
    parser.addini("memledger_json", default="", help="as --memledger-json PATH")


def pytest_configure(config: pytest.Config) -> None:
    # help generated from the marker function, so it cannot drift from what is accepted
    doc = " ".join((memledger.__doc__ or "").split())
    sig = inspect.signature(memledger)
    sig = sig.replace(return_annotation=inspect.Signature.empty, parameters=[
        p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()])
    config.addinivalue_line("markers", f"memledger{sig}: {doc}")
    config.stash[_RUN] = []
    path = _option(config, "memledger_json", "memledger_json")
    if path and not hasattr(config, "workerinput"):  # checked before any test runs
        from memledger.errors import MemledgerError
        from memledger.outputs import check_output

        try:
            check_output(path, "--memledger-json file")
        except MemledgerError as e:
            raise pytest.UsageError(str(e)) from None


def _option(config: pytest.Config, name: str, ini: str) -> Any:
    v = config.getoption(name)
    return v if v not in (None, "") else config.getini(ini)


# ---- the marker ------------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    mark = item.get_closest_marker("memledger")
    if mark is None:
        yield
        return
    from memledger.budget.evaluate import evaluate
    from memledger.budget.marker import budget_from_marker
    from memledger.errors import MemledgerError

    state = item.stash[_RESULT] = _Outcome()
    try:
        budget, measure = budget_from_marker(mark.args, mark.kwargs)
    except MemledgerError as e:
        state.error = str(e)
        _record(item, {"nodeid": item.nodeid, "ok": False, "peak_bytes": 0,
                       "message": state.error})
        yield
        return
    from memledger.trace.api import trace

    with trace(measure=measure) as led:
        outcome = yield
    if outcome.excinfo is not None:  # the test failed on its own: that is the report
        # (or it was skipped, or failed as expected: pytest_runtest_makereport says which)
        state.record = {"nodeid": item.nodeid, "ok": False, "peak_bytes": 0,
                        "message": "the test failed before its budget was checked"}
        _record(item, state.record)
        return
    try:
        state.result = evaluate(led.ledger, budget)
    except MemledgerError as e:
        state.error = str(e)
        _record(item, {"nodeid": item.nodeid, "ok": False, "peak_bytes": 0,
                       "message": state.error})
        return
    r = state.result
    if not (led.ledger.end or {}).get("ev"):
        # no op at all in the test's thread: a body that trains in a worker thread (or a
        # subprocess) passed every budget silently at 0 B
        item.warn(pytest.PytestWarning(
            "memledger: the test body ran no torch op in the test's thread, so its budget "
            "was checked against 0 B; work in other threads or processes is not traced "
            "(call it from the test itself, or trace it with the `memledger` fixture there)"))
    state.record = {"nodeid": item.nodeid, "ok": r.ok, "peak_bytes": r.peak_bytes,
                    "peak_source": r.peak_source, "message": r.headline(),
                    **{k: v for k, v in r.to_json_dict().items()
                       if k in ("violations", "limits")}}
    _record(item, state.record)


def _record(item: pytest.Item, record: dict) -> None:
    item.config.stash[_RUN].append(record)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    if call.when != "call":
        return
    state = item.stash.get(_RESULT, None)
    if state is None:
        return
    rep = outcome.get_result()
    if rep.skipped and state.result is None and state.record:
        # `pytest.skip()` in the body, or an xfail that failed as expected, is no failure
        # of the session: its record said `"ok": false`, and so did the whole
        # --memledger-json file of a session that passed (exit 0)
        why = "xfailed" if hasattr(rep, "wasxfail") else "skipped"
        state.record.update(ok=True, skipped=True,
                            message=f"{why} before its budget was checked")
        return
    if state.error and rep.passed:
        rep.outcome = "failed"
        rep.longrepr = state.error
    elif state.result is not None:
        r = state.result
        rep.sections.append(("memledger", "\n".join(lim.line() for lim in r.limits)))
        if not r.ok and rep.passed:
            rep.outcome = "failed"
            rep.longrepr = "memledger: " + r.headline() + "\n" + "\n".join(
                "  " + v.line() for v in r.violations)


# ---- the fixture -----------------------------------------------------------------------------
class MemledgerFixture:
    """What the `memledger` fixture gives a test: trace a block, check a ledger."""

    def trace(self, path: str | Path | None = None, **options: Any):
        """`with memledger.trace() as led:` -> `led` acts as the Ledger after the block.
        Takes what `memledger.trace()` takes (`measure`, `max_steps`, `fake`, `device`,
        `steps_by`); it took only `path` and `measure`."""
        from memledger.trace.api import trace

        return trace(path, **options)

    def check(self, ledger: Any, *args: Any, **limits: Any):
        """Check a ledger against marker-style limits; fail the test when over budget.
        Returns the CheckResult (`.peak_bytes`, `.limits`, ...)."""
        from memledger.budget.evaluate import evaluate
        from memledger.budget.marker import budget_from_marker

        budget, _ = budget_from_marker(args, limits)
        result = evaluate(getattr(ledger, "ledger", ledger), budget)
        if not result.ok:
            pytest.fail("memledger: " + result.headline(), pytrace=False)
        return result


@pytest.fixture(name="memledger")
def memledger_fixture() -> MemledgerFixture:
    """Trace a block of the test (`with memledger.trace() as led:`) and check its budget."""
    return MemledgerFixture()


# ---- the end of the run ----------------------------------------------------------------------
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    records = config.stash.get(_RUN, [])
    if not _option(config, "memledger", "memledger") or not records:
        return
    from memledger.units import format_bytes

    terminalreporter.write_sep("=", "memledger: peak of each marked test")
    for rec in sorted(records, key=lambda r: -r["peak_bytes"]):
        # a test that failed on its own, or whose marker is wrong, was never measured
        skipped = rec.get("skipped", False)
        measured = not skipped and (rec["ok"] or "peak_source" in rec)
        verdict = "skip" if skipped else "ok  " if rec["ok"] else "OVER" if measured \
            else "----"
        peak = format_bytes(rec["peak_bytes"]) if measured else "unmeasured"
        terminalreporter.write_line(
            f"{verdict} {peak:>10}  {rec['nodeid']}"
            + ("" if rec["ok"] and not skipped else f"  ({rec['message']})"))


# Note [Results under pytest-xdist]
# Under `pytest -n N` the marked tests run in worker processes, each with its own stash. A
# worker sends its records to the controller in `workeroutput` when it ends; the controller
# gathers them (`pytest_testnodedown`) and alone writes --memledger-json. `ok` is true only
# when every marked test was within budget AND the session passed: a failed test, over
# budget or not, never leaves `"ok": true` behind.
@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    out = getattr(node, "workeroutput", None) or {}
    node.config.stash.setdefault(_RUN, []).extend(json.loads(out.get("memledger", "[]")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    records = config.stash.get(_RUN, [])
    if hasattr(config, "workerinput"):  # an xdist worker: the controller writes the file
        config.workeroutput["memledger"] = json.dumps(records)
        return
    path = _option(config, "memledger_json", "memledger_json")
    if not path:
        return
    from memledger.outputs import write_atomic

    failed = int(getattr(session, "testsfailed", 0))
    data = {"schema": "memledger.pytest/1",
            "ok": all(r["ok"] for r in records) and failed == 0 and int(exitstatus) == 0,
            "tests_failed": failed, "exitstatus": int(exitstatus),
            "tests": sorted(records, key=lambda r: r["nodeid"])}
    try:
        write_atomic(path, json.dumps(data, indent=2) + "\n", "--memledger-json file")
    except Exception as e:  # noqa: BLE001 - a report must not hide the session's own result
        config.get_terminal_writer().line(f"{e}", red=True)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
