"""Checking a hand-built ledger against budgets: exact bytes, the boundary, the messages.

The ledger (event: what happens; live bytes after the event):
  ev0 setup     fc.weight parameter 1000 B                               1000
  ev1 forward   activation 400 B made by `fc`, saved for backward        1400
  ev2 forward   temporary 100 B (freed at ev3)                           1500
  ev3 backward  gradient of fc.weight 1000 B                             2400  <- peak
  ev4 backward  the activation is freed                                  2000
  ev5 optimizer optimizer_state 200 B                                    2200
At the peak (ev3): parameter 1000 + activation 400 + gradient 1000 = 2400.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from memledger.budget import build_budget, evaluate
from memledger.budget.junit import junit_xml
from memledger.budget.markdown import markdown
from memledger.errors import BudgetError
from memledger.ledger.model import Ledger


def make_ledger(act: int = 400, measured: int | None = None, name: str = "fc.weight",
                shape: tuple = (10, 25), step_ns: tuple = (3_000_000,)) -> Ledger:
    recs = _records(act, name, shape, step_ns)
    if measured is not None:
        recs.append({"k": "measured", "source": "cpu-profiler", "device": "cpu",
                     "peak_bytes": measured})
    recs.append({"k": "end", "ev": 6, "status": "ok"})
    return Ledger.from_records(recs)


def _records(act: int = 400, name: str = "fc.weight", shape: tuple = (10, 25),
             step_ns: tuple = (3_000_000,)) -> list[dict]:
    """The docstring's ledger up to its end record."""
    recs = [
        {"k": "header", "schema": "memledger.ledger/1"},
        {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 1000, "dtype": "float32",
         "shape": list(shape), "op": "empty", "mod": "", "ph": "setup", "step": 1},
        {"k": "role", "sid": 0, "role": "parameter", "name": name},
        {"k": "phase", "ev": 1, "ph": "forward", "step": 1},
        {"k": "alloc", "sid": 1, "ev": 1, "bytes": act, "dtype": "float32", "shape": [act // 4],
         "op": "aten.relu.default", "mod": "fc", "ph": "forward", "step": 1},
        {"k": "saved", "sid": 1, "ev": 1, "mod": "fc"},
        {"k": "alloc", "sid": 2, "ev": 2, "bytes": 100, "shape": [25], "op": "aten.mul.default",
         "mod": "fc", "ph": "forward", "step": 1},
        {"k": "free", "sid": 2, "ev": 3, "last": 2},
        {"k": "phase", "ev": 3, "ph": "backward", "step": 1},
        {"k": "alloc", "sid": 3, "ev": 3, "bytes": 1000, "shape": list(shape),
         "op": "aten.mm.default", "mod": "fc", "ph": "backward", "step": 1},
        {"k": "role", "sid": 3, "role": "gradient", "name": name},
        {"k": "free", "sid": 1, "ev": 4, "last": 3},
        {"k": "phase", "ev": 5, "ph": "optimizer", "step": 1},
        {"k": "alloc", "sid": 4, "ev": 5, "bytes": 200, "shape": [50], "op": "zeros_like",
         "mod": "", "ph": "optimizer", "step": 1},
        {"k": "role", "sid": 4, "role": "optimizer_state", "name": name + ".exp_avg"},
    ]
    return recs + [{"k": "step", "step": i + 1, "ev": 5, "ns": ns}
                   for i, ns in enumerate(step_ns)]


def check(led, base=None, **data):
    return evaluate(led, build_budget(data, "test"), baseline=base, baseline_name="base")


def test_the_hand_built_ledger_is_what_the_docstring_says():
    led = make_ledger()
    assert led.peak().bytes == 2400                       # 1000 + 400 + 1000
    assert led.at_peak()["activation"] == 400


def test_exactly_at_budget_passes_one_byte_over_fails():
    led = make_ledger()
    at = check(led, peak="2400B")
    assert at.ok and at.peak_bytes == 2400 and at.violations == []
    over = check(led, peak="2399B")
    assert not over.ok
    (v,) = over.violations
    assert (v.limit, v.budget_bytes, v.actual_bytes, v.over) == ("peak", 2399, 2400, 1)
    assert v.line() == ("peak 2,400 B > budget 2,399 B by 1 B (top at peak: parameter "
                        "fc.weight 10x25 1000 B, gradient fc.weight 10x25 1000 B, "
                        "activation fc relu 100 400 B)")
    assert over.peak_source == "ledger (no allocator measurement)"


def test_measured_peak_is_checked_when_present():
    led = make_ledger(measured=2432)                      # 32 B the ledger cannot explain
    r = check(led, peak="2431B", categories={"workspace": "32B"})
    assert r.peak_source == "allocator (cpu-profiler)"
    assert r.peak_bytes == 2432 and r.ledger_peak_bytes == 2400
    assert [(v.limit, v.actual_bytes) for v in r.violations] == [("peak", 2432)]
    assert r.limits[1].actual_bytes == 32 and r.limits[1].ok   # workspace = 2432 - 2400


def test_per_category_limits_name_the_tensors_of_that_category():
    led = make_ledger()
    r = check(led, categories={"activation": "399B", "gradient": "1000B"})
    assert [(lim.limit, lim.ok) for lim in r.limits] == [
        ("category:activation", False), ("category:gradient", True)]
    (v,) = r.violations
    assert v.actual_bytes == 400 and v.over == 1
    assert [t.module for t in v.top] == ["fc"]            # only activations, not the gradient
    assert v.line() == "activation 400 B > budget 399 B by 1 B (top at peak: fc relu 100 400 B)"
    # the one-line test failure, in the shape of `peak X > budget Y (activation +Z: ...)`
    r2 = check(led, peak="2000B", categories={"activation": "300B"})
    assert r2.headline() == ("peak 2.3 KiB > budget 2.0 KiB "
                             "(activation +100 B: fc relu 100 400 B)")


def test_per_phase_limits():
    led = make_ledger()
    r = check(led, phases={"forward": "1500B", "backward": "2399B", "zero_grad": "1B"})
    got = {lim.limit: (lim.actual_bytes, lim.ok) for lim in r.limits}
    assert got == {
        "phase:forward": (1500, True),                    # ev2: 1000 + 400 + 100
        "phase:backward": (2400, False),                  # ev3
        "phase:zero_grad": (0, True),                     # never seen
    }


def test_baseline_regression():
    base = make_ledger(act=400)                           # peak 2400
    grown = make_ledger(act=520)                          # peak 2520 = 2400 + 120 (5.0%)
    assert check(grown, base=base, baseline={"max_increase": "5%"}).ok  # 2400*1.05 = 2520
    r = check(make_ledger(act=524), base=base, baseline={"max_increase": "5%"})
    (v,) = r.violations                                   # 2524 > 2520
    assert (v.limit, v.budget_bytes, v.actual_bytes) == ("baseline", 2520, 2524)
    assert [(g.category, g.module, g.delta_bytes) for g in v.growth] == [
        ("activation", "(all)", 124), ("activation", "fc", 124)]
    assert "grew most: activation +124 B, activation fc +124 B" in v.line()
    r = check(make_ledger(act=524), base=base, baseline={"max_increase": "124B"})
    assert r.ok                                           # 2400 + 124 = 2524


def test_baseline_from_another_model_is_refused():
    base = make_ledger(name="fc.weight")
    other = make_ledger(name="head.weight")
    with pytest.raises(BudgetError) as e:
        check(other, base=base, baseline={"max_increase": "5%"})
    assert str(e.value) == (
        "memledger: baseline base is from another model: the parameter sets differ (1 only "
        "here (e.g. head.weight 10x25); 1 only in the baseline (e.g. fc.weight 10x25)); record "
        "the baseline from the same model")
    with pytest.raises(BudgetError, match="from another model"):  # same name, other shape
        check(make_ledger(shape=(25, 10)), base=base, baseline={"max_increase": "5%"})


def test_baseline_of_another_step_count_is_refused():
    """A 1-step baseline's peak holds no optimizer state: against a 2-step run it read as
    growth where nothing grew. Same step counts (2 or more either way) compare."""
    one, two = make_ledger(), make_ledger(step_ns=(3_000_000, 3_000_000))
    with pytest.raises(BudgetError, match="baseline base traced 1 step and this ledger 2"):
        check(two, base=one, baseline={"max_increase": "5%"})
    assert check(two, base=make_ledger(step_ns=(1, 2, 3)), baseline={"max_increase": "5%"}).ok


def test_max_increase_without_baseline_ledger():
    with pytest.raises(BudgetError, match="needs a baseline ledger; pass --baseline"):
        check(make_ledger(), baseline={"max_increase": "5%"})


def test_step_time_is_opt_in_with_tolerance():
    # steps of 9 ms, 4 ms, 6 ms: the first is left out, median(4, 6) = 5 ms
    led = make_ledger(step_ns=(9_000_000, 4_000_000, 6_000_000))
    r = check(led, step_time={"max": "4.6ms", "tolerance": "10%"})   # 4.6 * 1.1 = 5.06 ms
    assert r.ok and r.limits[0].actual_s == pytest.approx(0.005)
    r = check(led, step_time={"max": "4.5ms", "tolerance": "10%"})   # 4.95 ms < 5 ms
    assert not r.ok and r.violations[0].budget_bytes is None


def test_json_contract():
    d = check(make_ledger(), peak="2399B").to_json_dict()
    assert d["schema"] == "memledger.check/1"
    assert d["ok"] is False and d["peak_bytes"] == 2400
    assert [{k: v[k] for k in ("limit", "budget_bytes", "actual_bytes")}
            for v in d["violations"]] == [
        {"limit": "peak", "budget_bytes": 2399, "actual_bytes": 2400}]


# ---- reports: JUnit XML (parsed back) and Markdown ----------------------------------------
def result3():
    # peak 2400 B (ledger); activation 400 B; gradient 1000 B (see test_budget_evaluate)
    b = build_budget({"peak": "2400B", "categories": {"activation": "399B",
                                                      "gradient": "1000B"}}, "t")
    return evaluate(make_ledger(), b)


def test_junit_one_testcase_per_limit_and_a_failure_per_violation():
    root = ET.fromstring(junit_xml(result3()))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors")) \
        == ("memledger", "3", "1", "0")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["peak", "category:activation", "category:gradient"]
    assert all(c.get("classname") == "memledger.budget" for c in cases)
    assert [c.find("failure") is not None for c in cases] == [False, True, False]
    fail = cases[1].find("failure")
    assert fail.get("message") == ("activation 400 B > budget 399 B by 1 B "
                                   "(top at peak: fc relu 100 400 B)")
    assert "budget as written: 399B (= 399 B)" in fail.text
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["peak_bytes"] == "2400"


def test_markdown_summary():
    md = markdown(result3())
    lines = md.splitlines()
    assert lines[0] == "### memledger budget: ❌ 1 over budget"
    assert "| `peak` | 2400B (= 2.3 KiB) | 2,400 B | 0 B | ok |" in lines
    assert "| `category:activation` | 399B (= 399 B) | 400 B | -1 B | **OVER** |" in lines
    assert lines[-1] == ("- activation 400 B > budget 399 B by 1 B "
                         "(top at peak: fc relu 100 400 B)")


@pytest.mark.parametrize("width", [60, 80])
def test_terminal_table_keeps_every_limit_readable_at_60_and_80_columns(width, monkeypatch):
    # at 60 columns an unbreakable `category:optimizer_state` (24 cells) once left "as
    # written" one cell wide: "1GB (= 953.7 MiB)" ran down the page a letter per line
    from io import StringIO

    from rich.console import Console

    from memledger.commands import check as check_cmd

    con = Console(file=StringIO(), width=width, color_system=None)
    monkeypatch.setattr(check_cmd, "console", con)
    monkeypatch.setattr(check_cmd, "err_console", con)
    b = build_budget({"peak": "1GB", "categories": {"optimizer_state": "1KiB"}}, "t")
    check_cmd.print_result(evaluate(make_ledger(), b), "t.ledger")
    lines = [ln.rstrip() for ln in con.file.getvalue().splitlines()]
    table = lines[lines.index(next(ln for ln in lines if ln.startswith("limit"))):][:4]
    assert max(len(ln) for ln in lines if "│" in ln or "  " in ln) <= width
    if width == 80:   # room for everything on one line each
        assert table[1].split()[:4] == ["peak", "1GB", "(=", "953.7"]
        assert table[2].split()[:2] == ["category:optimizer_state", "1KiB"]
    else:             # the limit breaks after its colon: the table stays 6 lines tall
        assert any(ln.split()[:2] == ["category:", "1KiB"] for ln in table + lines)
        end = next(i for i, ln in enumerate(lines) if ln.startswith("each category"))
        assert end - lines.index(table[0]) == 6, "\n".join(lines)


def test_a_backward_pass_outside_the_step_has_a_limit_of_its_own():
    """Note [Budget phases: the reported ones and the passes outside the step]
    (budget/model.py): after the step, an evaluation's pass begun between steps that no
    optimizer step follows (ev7, 300 B) is read under `other`, where it began, and alone
    under `backward_outside_step`; `backward` is the step's (ev3). Before, the key was
    refused ("unknown phase 'backward_outside_step'; known: setup, ..., other")."""
    led = Ledger.from_records([
        *_records(),
        {"k": "phase", "ev": 6, "ph": "other", "step": 2},
        {"k": "alloc", "sid": 5, "ev": 6, "bytes": 50, "shape": [12], "op": "aten.randn.default",
         "mod": "", "ph": "other", "step": 2},
        {"k": "phase", "ev": 7, "ph": "backward", "step": 2},
        {"k": "alloc", "sid": 6, "ev": 7, "bytes": 300, "shape": [75], "op": "aten.mm.default",
         "mod": "fc", "ph": "backward", "step": 2},
        {"k": "free", "sid": 6, "ev": 8, "last": 7},
        {"k": "phase", "ev": 8, "ph": "other", "step": 2},
        {"k": "end", "ev": 9, "status": "ok"}])
    r = check(led, phases={"backward": "2400B", "other": "2550B",
                           "backward_outside_step": "2549B"})
    got = {lim.limit: (lim.actual_bytes, lim.ok) for lim in r.limits}
    assert got == {"phase:backward": (2400, True),               # ev3, the step's pass
                   "phase:other": (2550, True),                  # ev7: 2200 + 50 + 300
                   "phase:backward_outside_step": (2550, False)}  # ev7 alone
    (v,) = r.violations
    assert v.line().startswith("peak of the backward passes outside the step 2,550 B > "
                               "budget 2,549 B by 1 B")
    assert check(make_ledger(), phases={"backward_outside_step": "1B"}).limits[0].note == \
        "phase not seen"
