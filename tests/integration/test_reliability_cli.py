"""Issue 10, tried as a hostile user would, through the real CLI in fresh processes.

Each case of `reliability_cases.CASES` runs `python -m memledger ...` (or pytest) and checks
the exit code, that stderr is ONE line holding the message, and that the user's files are
byte for byte what they were. The cases need no torch run (the ledgers are written by
hand). The few faults that need a real run (signals, a full disk while tracing, counting,
xdist) are the tests below the parametrized one; docs/reliability.md is generated from
both (`python tools/reliability_table.py`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import own_plugins
from tests.integration.reliability_cases import CASES, PEAK_BYTES, RUN_CASES, Case

MEMLEDGER = [sys.executable, "-m", "memledger"]
# pytest in a fresh process loads memledger's and xdist's plugins alone, whatever else the
# venv installs (Note [The pytest processes a test starts load the plugins they name])
PYTEST_ARGS, PYTEST_ENV = own_plugins()
RUNNERS = {"memledger": MEMLEDGER, "pytest": [sys.executable, "-m", "pytest", *PYTEST_ARGS]}
# its `memledger` runs fork their workers from this process's zygote (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cli_zygote")
ROOT = Path(__file__).resolve().parents[2]


def _snapshot(d: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in names}


def _run(argv: list[str], cwd: Path, timeout: float = 120,
         **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT), **env}
    if argv[1:3] == ["-m", "pytest"]:
        env.update(PYTEST_ENV)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _run_in_process(argv: list[str], cwd: Path, capsys, monkeypatch
                    ) -> subprocess.CompletedProcess:
    """`memledger argv...` through `memledger.cli.main`, the function the command runs."""
    from memledger.cli import main

    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def _show(cwd: Path, *args: str) -> str:
    """`memledger show ARGS` through `memledger.cli.main` in this process, for a
    test whose fresh `trace` wrote the ledger (Note [The reading verbs in the pytest
    process], tests/conftest.py)."""
    from memledger.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(cwd):
        assert main(["show", *args]) == 0
    return out.getvalue()


# Every memledger case runs through `memledger.cli.main` in this process (a fresh Python
# process costs ~1.3 s of imports: 37 cases, a minute of the suite), and every eighth also
# as `python -m memledger` in a fresh process, the command's own way in; pytest's cases run
# pytest in a fresh process.
FRESH = {c.id for c in CASES[::8]} | {c.id for c in CASES if c.runner != "memledger"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, tmp_path: Path, capsys, monkeypatch) -> None:
    case.setup(tmp_path)
    before = _snapshot(tmp_path, case.protected)
    argv = [a.replace("{d}", str(tmp_path)) for a in case.argv]
    cwd = tmp_path / case.cwd if case.cwd else tmp_path
    if case.id in FRESH:
        r = _run(RUNNERS[case.runner] + argv, cwd)
    else:
        r = _run_in_process(argv, cwd, capsys, monkeypatch)
    assert r.returncode == case.code, (r.stdout, r.stderr)
    if case.runner == "memledger":
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("memledger")]
        if case.message:   # ONE line says what went wrong (a dim status line may precede it)
            assert len(lines) == 1, r.stderr
            assert lines[0].startswith("memledger: ") and case.message in lines[0], lines[0]
        assert "Traceback" not in r.stderr
    else:
        assert case.message in r.stderr + r.stdout
    assert _snapshot(tmp_path, case.protected) == before, "a user's file changed"
    for name in case.absent:
        assert not (tmp_path / name).exists(), name
    if case.stdout:
        assert case.stdout in r.stdout, r.stdout
    for name, text in case.files.items():
        assert text in (tmp_path / name).read_text(), name
    leftovers = [p.name for p in tmp_path.rglob(".*.partial")] + \
        [p.name for p in tmp_path.rglob(".*.tmp")]
    assert not leftovers, leftovers


def test_cases_and_table_agree() -> None:
    """docs/reliability.md is what tools/reliability_table.py makes of the cases now."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import reliability_table
    finally:
        sys.path.pop(0)
    assert (ROOT / "docs" / "reliability.md").read_text() == reliability_table.render(), \
        "run: python tools/reliability_table.py"


# ---- faults that need a real run ----------------------------------------------------------
SCRIPT = """
import os, pathlib, sys, threading, time, torch
torch.manual_seed(0)
body, head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
model = torch.nn.Sequential(body, head)
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "two":   # a backbone and a head optimizer, stepping after one backward
    opts = [torch.optim.SGD(body.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
    def prefetch():   # a helper thread that makes a tensor and stays alive, as loaders do
        globals()["side"] = torch.zeros(256)
        time.sleep(600)
    threading.Thread(target=prefetch, daemon=True).start()
else:
    opts = [torch.optim.SGD(model.parameters(), lr=0.1)]
for it in range(1, 9):
    pathlib.Path(f"ITER{it}").touch()
    try:
        loss = model(torch.randn(16, 8)).sum()
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
    except:   # a bare except, as careless scripts have: it must not swallow the stop
        if mode != "two":
            raise
    if mode == "sleep":
        pathlib.Path(f"STEP-{os.getpid()}").touch()
        time.sleep(60)
    if mode == "kill" and it == 2:   # the out-of-memory killer's signal
        os.kill(os.getpid(), 9)
    if mode == "osexit" and it == 2:
        os._exit(0)
"""


