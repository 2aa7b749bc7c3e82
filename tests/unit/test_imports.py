"""Heavy imports happen where they are used: the CLI's help, reading a ledger and the pytest
plugin start without torch (and without pandas/numpy where no ledger is read).

Each case runs in a fresh interpreter (this test process has torch loaded already) and
prints which of the heavy modules ended up in sys.modules.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_ledger_model import RECORDS

HEAVY = ("torch", "pandas", "numpy")

PROBE = """
import json, sys
{setup}
print("HEAVY=" + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def loaded_after(setup: str) -> set[str]:
    """The heavy modules a fresh interpreter holds after running `setup`."""
    code = PROBE.format(setup=setup, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("HEAVY="))
    return set(json.loads(line[len("HEAVY="):]))


@pytest.fixture(scope="module")
def small_ledger(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("imports") / "small.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return path


def test_help_imports_no_torch_pandas_or_numpy():
    # GIVEN `memledger --help` WHEN it runs THEN only typer/rich/pydantic-level code loads
    setup = ("from memledger.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    assert loaded_after(setup) == set()


def test_every_verbs_help_imports_no_torch():
    # each verb's own --help builds its options from the signature only
    setup = ("from memledger.cli import app, main\n"
             "import typer.main\n"
             "for name in typer.main.get_command(app).commands:\n"
             "    main([name, '--help'])")
    assert "torch" not in loaded_after(setup)


def test_show_reads_a_ledger_without_torch(small_ledger):
    # reading a ledger needs pandas and numpy (the model's tables), never torch
    setup = f"from memledger.cli import main\nassert main(['show', {str(small_ledger)!r}]) == 0"
    assert loaded_after(setup) == {"pandas", "numpy"}


def test_show_of_a_kept_summary_needs_neither_pandas_nor_numpy(tmp_path):
    # Note [The summary kept in the ledger]: the summary `trace` appended is read back with
    # pydantic alone (pandas' import was half of a 1 s `show`)
    from memledger.commands.common import summarize_and_keep

    path = tmp_path / "kept.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    summarize_and_keep(path)
    setup = (f"from memledger.cli import main\nassert main(['show', {str(path)!r}]) == 0\n"
             f"assert main(['show', {str(path)!r}, '--json']) == 0")
    assert loaded_after(setup) == set()


@pytest.mark.parametrize("verb", [["show", "--json"], ["export", "--format", "csv", "-o"],
                                  ["report", "-o"], ["predict", "-p", "checkpoint:fc"]])
def test_ledger_verbs_never_import_torch(small_ledger, verb):
    args = [verb[0], str(small_ledger), *verb[1:]]
    if args[-1] == "-o":
        args.append(str(small_ledger.with_suffix(".out")))
    setup = f"from memledger.cli import main\nmain({args!r})"
    assert "torch" not in loaded_after(setup)


def test_plan_without_measure_never_imports_torch(tmp_path):
    # `memledger plan` reads, replays and solves: numpy and pandas, never torch (nor a
    # timing probe: nothing is measured without --measure)
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from plan_ledgers import H8, T8, blocks_records

    path = tmp_path / "blocks.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in blocks_records(H8, T8)),
                    encoding="utf-8")
    setup = (f"from memledger.cli import main\n"
             f"assert main(['plan', {str(path)!r}, '--budget', '1GB', '--json']) == 0")
    assert loaded_after(setup) == {"pandas", "numpy"}


def test_package_and_plugin_import_light():
    # `import memledger` and the pytest11 plugin (loaded in every pytest session of a user
    # who installed memledger) hold nothing heavy until a ledger is read or a test traced
    assert loaded_after("import memledger, memledger.pytest_plugin") == set()


def test_ledger_writer_side_needs_no_pandas():
    # the traced process writes records; only the reader builds tables
    assert loaded_after("import memledger.ledger.writer, memledger.ledger.schema") == set()


def test_trace_parent_imports_no_torch():
    # GIVEN `memledger trace`'s own process (the workers import torch, not it) WHEN it
    # checks --steps-by and loads the session code THEN torch stays out (it cost ~1.5 s CPU
    # per trace when trace/steps.py imported torch at the top for STEPS_BY)
    setup = ("from memledger.commands.trace import _steps_by\n"
             "from memledger.trace.session import trace_script\n"
             "assert _steps_by('forward') == 'forward'")
    assert "torch" not in loaded_after(setup)
