"""The pytest plugin on CPU, through pytest itself (`pytester`): marker, fixture, options.

Every marked test below traces the same tiny step. Its peak, in backward (all fp32):
  weight 256x256 = 262,144 B (parameter) + its gradient being made by mm 262,144 B
  (gradient: it lands in .grad) + x 64x256 = 65,536 B (input) + relu's gradient
  64x256 = 65,536 B (temporary) + two 4 B scalars (sum, ones_like)      = 655,368 B
So temporary at the peak = 65,536 + 4 + 4 = 65,544 B. (Until the fifty-sixth session the
weight's gradient read `temporary` here: a backward with no step after it met no pass end,
which names gradients; Note [Gradients named as the engine finishes], trace/collector.py.)
"""

from __future__ import annotations

import json

import pytest

# pytester's in-process runs restore sys.modules afterwards; torch must already be imported
# here, or every run would import it afresh, which torch does not survive.
import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (torch.manual_seed imports it on first use: the same reason)

import memledger.trace.api  # noqa: F401  (the same reason: it holds torch objects)

pytest_plugins = ["pytester"]


def in_a_subprocess(pytester, *args: str):
    """`pytester.runpytest_subprocess(*args)` with memledger's and xdist's plugins alone
    loaded, whatever else the venv installs (Note [The pytest processes a test starts load
    the plugins they name], tests/conftest.py); this process's environment as it was."""
    from tests.conftest import own_plugins

    argv, env = own_plugins(args)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        return pytester.runpytest_subprocess(*argv)

STEP = """
import pytest, torch

def step():
    torch.manual_seed(0)
    m = torch.nn.Linear(256, 256, bias=False)
    x = torch.randn(64, 256)
    m(x).relu().sum().backward()
"""