def _script(tmp_path: Path) -> Path:
    p = tmp_path / "train.py"
    p.write_text(textwrap.dedent(SCRIPT))
    return p


def _wait_for(pred, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("mode", ["kill", "osexit"])
def test_script_process_killed_or_ended_is_exit_3(tmp_path: Path, mode: str) -> None:
    """A script whose process dies (SIGKILL, `os._exit`) leaves no status: exit 3 naming
    why, never the raw status (247, 0 -> 2) or 1 (a finding), and the ledger kept."""
    script = _script(tmp_path)
    why = "killed by SIGKILL (the out-of-memory killer?)" if mode == "kill" else \
        "ended with status 0 before memledger finished (os._exit in the script?)"
    for verb in (["trace", str(script), "--steps", "5", "-o", "k.ledger"],
                 ["doctor", str(script), "--steps", "5"]):
        r = _run([*MEMLEDGER, *verb, "--", mode], tmp_path)
        assert r.returncode == 3, (verb[0], r.stderr)
        assert why in r.stderr and "Traceback" not in r.stderr, r.stderr
    shown = " ".join(_show(tmp_path, "k.ledger").split())   # the partial ledger reads
    # the steps it finished, not "traced": its peak may lie in the step it was in
    assert re.search(r"\d+ steps? completed · INCOMPLETE", shown), shown


def test_internal_error_exit_70(tmp_path: Path) -> None:
    code = ("import sys; from memledger import cli\n"
            "def boom():\n    raise ZeroDivisionError('a bug')\n"
            "cli.app.command(name='boom')(boom)\n"
            "sys.exit(cli.main(['boom']))\n")
    r = _run([sys.executable, "-c", code], tmp_path)
    assert r.returncode == 70, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("memledger: internal error (ZeroDivisionError: a bug); the "
                           "traceback is in "), line
    path = Path(line.split("the traceback is in ")[1].split(". This is a bug")[0])
    assert "ZeroDivisionError: a bug" in path.read_text()
    path.unlink()


def test_two_traces_one_output(tmp_path: Path) -> None:
    script = _script(tmp_path)
    cmd = [*MEMLEDGER, "trace", str(script), "--steps", "1", "--no-measure", "-o", "run.ledger"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env) for _ in range(2)]
    for p in procs:
        p.communicate(timeout=180)
        assert p.returncode == 0
    lines = (tmp_path / "run.ledger").read_text().splitlines()
    assert sum('"k":"header"' in ln for ln in lines) == 1     # one ledger, not two mixed
    kinds = [json.loads(ln)["k"] for ln in lines]
    # the summary trace keeps is the last line, once (both traces may have read the file
    # the last rename left: the second finds it grown and keeps none), or not there (the
    # other trace's rename came between: Note [The summary kept in the ledger])
    assert kinds.count("summary") <= 1 and kinds[-1 - (kinds[-1] == "summary")] == "end"
    assert json.loads(_show(tmp_path, "run.ledger", "--json"))["steps_traced"] == 1
    assert not list(tmp_path.glob(".*.partial"))


def test_trace_disk_full(tmp_path: Path) -> None:
    script = _script(tmp_path)
    r = _run([*MEMLEDGER, "trace", str(script), "--steps", "1", "--no-measure",
              "-o", "/dev/full"], tmp_path)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("memledger: no space left on the device writing the ledger")
    assert "script" not in line.split(";")[0]


def test_counting(tmp_path: Path) -> None:
    """Two optimizers: `--steps 2` is two iterations. A bare `except:`: the run stops there
    anyway. A tensor made on another thread: `show` does not claim to explain the peak."""
    script = _script(tmp_path)
    r = _run([*MEMLEDGER, "trace", str(script), "--steps", "2", "--no-measure",
              "-o", "run.ledger", "--", "two"], tmp_path)
    assert r.returncode == 0, r.stderr
    # the stop swallowed after iteration 2 ends the run at iteration 3's first torch op
    assert (tmp_path / "ITER3").exists() and not (tmp_path / "ITER4").exists()
    d = json.loads(_show(tmp_path, "run.ledger", "--json"))
    assert d["steps_traced"] == 2 and d["threads"] == 2
    text = " ".join(_show(tmp_path, "run.ledger").split())   # folded at this process's width
    assert "1 other Python thread(s) ran while tracing" in text


