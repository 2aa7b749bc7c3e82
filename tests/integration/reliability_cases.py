"""Issue 10's hostile-user cases, as data: what is done, the exit code, the one-line message,
what is kept. `test_reliability_cli.py` runs each through the CLI (a sample in a fresh process);
`tools/reliability_table.py` writes docs/reliability.md from the same list, so the table
can only say what a test checks.

No torch here, and no memledger import: the ledgers are written by hand (`ledger_lines`).
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# ---- a ledger written by hand -------------------------------------------------------------
# Ten events. fc.weight 1,000 B (parameter, live throughout); the batch 400 B (input, events
# 1-5); relu's output 3,000 B saved for backward (activation, events 2-4); backward's scratch
# 5,000 B (temporary, events 5-6); fc.weight's gradient 1,000 B (from event 6 on).
#   total peak at event 5: 1,000 + 400 + 5,000        = 6,400 B (no activation live there)
#   activation's own peak, events 2-4: 3,000 B, when the total is 1,000 + 400 + 3,000 = 4,400
PEAK_BYTES = 6_400
ACTIVATION_PEAK = 3_000


def ledger_lines(module: str = "fc", op: str = "relu", end: bool = True) -> list[dict]:
    recs: list[dict] = [
        {"k": "header", "schema": "memledger.ledger/1", "script": "train.py", "argv": [],
         "steps_requested": 1},
        {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
        {"k": "alloc", "sid": 0, "ev": 0, "bytes": 1000, "dev": "cpu", "dtype": "float32",
         "shape": [250], "op": "empty", "mod": "", "ph": "setup", "step": 1},
        {"k": "role", "sid": 0, "role": "parameter", "name": f"{module}.weight"},
        {"k": "alloc", "sid": 1, "ev": 1, "bytes": 400, "dev": "cpu", "dtype": "float32",
         "shape": [100], "op": "randn", "mod": "", "ph": "setup", "step": 1},
        {"k": "phase", "ev": 2, "ph": "forward", "step": 1},
        {"k": "role", "sid": 1, "role": "input"},
        {"k": "alloc", "sid": 2, "ev": 2, "bytes": 3000, "dev": "cpu", "dtype": "float32",
         "shape": [750], "op": op, "mod": module, "ph": "forward", "step": 1},
        {"k": "saved", "sid": 2, "ev": 2, "mod": module},
        {"k": "phase", "ev": 5, "ph": "backward", "step": 1},
        {"k": "unpack", "sid": 2, "ev": 5},
        {"k": "free", "sid": 2, "ev": 5, "last": 4},
        {"k": "alloc", "sid": 3, "ev": 5, "bytes": 5000, "dev": "cpu", "dtype": "float32",
         "shape": [1250], "op": "mm", "mod": module, "ph": "backward", "step": 1},
        {"k": "free", "sid": 1, "ev": 6, "last": 5},
        {"k": "alloc", "sid": 4, "ev": 6, "bytes": 1000, "dev": "cpu", "dtype": "float32",
         "shape": [250], "op": "mm", "mod": module, "ph": "backward", "step": 1},
        {"k": "role", "sid": 4, "role": "gradient", "name": f"{module}.weight"},
        {"k": "free", "sid": 3, "ev": 7, "last": 6},
        {"k": "phase", "ev": 7, "ph": "optimizer", "step": 1},
        {"k": "step", "step": 1, "ev": 8, "ns": 1000},
        {"k": "phase", "ev": 9, "ph": "other", "step": 2},
    ]
    if end:
        recs += [{"k": "live", "sid": 0, "last": 8}, {"k": "live", "sid": 4, "last": 8},
                 {"k": "end", "ev": 10, "status": "ok", "message": "", "steps": 1}]
    return recs


def write_ledger(path: Path, recs: list[dict] | None = None) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in (recs or ledger_lines())))
    return path


VICTIM = "print('the user\\'s own script: memledger must never overwrite it')\n"


# ---- setups: each gets the case's folder -------------------------------------------------
def s_victim(d: Path) -> None:
    (d / "victim.py").write_text(VICTIM)
    write_ledger(d / "run.ledger")
    (d / "notes.txt").write_text("the user's notes\n")


def s_notebook(d: Path) -> None:
    s_victim(d)
    (d / "train.ipynb").write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4,
                                               "nbformat_minor": 5, "x": None}))


def s_user_csv(d: Path) -> None:
    s_victim(d)
    (d / "run.csv").write_text("my,precious,data\n")


def s_alias(d: Path) -> None:
    s_victim(d)
    os.link(d / "run.ledger", d / "alias.csv")   # another name for the input


def s_markup(d: Path) -> None:
    write_ledger(d / "run.ledger", ledger_lines(module="[/x]"))


def s_script_tags(d: Path) -> None:
    write_ledger(d / "run.ledger", ledger_lines(module="<!--<script>"))


def s_formula(d: Path) -> None:
    write_ledger(d / "run.ledger", ledger_lines(module="=HYPERLINK(\"http://x\")", op="@SUM(1)"))


def s_doubled(d: Path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in ledger_lines())
    (d / "run.ledger").write_text(text + text)


def s_huge_event(d: Path) -> None:
    recs = ledger_lines(end=False)
    recs[7] = {**recs[7], "ev": 1e12}
    write_ledger(d / "run.ledger", recs)


def s_negative_peak(d: Path) -> None:
    write_ledger(d / "run.ledger", ledger_lines() + [
        {"k": "measured", "source": "cpu-profiler", "device": "cpu", "peak_bytes": -5}])


def s_snapshot(d: Path) -> None:
    snap = {"segments": [{"device": "abc", "address": 0, "total_size": 512, "blocks": []}],
            "device_traces": []}
    (d / "snap.pickle").write_bytes(pickle.dumps(snap))


def s_nested_pyproject(d: Path) -> None:
    write_ledger(d / "run.ledger")
    (d / "pyproject.toml").write_text('[tool.memledger.budget]\npeak = "6000B"\n')
    (d / "pkg").mkdir()
    (d / "pkg" / "pyproject.toml").write_text('[project]\nname = "pkg"\n')


def s_broken_pyproject(d: Path) -> None:
    write_ledger(d / "run.ledger")
    (d / "pyproject.toml").write_text('[tool.memledger.budget]\npeak = "6000B\n')


def s_tool_budget(d: Path) -> None:
    write_ledger(d / "run.ledger")
    (d / "pyproject.toml").write_text('[tool.memledger]\nbudget = "6000B"\n')


def s_tool_peak(d: Path) -> None:
    write_ledger(d / "run.ledger")
    (d / "pyproject.toml").write_text('[tool.memledger]\npeak = "6000B"\n')


def s_pytest(d: Path) -> None:
    (d / "test_nothing.py").write_text("def test_ok():\n    pass\n")


# ---- the cases ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    id: str
    item: int                      # issue 10's item
    fault: str                     # "input or fault" in docs/reliability.md
    argv: tuple[str, ...]          # after `python -m memledger`; {d} is the case's folder
    code: int
    message: str                   # in the one line on stderr ("" when the run succeeds)
    kept: str                      # "what is kept" in docs/reliability.md
    setup: Callable[[Path], None] = s_victim
    protected: tuple[str, ...] = ()  # files whose bytes must not change
    absent: tuple[str, ...] = ()     # files that must not appear
    cwd: str = ""                    # run in {d}/cwd
    stdout: str = ""                 # must appear on stdout (the verdict, the output)
    files: dict[str, str] = field(default_factory=dict)  # file -> text it must contain
    runner: str = "memledger"        # or "pytest"


CASES: tuple[Case, ...] = (
    # 1. never overwrite the user's files
    Case("trace-onto-script", 1, "`trace victim.py -o victim.py`",
         ("trace", "{d}/victim.py", "--steps", "1", "-o", "{d}/victim.py"),
         2, "is also an input of this command", "the script, byte for byte; nothing is run",
         protected=("victim.py",)),
    Case("trace-onto-other-file", 1, "`trace -o notes.txt` (an existing file, not a ledger)",
         ("trace", "{d}/victim.py", "-o", "{d}/notes.txt"),
         2, "is not a memledger ledger", "the file, byte for byte; nothing is run",
         protected=("notes.txt", "victim.py")),
    Case("check-ledger-onto-script", 1, "`check victim.py -o victim.py`",
         ("check", "{d}/victim.py", "--budget", "1GiB", "-o", "{d}/victim.py"),
         2, "is also an input of this command", "the script; nothing is run",
         protected=("victim.py",)),
    Case("report-onto-ledger", 1, "`report run.ledger -o run.ledger`",
         ("report", "{d}/run.ledger", "-o", "{d}/run.ledger"),
         2, "is also an input of this command", "the ledger, byte for byte",
         protected=("run.ledger",)),
    Case("export-onto-ledger", 1, "`export run.ledger -o run.ledger`",
         ("export", "{d}/run.ledger", "--format", "csv", "-o", "{d}/run.ledger"),
         2, "is also an input of this command", "the ledger, byte for byte",
         protected=("run.ledger",)),
    Case("export-onto-hard-link", 1, "`export -o alias.csv`, a hard link to the input ledger",
         ("export", "{d}/run.ledger", "--format", "csv", "-o", "{d}/alias.csv"),
         2, "is also an input of this command", "the ledger (same file, another name)",
         setup=s_alias, protected=("run.ledger",)),
    Case("import-onto-snapshot", 1, "`import snap.pickle -o snap.pickle`",
         ("import", "{d}/snap.pickle", "-o", "{d}/snap.pickle"),
         2, "is also an input of this command", "the snapshot, byte for byte",
         setup=s_snapshot, protected=("snap.pickle",)),
    Case("trace-bad-rank-onto-ledger", 1,
         "`trace --fake --world 2 --rank 5 -o run.ledger` (an existing ledger)",
         ("trace", "{d}/victim.py", "--fake", "--world", "2", "--rank", "5",
          "-o", "{d}/run.ledger"),
         2, "is not a rank of --world 2", "the ledger, byte for byte; nothing is run",
         protected=("run.ledger",)),
    Case("trace-nproc-fake", 1, "`trace --nproc 2 --fake` (--fake would be ignored)",
         ("trace", "{d}/victim.py", "--nproc", "2", "--fake", "-o", "{d}/run.ledger"),
         2, "does not apply with --nproc", "the ledger, byte for byte; nothing is run",
         protected=("run.ledger",)),
    Case("export-default-name-taken", 1,
         "`export run.ledger -f csv` where run.csv is the user's own file",
         ("export", "{d}/run.ledger", "-f", "csv"),
         2, "memledger did not write it", "the user's run.csv, byte for byte",
         setup=s_user_csv, protected=("run.csv",)),
    Case("report-onto-script", 1, "`report run.ledger -o victim.py` (the user's script)",
         ("report", "{d}/run.ledger", "-o", "{d}/victim.py"),
         2, "memledger did not write it", "the script, byte for byte",
         protected=("victim.py",)),
    Case("export-onto-notes", 1, "`export -f csv -o notes.txt` (the user's file)",
         ("export", "{d}/run.ledger", "-f", "csv", "-o", "{d}/notes.txt"),
         2, "memledger did not write it", "the file, byte for byte",
         protected=("notes.txt",)),
    Case("check-junit-onto-script", 1, "`check --junit victim.py`",
         ("check", "{d}/run.ledger", "--budget", "1GiB", "--junit", "{d}/victim.py"),
         2, "memledger did not write it", "the script, byte for byte; nothing is checked",
         protected=("victim.py",)),
    Case("export-format-not-the-extension", 1, "`export -f csv -o out.parquet`",
         ("export", "{d}/run.ledger", "-f", "csv", "-o", "{d}/out.parquet"),
         2, "names a .parquet file but --format csv writes .csv", "nothing written",
         absent=("out.parquet",)),
    # 2. outputs checked before running; results never dropped
    Case("compare-html-missing-folder", 2, "`compare --html missing/dir/x.html`",
         ("compare", "{d}/victim.py", "--policy", "checkpoint:*", "--html",
          "{d}/missing/dir/x.html"),
         2, "folder", "everything: refused before any run (seconds, not minutes)",
         protected=("victim.py",), absent=("missing",)),
    Case("check-junit-missing-folder", 2, "`check --junit missing/x.xml`",
         ("check", "{d}/run.ledger", "--budget", "1GiB", "--junit", "{d}/missing/x.xml"),
         2, "does not exist", "everything: refused before checking", protected=("run.ledger",)),
    Case("check-markdown-is-folder", 2, "`check --markdown .` (a directory)",
         ("check", "{d}/run.ledger", "--budget", "1GiB", "--markdown", "{d}"),
         2, "is a directory", "everything: refused before checking", protected=("run.ledger",)),
    Case("report-missing-folder", 2, "`report -o missing/r.html`",
         ("report", "{d}/run.ledger", "-o", "{d}/missing/r.html"),
         2, "does not exist", "the ledger", protected=("run.ledger",)),
    # a folder whose mode bits say writable where no file can be made (root in /proc; ACLs,
    # NFS, FUSE): refused up front (Note [A folder that says it is writable], outputs.py)
    Case("trace-into-a-folder-that-takes-no-file", 2, "`trace -o /proc/run.ledger`",
         ("trace", "{d}/victim.py", "--steps", "1", "-o", "/proc/run.ledger"),
         2, "cannot write the ledger '/proc/run.ledger'", "the script; nothing is run",
         protected=("victim.py",)),
    Case("check-junit-disk-full", 2, "`check --junit /dev/full` (disk full while writing)",
         ("check", "{d}/run.ledger", "--budget", "1GiB", "--junit", "/dev/full"),
         2, "no space left on the device", "the verdict, printed before the write failed",
         protected=("run.ledger",), stdout="PASS"),
    # 3. budgets are never silently skipped
    Case("budget-past-nested-pyproject", 3,
         "a nearer pyproject.toml without `[tool.memledger.budget]`, the parent's has one",
         ("check", "{d}/run.ledger"), 1, "over budget",
         "the parent's budget is used (6,400 B > 6,000 B: exit 1, not a silent pass)",
         setup=s_nested_pyproject, cwd="pkg", stdout="FAIL"),
    Case("budget-toml-error", 3, "a pyproject.toml with a TOML error",
         ("check", "{d}/run.ledger"), 2, "is not valid TOML",
         "nothing passes: exit 2 names the file", setup=s_broken_pyproject, cwd="."),
    Case("budget-tool-memledger-budget", 3, "`[tool.memledger] budget = \"6000B\"`",
         ("check", "{d}/run.ledger"), 1, "over budget", "read as the peak budget",
         setup=s_tool_budget, cwd=".", stdout="FAIL"),
    Case("budget-misplaced-key", 3, "`[tool.memledger] peak = \"6000B\"` (not in .budget)",
         ("check", "{d}/run.ledger"), 2, "budget keys go under [tool.memledger.budget]",
         "nothing passes: exit 2 says where the key belongs", setup=s_tool_peak, cwd="."),
    # 4. bad input is exit 2 with one line, never a traceback or "over budget"
    Case("policy-reversed-range", 4, "`--policy 'checkpoint:fc[9-0]'`",
         ("predict", "{d}/run.ledger", "--policy", "checkpoint:fc[9-0]"),
         2, "is not a valid glob", "the ledger", protected=("run.ledger",)),
    Case("measure-two-policies", 4, "`measure -p checkpoint:* -p offload:*` (it takes one)",
         ("measure", "{d}/victim.py", "-p", "checkpoint:*", "-p", "offload:*"),
         2, "measure takes one policy, not 2 (checkpoint:*, offload:*)",
         "nothing is run (the second -p used to replace the first)"),
    Case("compare-ledger-as-script", 4, "`compare run.ledger -p ...` (a ledger for the script)",
         ("compare", "{d}/run.ledger", "-p", "checkpoint:fc"),
         2, "is a memledger ledger, not a training script; it traced: train.py",
         "the ledger; nothing is run (it ran as Python: NameError, exit 3)",
         protected=("run.ledger",)),
    Case("trace-notebook", 4, "`trace train.ipynb` (a Jupyter notebook)",
         ("trace", "{d}/train.ipynb", "-o", "{d}/new.ledger"),
         2, "is a Jupyter notebook, not a script; export it first: jupyter nbconvert "
         "--to script", "the notebook; nothing is run (it ran as Python: NameError, exit 3)",
         setup=s_notebook, protected=("train.ipynb",), absent=("new.ledger",)),
    Case("show-script-as-ledger", 4, "`show victim.py` (a script for the ledger)",
         ("show", "{d}/victim.py"),
         2, "is not a memledger ledger (its first line is not JSON); trace it first: "
         "memledger trace", "the script, byte for byte; nothing is run",
         protected=("victim.py",)),
    Case("trace-ledger-as-script", 4, "`trace run.ledger -o new.ledger`",
         ("trace", "{d}/run.ledger", "-o", "{d}/new.ledger"),
         2, "is a memledger ledger, not a training script", "the ledger; no partial ledger",
         protected=("run.ledger",), absent=("new.ledger", "new.ledger.partial")),
    Case("budget-400-digits", 4, "a 400-digit budget",
         ("check", "{d}/run.ledger", "--budget", "1" + "0" * 399 + "B"),
         2, "has 400 digits", "the ledger", protected=("run.ledger",)),
    Case("module-named-markup", 4, "a module named `[/x]` (Rich markup)",
         ("show", "{d}/run.ledger"), 0, "", "printed as written: `[/x].weight`",
         setup=s_markup, stdout="[/x].weight"),
    Case("ledger-concatenated", 4, "a ledger concatenated with itself",
         ("show", "{d}/run.ledger"), 2, "holds 2 ledgers", "the file",
         setup=s_doubled, protected=("run.ledger",)),
    Case("snapshot-device-abc", 4, "a CUDA snapshot with `\"device\": \"abc\"`",
         ("import", "{d}/snap.pickle", "-o", "{d}/snap.ledger"),
         2, "is not a well-formed CUDA memory snapshot", "the snapshot; no ledger written",
         setup=s_snapshot, protected=("snap.pickle",), absent=("snap.ledger",)),
    Case("pytest-json-missing-folder", 4, "`pytest --memledger-json missing/r.json`",
         ("-p", "no:cacheprovider", "{d}/test_nothing.py", "--memledger-json",
          "{d}/missing/r.json"),
         4, "cannot write the --memledger-json file", "nothing runs: pytest's usage error (4)",
         setup=s_pytest, runner="pytest", absent=("missing",)),
    # 6. crafted input
    Case("event-index-1e12", 6, "a ledger record with `\"ev\": 1e12`",
         ("show", "{d}/run.ledger"), 2, "an event index is corrupt",
         "the file; nothing allocated for 10^12 events", setup=s_huge_event,
         protected=("run.ledger",)),
    Case("negative-measured-peak", 6, "an allocator peak of -5 B in a ledger, `check --budget`",
         ("check", "{d}/run.ledger", "--budget", "1KiB"), 2, "not a byte count",
         "the ledger; no verdict (it once passed any budget)", setup=s_negative_peak,
         protected=("run.ledger",)),
    Case("policy-5000-stars", 6, "a policy glob of 5,000 `*`",
         ("predict", "{d}/run.ledger", "--policy", "checkpoint:" + "a*" * 5000),
         2, "wildcards; at most", "the ledger; answered at once", protected=("run.ledger",)),
    Case("html-script-module", 6, "a module named `<!--<script>` in `report`",
         ("report", "{d}/run.ledger", "-o", "{d}/r.html"), 0, "",
         "the page's data: `<` written as `\\u003c` inside <script>",
         setup=s_script_tags, files={"r.html": "\\u003c!--\\u003cscript\\u003e"}),
    Case("csv-formula", 6, "CSV cells starting with `=`, `@` (formula injection)",
         ("export", "{d}/run.ledger", "--format", "csv", "-o", "{d}/t.csv"), 0, "",
         "cells prefixed with `'`: `'=HYPERLINK(...)`", setup=s_formula,
         files={"t.csv": "'=HYPERLINK"}),
    Case("export-disk-full", 6, "disk full (`export -o /dev/full`)",
         ("export", "{d}/run.ledger", "--format", "csv", "-o", "/dev/full"),
         2, "no space left on the device", "the ledger; never blames the script",
         protected=("run.ledger",)),
    # 8. CI
    Case("category-own-peak", 8, "`--category activation=2000B`; activations peak before "
         "the total", ("check", "{d}/run.ledger", "--category", "activation=2000B"),
         1, "over budget", "checked at activation's own peak (3,000 B), not at the total's (0 B)",
         stdout="FAIL"),
    Case("junit-on-exit-2", 8, "`check --junit` with an unreadable budget (exit 2)",
         ("check", "{d}/run.ledger", "--budget", "12", "--junit", "{d}/j.xml",
          "--markdown", "{d}/s.md"),
         2, "has no unit", "JUnit with an <error>, Markdown saying \"not checked\"",
         files={"j.xml": "<error", "s.md": "not checked (exit 2)"}),
)

# Faults that need a real training run (signals, a full disk while tracing, counting): one
# row each in the table, checked by the tests named here in test_reliability_cli.py.
RUN_CASES: tuple[tuple[int, str, int, str, str], ...] = (
    (1, "two `trace -o run.ledger` at once", 0, "one whole ledger (the last to finish); "
        "each streams to its own `.run.ledger.<pid>.partial`", "test_two_traces_one_output"),
    (4, "a bug in memledger (an unexpected exception)", 70,
        "one line naming the file with the traceback", "test_internal_error_exit_70"),
    (4, "a bug in one of memledger's hooks while the script runs (a step pre-hook's "
        "TypeError)", 70, "one line naming the file with the traceback; the partial ledger "
        "(was: exit 3, \"script raised TypeError\", the script blamed)",
        "test_script_errors.py::test_a_failure_in_memledgers_own_hook_is_memledgers"),
    (4, "a bug in applying a policy while the script runs (`measure`, `compare`: the policy "
        "installer's hooks)", 70, "one line naming the file with the traceback (was: exit 3; "
        "it hid `compare`'s perturbed-saves variant crashing on 8-bit weights)",
        "test_script_errors.py::test_a_failure_in_the_policy_installers_hooks_is_memledgers"),
    (5, "`kill -INT <memledger pid>` mid-trace", 130,
        "the partial ledger; the worker stops at once", "test_sigint_to_memledger_pid"),
    (5, "`kill -TERM <memledger pid>` in the allocator pass", 130,
        "the complete ledger (without the allocator's peak); no orphan worker",
        "test_sigterm_in_allocator_pass"),
    (5, "Ctrl-C to the process group mid-trace", 130, "the partial ledger",
        "test_trace_cli.py::test_ctrl_c_mid_trace_keeps_ledger"),
    (3, "the script's process killed (SIGKILL) or ended by `os._exit` mid-run", 3,
        "one line naming the signal or status; the partial ledger",
        "test_script_process_killed_or_ended_is_exit_3"),
    (6, "disk full while tracing (`trace -o /dev/full`)", 2,
        "one line; the script is not blamed", "test_trace_disk_full"),
    (6, "a full TMPDIR (a 64 KiB tmpfs) under `compare`, `measure -p offload:**`", 2,
        "one line naming the folder: the gradient capture or offload's copies found no "
        "space, set TMPDIR elsewhere; the partial capture removed (was: exit 3, the script "
        "blamed)", "test_full_temp_folder.py"),
    (6, "a full TMPDIR under `trace`", 0, "the ledger; its offload probe could not run, "
        "and `predict` says why beside the calibration's price",
        "test_recompute_probe.py::test_an_offload_probe_that_fails_says_why_and_the_others_still_answer"),
    (7, "two optimizers, a bare `except:`, a tensor made on another thread", 0,
        "`--steps 2` = two iterations; the run stops there; `show` warns about the thread",
        "test_counting"),
    (8, "`pytest -n 2 --memledger-json` with a test over budget", 1,
        "the workers' results, `\"ok\": false`", "test_xdist_json"),
)