def test_marker_exactly_at_budget_passes_one_byte_over_fails(pytester):
    pytester.makepyfile(STEP + """
@pytest.mark.memledger(peak="655368B")
def test_at():
    step()

@pytest.mark.memledger("655367B")
def test_over():
    step()
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines([
        "*memledger: peak 655,368 B > budget 655,367 B (top at peak: parameter weight 256x256 "
        "256.0 KiB, gradient weight 256x256 256.0 KiB, input (Linear.forward) randn 64x256 "
        "64.0 KiB)",
        "FAILED *::test_over*",   # (the summary adds the message when the width allows)
    ])


def test_category_failure_reads_like_the_issue(pytester):
    pytester.makepyfile(STEP + """
@pytest.mark.memledger(peak="640KiB", temporary="60KiB", input="64KiB")
def test_step():
    step()
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    # peak 655,368 > 640 KiB = 655,360 (by 8 B); temporary 65,544 > 60 KiB = 61,440 by
    # 4,104 B = 4.0 KiB; input 65,536 = 64 KiB exactly: passes, so not named
    r.stdout.fnmatch_lines([
        "memledger: peak 655,368 B > budget 655,360 B (temporary +4.0 KiB: (script) "
        "threshold_backward 64x256 64.0 KiB, (script) sum scalar 4 B, *)",
        "  peak 655,368 B > budget 655,360 B by 8 B *",
        "  temporary 64.0 KiB > budget 60.0 KiB by 4.0 KiB *",
    ])
    assert "input 64.0 KiB > " not in r.stdout.str()


def test_bad_marker_fails_the_test_with_what_to_write(pytester):
    pytester.makepyfile(STEP + """
@pytest.mark.memledger(peak="800")
def test_unitless():
    step()

@pytest.mark.memledger(peek="800MiB")
def test_typo():
    step()
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(failed=2)
    r.stdout.fnmatch_lines_random([
        "memledger: @pytest.mark.memledger: peak: size '800' has no unit; write 800MiB, 800GiB "
        "or 800B",
        "memledger: @pytest.mark.memledger: unknown argument 'peek'; use peak, measure, phases, "
        "step_time or a category *",
    ])


def test_a_test_failing_on_its_own_keeps_its_own_failure(pytester):
    pytester.makepyfile(STEP + """
@pytest.mark.memledger(peak="1B")
def test_boom():
    step()
    assert 1 == 2, "its own failure"
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*AssertionError: its own failure*"])
    assert "budget" not in r.stdout.str()
    # the summary says it was never measured (it read "OVER 0 B"); and no warning fails
    # a project that runs pytest with -W error (pandas warned on a bool fill)
    r = pytester.runpytest("-p", "no:cacheprovider", "--memledger", "-W", "error")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["---- unmeasured  *::test_boom  (the test failed before*"])
    assert "Warning" not in r.stdout.str()


def test_fixture_traces_a_block_and_checks_it(pytester):
    pytester.makepyfile(STEP + """
def test_trace(memledger):
    with memledger.trace() as led:
        step()
    s = led.summary()
    assert s.at_peak["parameter"] == 256 * 256 * 4            # 262,144 B
    assert s.peak.bytes == 655_368
    r = memledger.check(led, peak="1MiB", temporary="64KiB")  # 65,544 <= 65,536? no:
    assert False, "unreachable: temporary 65,544 B > 64 KiB = 65,536 B"

def test_within(memledger):
    with memledger.trace() as led:
        step()
    r = memledger.check(led, "655368B", temporary="65544B")
    assert r.ok and r.peak_bytes == 655_368
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines([
        "*memledger: temporary 65,544 B > budget 65,536 B (temporary +8 B: *",
    ])
    assert "unreachable" not in r.stdout.str()


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_report_and_json_options_and_their_ini_twins(pytester):
    pytester.makepyfile(STEP + """
@pytest.mark.memledger(peak="1MiB")
def test_fits():
    step()

@pytest.mark.memledger(peak="1MiB", measure=True)
def test_measured():
    step()

@pytest.mark.memledger(peak="600KiB")
def test_over():
    step()

def test_plain():
    pass
""")
    out = pytester.path / "run.json"
    # in a subprocess: the profiler (measure=True) imports torch modules that an in-process
    # run would have to import again
    r = in_a_subprocess(pytester, "-p", "no:cacheprovider", "--memledger",
                        "--memledger-json", str(out))
    r.assert_outcomes(passed=3, failed=1)
    r.stdout.fnmatch_lines([
        "*= memledger: peak of each marked test =*",
        "ok  *640.0 KiB  test_report_and_json_options_and_their_ini_twins.py::test_fits",
        "OVER  640.0 KiB  *::test_over  (peak 640.0 KiB > budget 600.0 KiB *",
    ])
    data = json.loads(out.read_text())
    assert data["schema"] == "memledger.pytest/1" and data["ok"] is False
    by = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert sorted(by) == ["test_fits", "test_measured", "test_over"]   # marked tests only
    assert by["test_fits"]["peak_bytes"] == 655_368
    assert by["test_fits"]["peak_source"] == "ledger (no allocator measurement)"
    assert by["test_measured"]["peak_source"].startswith("allocator (cpu-profiler")
    assert by["test_over"]["violations"][0]["limit"] == "peak"

    # the ini twins: `memledger = true` and `memledger_json = PATH`
    pytester.makeini("[pytest]\nmemledger = true\nmemledger_json = ini.json\n")
    r = pytester.runpytest("-p", "no:cacheprovider", "-k", "test_fits")
    r.stdout.fnmatch_lines(["*= memledger: peak of each marked test =*"])
    assert json.loads((pytester.path / "ini.json").read_text())["ok"] is True
    r = pytester.runpytest("-p", "no:cacheprovider", "-k", "plain")    # nothing marked ran
    assert "peak of each marked test" not in r.stdout.str()


def test_plugin_is_light_when_unused(pytester):
    """No torch import at start-up or for unmarked tests; the marker is registered."""
    pytester.makeconftest("""
import sys
def pytest_sessionfinish(session):
    with open("modules.txt", "w") as f:
        f.write(" ".join(m for m in ("torch", "memledger.budget", "memledger.trace.api")
                         if m in sys.modules))
""")
    pytester.makepyfile("def test_plain():\n    assert True\n")
    r = in_a_subprocess(pytester, "-p", "no:cacheprovider", "--strict-markers")
    r.assert_outcomes(passed=1)
    assert (pytester.path / "modules.txt").read_text() == ""
    r = in_a_subprocess(pytester, "--markers")
    r.stdout.fnmatch_lines(["@pytest.mark.memledger(peak=None, *, measure=False, phases=None, "
                            "step_time=None, **categories): fail the test when *"])


def test_a_skipped_or_xfailed_marked_test_leaves_the_json_ok(pytester):
    # a session that passed (exit 0) wrote `"ok": false`: a skip in the body or an expected
    # failure was recorded as "the test failed before its budget was checked"
    pytester.makepyfile(STEP + """
@pytest.mark.memledger(peak="1MiB")
def test_fits():
    step()

@pytest.mark.memledger(peak="1MiB")
def test_skips():
    step()
    pytest.skip("no GPU here")

@pytest.mark.memledger(peak="1MiB")
@pytest.mark.xfail(reason="known")
def test_xfails():
    step()
    assert False
""")
    out = pytester.path / "run.json"
    r = pytester.runpytest("-p", "no:cacheprovider", "--memledger", "--memledger-json", str(out))
    r.assert_outcomes(passed=1, skipped=1, xfailed=1)
    r.stdout.fnmatch_lines_random([
        "skip unmeasured  *::test_skips  (skipped before its budget was checked)",
        "skip unmeasured  *::test_xfails  (xfailed before its budget was checked)",
        "ok  *640.0 KiB  *::test_fits"])
    data = json.loads(out.read_text())
    assert (data["ok"], data["exitstatus"]) == (True, 0)
    by = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert by["test_skips"]["skipped"] is True and by["test_skips"]["peak_bytes"] == 0
    assert by["test_xfails"]["skipped"] is True and "skipped" not in by["test_fits"]
    assert by["test_fits"]["peak_bytes"] == 655_368


def test_the_fixture_takes_what_the_api_takes(pytester):
    pytester.makepyfile(STEP + """
def test_options(memledger):
    with memledger.trace(steps_by="whole") as led:
        step()
    assert led.summary().steps_traced == 1
    with memledger.trace(fake=True, device="cuda") as big:
        step()                                       # the model is made inside: fake
    s = big.summary()
    assert s.device == "cuda:0" and s.at_peak["parameter"] == 256 * 256 * 4
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(passed=1)


def test_a_body_that_runs_nothing_in_its_thread_is_warned_about(pytester):
    # a marked test training in a worker thread passed at 0 B without a word
    pytester.makepyfile(STEP + """
import threading

@pytest.mark.memledger(peak="1KiB")
def test_in_a_thread():
    t = threading.Thread(target=step)
    t.start()
    t.join()

@pytest.mark.memledger(peak="1MiB")
def test_here():
    step()
""")
    r = pytester.runpytest("-p", "no:cacheprovider")
    r.assert_outcomes(passed=2, warnings=1)
    r.stdout.fnmatch_lines(["*::test_in_a_thread*",
                            "*PytestWarning: memledger: the test body ran no torch op in the "
                            "test's thread, so its budget was checked against 0 B*"])
    assert "test_here" not in r.stdout.str().split("warnings summary")[1]


def test_a_pytest_process_a_test_starts_loads_only_the_plugins_it_names(pytester):
    """Note [The pytest processes a test starts load the plugins they name]: of the
    installed `pytest11` entry points, such a process loads memledger's and xdist's alone
    (the dev venv holds others: jaxtyping's, typeguard's, anyio's; torchtyping's imports
    torch), and memledger's is the one its entry point names."""
    pytester.makeconftest("""
def pytest_sessionfinish(session):
    pm = session.config.pluginmanager
    with open("plugins.txt", "w") as f:
        f.write(" ".join(sorted(d.project_name for _, d in pm.list_plugin_distinfo())))
        f.write("\\n" + type(pm.get_plugin("memledger")).__name__ + " "
                + pm.get_plugin("memledger").__name__)
""")
    pytester.makepyfile("def test_plain():\n    assert True\n")
    in_a_subprocess(pytester, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    dists, plugin = (pytester.path / "plugins.txt").read_text().splitlines()
    assert dists == "pytest-xdist torch-memledger"
    assert plugin == "module memledger.pytest_plugin"