def test_sigint_to_memledger_pid(tmp_path: Path) -> None:
    """SIGINT to memledger's own pid (not the group) reaches the workers at once."""
    script = _script(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*MEMLEDGER, "trace", str(script), "--steps", "3", "-o",
                             "run.ledger", "--", "sleep"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    # both passes sleep in step 1: they run the script at once (Note [Warm allocator pass])
    _wait_for(lambda: len(list(tmp_path.glob("STEP-*"))) == 2)
    workers = [int(p.name.split("-")[1]) for p in tmp_path.glob("STEP-*")]
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "memledger: interrupted; the partial ledger is kept at run.ledger")
    assert not any(_alive(w) for w in workers)
    end = json.loads((tmp_path / "run.ledger").read_text().splitlines()[-1])
    assert end["k"] == "end" and end["status"] == "interrupted" and end["steps"] == 1


def test_sigterm_in_allocator_pass(tmp_path: Path) -> None:
    """SIGTERM to memledger while the allocator pass runs: the worker is stopped (no
    orphan), the message names the ledger that exists, complete."""
    script = _script(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*MEMLEDGER, "trace", str(script), "--steps", "1", "-o",
                             "run.ledger", "--", "sleep"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    # the ledger pass stops after step 1 (no sleep); the allocator pass sleeps in step 1
    _wait_for(lambda: list(tmp_path.glob("STEP-*")))
    worker = int(next(tmp_path.glob("STEP-*")).name.split("-")[1])
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == (
        "memledger: terminated (SIGTERM) during the allocator pass; the ledger (complete, "
        "without the allocator's peak) is kept at run.ledger")
    _wait_for(lambda: not _alive(worker), timeout=10)
    d = json.loads(_show(tmp_path, "run.ledger", "--json"))
    assert d["steps_traced"] == 1 and d["measured"]["source"] == "none"


XDIST_TESTS = """
import pytest, torch

def step():
    torch.manual_seed(0)
    m = torch.nn.Linear(256, 256, bias=False)
    m(torch.randn(64, 256)).relu().sum().backward()

@pytest.mark.memledger(peak="655368B")     # exactly the peak: passes
def test_at():
    step()

@pytest.mark.memledger(peak="655367B")     # one byte under: fails
def test_over():
    step()
"""


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_xdist_json(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    (tmp_path / "test_budget.py").write_text(XDIST_TESTS)
    r = _run(RUNNERS["pytest"] + ["-q", "-p", "no:cacheprovider", "-n", "2",
                                  "--memledger-json", "out.json", "test_budget.py"],
             tmp_path, timeout=300)
    assert r.returncode == 1, r.stdout
    d = json.loads((tmp_path / "out.json").read_text())
    assert d["ok"] is False and d["tests_failed"] == 1
    by_id = {t["nodeid"]: t for t in d["tests"]}
    assert by_id["test_budget.py::test_at"]["ok"] is True
    assert by_id["test_budget.py::test_over"]["ok"] is False
    assert by_id["test_budget.py::test_over"]["peak_bytes"] == 655_368   # see the plugin tests


def test_run_cases_point_at_tests() -> None:
    """Every row of the table that a real run backs names a test that exists."""
    here = Path(__file__).read_text()
    other = (ROOT / "tests" / "integration" / "test_trace_cli.py").read_text()
    for *_, test in RUN_CASES:
        file, _, name = test.rpartition("::") if "::" in test else (test, "", "")
        if file.endswith(".py"):                           # a test file elsewhere in tests/
            (path,) = list((ROOT / "tests").rglob(file))
            assert not name or f"def {name}(" in path.read_text(), test
            continue
        assert f"def {name or test}(" in here + other, test
    assert PEAK_BYTES == 6_400


# ---- the CI surface: the example workflow and the install lines ----------------------------
def test_ci_example_installs_memledger_caches_pip_and_fetches_a_baseline() -> None:
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((ROOT / "examples" / "ci" / "memledger.yml").read_text())
    steps = wf["jobs"]["memledger"]["steps"]
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip"
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "pip install torch-memledger" in runs and "pip install -e ." not in runs
    fetch = next(s for s in steps if "baseline" in s.get("name", "").lower())
    assert "gh run download" in fetch["run"] and fetch["env"]["GH_TOKEN"]
    check = next(s for s in steps if "memledger check" in s.get("run", ""))
    assert "--baseline baseline/gpt.ledger" in check["run"]


def test_every_install_line_names_the_distribution() -> None:
    """The PyPI name `memledger` is another project's: docs say `torch-memledger`."""
    import tomllib

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"] == \
        "torch-memledger"
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").rglob("*")]
    for path in docs:
        if path.is_file() and path.suffix in (".md", ".yml", ".py"):
            text = path.read_text()
            assert "pip install memledger" not in text, path
            assert "pip install 'memledger[" not in text, path
