"""Note [Warm allocator pass] (memledger/trace/session.py), through the real CLI: the
allocator pass runs its measured steps beside the ledger pass, its timed steps after it,
and its peak is dropped when the two passes did not cover the same steps.

The scripts tell the passes apart by the ledger pass's dispatch mode and write what happens
to a log in the order it happens; no test reads a clock.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MEMLEDGER = [sys.executable, "-m", "memledger"]
ROOT = Path(__file__).resolve().parents[2]
# its `memledger` runs fork their workers from this process's zygote (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cli_zygote")

HEAD = """
import pathlib, time, torch
from torch.utils._python_dispatch import _get_current_dispatch_mode
PASS = "ledger" if _get_current_dispatch_mode() is not None else "allocator"

def note(what):
    with open("events.log", "a") as fh:
        fh.write(f"{PASS} {what}\\n")

torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
state = {"step": 0}

def after_step(optimizer, args, kwargs):   # runs before memledger's global step hooks
    state["step"] += 1
    note(f"step {state['step']} done")
    pathlib.Path(f"{PASS}-{state['step']}").touch()

opt.register_step_post_hook(after_step)
"""

OVERLAP = HEAD + """
for it in range(1, 7):
    if PASS == "ledger" and it == 2:
        # the ledger pass's last step waits until the allocator pass has finished its
        # measured steps (2): it can only if the two run at once
        for _ in range(1200):
            if pathlib.Path("allocator-2").exists():
                break
            time.sleep(0.1)
        else:
            note("gave up waiting")
    note(f"step {it} begins")
    loss = model(torch.randn(16, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

# Traced, the script ends after one step; untraced it runs on: the passes see other steps.
DIVERGES = HEAD + """
for it in range(1, 7):
    if PASS == "ledger" and it == 2:
        break
    loss = model(torch.randn(16, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _trace(tmp_path: Path, body: str, steps: int) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([*MEMLEDGER, "trace", str(script), "--steps", str(steps), "-o",
                           "run.ledger"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=300)


def _show(tmp_path: Path, *args: str) -> str:
    """`memledger show run.ledger ARGS` through `memledger.cli.main`, the function the
    command runs, in this process: what these tests ask is the ledger the fresh `trace`
    wrote, and a fresh interpreter for `show` costs 0.4-1.4 s of CPU in imports (Note [The
    reading verbs in the pytest process], tests/conftest.py)."""
    from memledger.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(tmp_path):
        assert main(["show", "run.ledger", *args]) == 0
    return out.getvalue()


def _measured(tmp_path: Path) -> dict:
    return json.loads(_show(tmp_path, "--json"))


def test_measured_steps_run_beside_the_ledger_pass_timed_steps_after(tmp_path: Path) -> None:
    # GIVEN a script whose ledger pass holds its last step until the allocator pass has
    # finished its measured steps
    r = _trace(tmp_path, OVERLAP, steps=2)
    assert r.returncode == 0, r.stderr
    events = (tmp_path / "events.log").read_text().splitlines()
    assert "ledger gave up waiting" not in events
    # THEN the allocator's 2 measured steps ended before the ledger's last step began, and
    # its first timed step (3) began only after that last step
    assert events.index("allocator step 2 done") < events.index("ledger step 2 begins")
    assert events.index("ledger step 2 done") < events.index("allocator step 3 begins")
    # and the peak is kept: both passes covered steps 1-2
    d = _measured(tmp_path)
    assert d["steps_traced"] == 2 and d["measured"]["source"] == "cpu-profiler"
    assert d["measured"]["peak_bytes"] > 0


def test_allocator_peak_dropped_when_the_ledger_pass_traced_fewer_steps(
        tmp_path: Path) -> None:
    # GIVEN a script that ends after 1 step when traced and runs on untraced
    r = _trace(tmp_path, DIVERGES, steps=3)
    # THEN the ledger (1 step) is kept without the allocator's 3-step peak, and says why
    assert r.returncode == 0, r.stderr
    assert ("memledger: the allocator pass measured 3 step(s) where the ledger pass traced 1 "
            "(does the script run differently when traced?); the ledger has no measured "
            "peak") in r.stderr
    d = _measured(tmp_path)
    assert d["steps_traced"] == 1 and d["measured"]["source"] == "none"
    # and the allocator pass stopped at the end of its measured steps: no timed step ran
    events = (tmp_path / "events.log").read_text().splitlines()
    assert events.count("allocator step 3 done") == 1
    assert "allocator step 4 done" not in events


# Note [Two passes, one port]: the tutorial's one-process gloo job at a fixed MASTER_PORT.
# FIRST binds the port and holds it until the other pass has tried and failed; the other
# waits for it to bind first. Each pass writes what happened to events.log.
FIXED_PORT = HEAD + """
import os
import torch.distributed as dist
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = os.environ["TEST_FIXED_PORT"]
FIRST = os.environ["TEST_FIRST"]

def wait_for(name):
    for _ in range(1200):
        if pathlib.Path(name).exists():
            return
        time.sleep(0.1)
    note(f"gave up waiting for {name}")

if PASS != FIRST:
    wait_for(f"{FIRST}-bound")
try:
    dist.init_process_group("gloo", rank=0, world_size=1)
except Exception:
    note("port taken")
    pathlib.Path(f"{PASS}-failed").touch()
    raise
note("bound")
pathlib.Path(f"{PASS}-bound").touch()
if PASS == FIRST and not pathlib.Path("retried").exists():
    other = "allocator" if PASS == "ledger" else "ledger"
    wait_for(f"{other}-failed")
    pathlib.Path("retried").touch()
for it in range(1, 5):
    loss = model(torch.randn(16, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""


@pytest.mark.parametrize("first", ["ledger", "allocator"])
@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_a_fixed_port_taken_by_the_other_pass_runs_the_passes_apart(
        tmp_path: Path, monkeypatch, first: str) -> None:
    import socket

    with socket.socket() as s:   # a port free now, fixed for both passes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("TEST_FIXED_PORT", str(port))
    monkeypatch.setenv("TEST_FIRST", first)
    # GIVEN a pass that binds the script's fixed port while the other holds it
    r = _trace(tmp_path, FIXED_PORT, steps=2)
    # THEN the trace says so in one line, runs that pass again once the port is free, and
    # keeps both the ledger and the allocator's peak; no traceback reaches the user
    assert r.returncode == 0, r.stderr
    assert "running the two passes one after the other" in r.stderr
    assert "Traceback" not in r.stderr and "EADDRINUSE" not in r.stderr
    events = (tmp_path / "events.log").read_text().splitlines()
    second = "allocator" if first == "ledger" else "ledger"
    assert f"{second} port taken" in events and not any("gave up" in e for e in events)
    assert events.count(f"{second} bound") == 1
    d = _measured(tmp_path)
    assert d["steps_traced"] == 2 and d["measured"]["source"] == "cpu-profiler"
    assert d["measured"]["peak_bytes"] > 0


# Note [Two passes, one run?] (memledger/trace/call_count.py): layers chosen by a seeded
# `random`, or (`--differ`) fewer of them in the allocator pass, as an unseeded draw would
LAYER_DROP = HEAD + """
import random, sys
random.seed(0)
layers = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(12))
opt = torch.optim.SGD(layers.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(256, 64)
    for i, layer in enumerate(layers):
        if "--differ" in sys.argv and PASS == "allocator" and i % 3 == 0:
            continue
        if random.random() < 0.5:
            x = torch.relu(layer(x))
    x.sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.parametrize("differ", [False, True])
def test_show_says_when_the_two_passes_ran_different_code(tmp_path: Path, differ: bool) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LAYER_DROP))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    r = subprocess.run([*MEMLEDGER, "trace", str(script), "--steps", "2", "--no-timing", "-o",
                        "run.ledger", "--", *(["--differ"] if differ else [])], cwd=tmp_path,
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    m = _measured(tmp_path)["measured"]
    said = " ".join(_show(tmp_path).split())
    if differ:   # the allocator pass skipped some layers: fewer calls, and show says so
        assert m["module_calls"] < m["ledger_module_calls"]
        assert (f"the two runs of the script ran different code: {m['ledger_module_calls']} "
                f"module calls in the traced steps, {m['module_calls']} in the allocator's "
                "run of them") in said
        # a seeded script can differ too, by a choice made by timing (Note [Two passes,
        # one run?]): the fix names it beside the seeds
        assert "on the clock" in said and "fix a choice made by timing by its setting" in said
    else:        # the same layers in both passes: the same calls, and nothing said
        assert m["module_calls"] == m["ledger_module_calls"] > 0
        assert "ran different code" not in said


# Note [The allocator's history and a checkpoint's re-run] (memledger/trace/session.py):
# on CUDA the allocator's history makes a checkpoint's re-run fail with a SystemError; here
# the script raises one itself in the allocator pass (once, or every time)
HISTORY_BREAKS = HEAD + """
import sys
if PASS == "allocator":
    note("ran")
    if "--always" in sys.argv or not pathlib.Path("raised").exists():
        pathlib.Path("raised").touch()
        raise SystemError("<built-in method dropout of type object at 0x7f> returned NULL "
                          "without setting an exception")
for it in range(3):
    loss = model(torch.randn(16, 8)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("always", [False, True])
def test_an_allocator_pass_broken_by_a_system_error_runs_once_more(
        tmp_path: Path, always: bool) -> None:
    body = HISTORY_BREAKS.replace('"--always" in sys.argv', str(always))
    # GIVEN a script whose allocator pass fails with a SystemError the ledger pass never met
    r = _trace(tmp_path, body, steps=2)
    # THEN trace says so in one line and measures once more, without the allocator's
    # history: the ledger keeps the measured peak, and no traceback reaches the user
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("measuring again without it") == 1
    events = (tmp_path / "events.log").read_text().splitlines()
    assert events.count("allocator ran") == 2
    d = _measured(tmp_path)
    assert d["steps_traced"] == 2
    if not always:
        assert "Traceback" not in r.stderr
        assert d["measured"]["source"] == "cpu-profiler" and d["measured"]["peak_bytes"] > 0
    else:   # a second failure is the script's own: shown, once, and the peak is not kept
        assert r.stderr.count("Traceback") == 1 and "allocator pass failed" in r.stderr
        assert d["measured"] == {"peak_bytes": 0, "source": "none"}
